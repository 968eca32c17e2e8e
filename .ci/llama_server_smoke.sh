#!/usr/bin/env bash
# Smoke of the zero-patch path (docs/local-model.md, "llama.cpp's own server"): llama.cpp's own `llama-server`,
# built from the llama.cpp that the installed llama-cpp-python release vendors (its sdist from PyPI), serving
# the default model's GGUF (the file mltb assembled from its pinned parts; no weights are downloaded), and
# one ReAct trial of one LLM call through the `openai:` backend against it. A planner failure is expected at
# this budget; an infrastructure error, no record, or a record without counted tokens fails the smoke. One
# call: on a loaded 2-core box a ~18k-token prompt (the tool definitions of every tool that takes a loaded
# frame) takes over 15 minutes, and a 3-candidate expansion (n = 3) decoded at 0.2 tokens/s per sequence
# (docs/local-model.md has the figures). Build and smoke times are printed.
#
# LLAMA_SERVER_DIR=<dir> keeps the source and the build there (a second run rebuilds only what changed);
# unset, both go to a scratch directory removed on exit. Usage: bash .ci/llama_server_smoke.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source .ci/llama_cpp_env.sh   # llama.cpp without AMX kernels (see there); the same CMAKE_ARGS as the pip build
tmp="$(mktemp -d)"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
root="${LLAMA_SERVER_DIR:-$tmp/llama-server}"
mkdir -p "$root"

# The llama.cpp that mltb's engine runs: the one vendored by the installed llama-cpp-python release.
version="$(python -c 'from importlib.metadata import version; print(version("llama-cpp-python"))')"
src="$root/llama-cpp-python-$version/vendor/llama.cpp"
started=$(date +%s)
if [ ! -f "$src/tools/server/CMakeLists.txt" ]; then
  python -m pip download -q "llama-cpp-python==$version" --no-deps --no-binary :all: -d "$tmp/sdist"
  mkdir -p "$root/llama-cpp-python-$version"
  tar xzf "$tmp/sdist/llama_cpp_python-$version.tar.gz" -C "$root/llama-cpp-python-$version" \
    --strip-components=1 "llama_cpp_python-$version/vendor/llama.cpp"
fi
fetched=$(date +%s)
# Only the server target. No curl (no model downloads), no OpenSSL (plain HTTP on localhost), no prebuilt
# web UI (it would be fetched from Hugging Face), nothing but the server's own dependencies.
build="$root/build-$version"
# shellcheck disable=SC2086 # CMAKE_ARGS is a list of flags
nice cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
  -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF $CMAKE_ARGS >"$tmp/configure.log" 2>&1 \
  || { tail -40 "$tmp/configure.log" >&2; echo "llama-server smoke: cmake could not configure" >&2; exit 1; }
nice cmake --build "$build" --target llama-server -j 2 >"$tmp/build.log" 2>&1 \
  || { tail -40 "$tmp/build.log" >&2; echo "llama-server smoke: the build failed" >&2; exit 1; }
server="$build/bin/llama-server"
built=$(date +%s)
echo "llama-server smoke: llama.cpp of llama-cpp-python $version fetched in $((fetched - started)) s," \
     "llama-server built in $((built - fetched)) s ($server)"

# The default model's file (assembled and hash-checked from its installed parts) and the context mltb's own
# server gives it.
read -r model n_ctx < <(python -c '
from mltb_core.llm.backends import parse_model
from mltb_core.llm.local.backend import resolve_model_path, server_context
default = parse_model("local").value
print(resolve_model_path(default), server_context(default))')
port="$(python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
# As mltb's own server: a reply capped at 512 tokens, 2 GiB of prompt cache in RAM, one thread decoding (more
# spin on each other on a shared box) and every core evaluating prompts. The default 4 slots share one KV cache
# of the whole context (each slot may use all of it). Not niced: a niced server on a loaded box decoded 0.2
# tokens/s per slot.
"$server" -m "$model" --host 127.0.0.1 --port "$port" -c "$n_ctx" -n 512 --cache-ram 2048 \
  --threads 1 --threads-batch "$(nproc)" \
  >"$tmp/server.log" 2>&1 &
server_pid=$!
if python - "$port" "$server_pid" <<'PY'
import json, os, sys, time, urllib.request
port, pid = sys.argv[1], int(sys.argv[2])
deadline = time.monotonic() + 600
while True:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as reply:
            if json.load(reply).get("status") == "ok":
                break
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        sys.exit("llama-server smoke: the server exited before it answered (its log follows)")
    if time.monotonic() > deadline:
        sys.exit("llama-server smoke: the server did not answer /health within 600 s")
    time.sleep(1)
PY
then :; else tail -40 "$tmp/server.log" >&2; exit 1; fi
ready=$(date +%s)

out="$tmp/run"
set +e
# A cold first call on a loaded 2-core box can take minutes: the per-request timeout is raised to match.
# --constrained-calls offers only the tools whose inputs exist (2.6k prompt tokens on the first call instead
# of 28.9k for every tool's schema). No OPENAI_API_KEY: a self-hosted server needs none.
env -u OPENAI_API_KEY OPENAI_BASE_URL="http://127.0.0.1:$port/v1" MLTB_LLM_TIMEOUT=1200 MLTB_LLM_MAX_RETRIES=0 \
  python -m pytest suites/ -p no:cacheprovider -q --planner=react --task=spaceship-titanic \
  --model=openai:qwen2.5-coder-1.5b --constrained-calls --max-llm-calls=1 --trials=1 --mltb-out "$out"
code=$?
set -e
finished=$(date +%s)
if [ "$code" -ne 0 ] && [ "$code" -ne 1 ]; then
  tail -20 "$tmp/server.log" >&2
  echo "llama-server smoke: pytest exited $code (expected 0 or 1: pass, or a planner failure)" >&2
  exit 1
fi
python - "$out/results.jsonl" <<'PY'
import json, sys
records = [json.loads(line) for line in open(sys.argv[1], encoding="utf-8") if line.strip()]
assert len(records) == 1, f"llama-server smoke: expected 1 record, got {len(records)}"
rec = records[0]
assert rec["outcome"] in ("valid", "planner_failure"), f"llama-server smoke: {rec['outcome']}: {rec.get('error')}"
assert rec["model"] == "openai:qwen2.5-coder-1.5b", rec["model"]
assert rec["llm_calls"] >= 1 and rec["tokens_in"] > 0 and rec["tokens_out"] > 0, (
    f"llama-server smoke: tokens not counted: {rec['llm_calls']} calls, {rec['tokens_in']} in, {rec['tokens_out']} out")
print(f"llama-server smoke: record ok ({rec['outcome']}, stage {rec['stage_reached']}, {rec['llm_calls']} LLM calls, "
      f"{rec['tokens_in']} tokens in, {rec['tokens_out']} out, {rec['wall_seconds']:.1f} s)")
PY
echo "llama-server smoke: ok: server answering after $((ready - built)) s, trial in $((finished - ready)) s;" \
     "total $((finished - started)) s"
