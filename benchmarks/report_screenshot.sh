#!/usr/bin/env bash
# Screenshot an mltb report page in headless Chromium (Debian: apt-get install -y chromium).
# usage: benchmarks/report_screenshot.sh REPORT_HTML OUT_PNG [HEIGHT]
#   e.g. mltb report mltb-runs/<run> --out reports/ && benchmarks/report_screenshot.sh reports/index.html /tmp/report.png
set -euo pipefail
page=$(realpath "$1"); out=$(realpath -m "$2"); height=${3:-2000}
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[ -n "$browser" ] || { echo "no chromium found (apt-get install -y chromium)" >&2; exit 2; }
profile=$(mktemp -d); trap 'rm -rf "$profile"' EXIT
timeout 120 "$browser" --headless --no-sandbox --disable-gpu --no-first-run --disable-background-networking \
  --disable-component-update --disable-sync --user-data-dir="$profile" --hide-scrollbars \
  --window-size="${MLTB_SHOT_WIDTH:-1280}","$height" --screenshot="$out" "file://$page" >/dev/null 2>&1
[ -s "$out" ] || { echo "chromium wrote no screenshot" >&2; exit 1; }
echo "$out"
