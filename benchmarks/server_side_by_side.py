"""mltb's embedded llama.cpp server against llama-cpp-python's own OpenAI server on the same GGUF.

    python benchmarks/server_side_by_side.py [--out mltb-runs/side-by-side] [--rounds 2] [--calls 10]
                                             [--planner mcts_shaped] [--task spaceship-titanic] [--threads 2]

The same trial (same planner, task, seed t00 and LLM-call budget) runs once per arm and round, the arms
alternated (round 1 local first, round 2 llama_cpp.server first, ...) so a drift in the box's load hits
both: ``--model local`` (mltb's server) and ``--model openai:<name>`` against ``python -m llama_cpp.server``
started here with docs/local-model.md's command (``MLTB_OPENAI_CALLS=json_object MLTB_OPENAI_N=off``). Both
arms start cold: the local arm gets an empty ``MLTB_CACHE_DIR`` (no saved prompt prefixes; the assembled
model is shared through ``MLTB_MODELS_DIR``), the other server is started for its run. Both use
``--threads`` threads. Printed per run: wall seconds of the trial, LLM calls and requests, replies that
parsed into a call, uncached prompt tokens (what the server reported: llama_cpp.server reports none, so its
row shows its prompt tokens as uncached), stage. A finished run is not run again (resumable).
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tabulate import tabulate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import ROOT, Figure, count, emit, machine, parser as bench_parser  # noqa: E402

from mltb_core.analysis.records import TrialRecord  # noqa: E402
from mltb_core.analysis.resultsfile import read_records  # noqa: E402

ARMS = ("local", "llama_cpp.server")
OPENAI_NAME = "qwen2.5-coder-1.5b"
STARTUP_SECONDS = 300


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start_llama_cpp_server(gguf: Path, threads: int, log: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1",
               "--port", str(port), "--n_ctx", "32768", "--flash_attn", "true",
               "--n_threads", str(threads), "--n_threads_batch", str(threads)]
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + STARTUP_SECONDS
    while True:
        if process.poll() is not None:
            raise SystemExit(f"llama_cpp.server exited with code {process.returncode}; its log: {log}")
        try:
            with urllib.request.urlopen(f"{base_url}/models", timeout=2):
                return process, base_url
        except OSError:
            if time.monotonic() > deadline:
                process.kill()
                raise SystemExit(f"llama_cpp.server did not answer in {STARTUP_SECONDS} s; its log: {log}") from None
            time.sleep(1)


def _trial_command(args, arm: str, out: Path) -> list[str]:
    model = "local" if arm == "local" else f"openai:{OPENAI_NAME}"
    return [sys.executable, "-m", "pytest", "suites", "-p", "no:xdist", "-q", "--planner", args.planner,
            "--task", args.task, "--model", model, "--trials", "1", "--max-llm-calls", str(args.calls),
            "--no-llm-cache", "--mltb-out", str(out)]


def _record(out: Path) -> TrialRecord | None:
    results = out / "results.jsonl"
    if not results.exists():
        return None
    records = list(read_records(results))   # typed; a bad line is a warning, skipped
    return records[-1] if records else None


def _replies(out: Path) -> tuple[int, int]:
    """(requests, replies that parsed into a tool call) from the run's trajectory."""
    requests = parsed = 0
    for path in out.glob("trajectories/*/*.jsonl"):
        for line in path.read_text().splitlines():
            event = json.loads(line)
            if event.get("step_type") == "llm_call" and "candidates" in event:
                requests += 1
                parsed += sum(1 for c in event["candidates"] if c.get("tool_calls"))
    return requests, parsed


def run_arm(args, arm: str, out: Path) -> TrialRecord:
    record = _record(out)
    if record is not None:
        return record
    out.mkdir(parents=True, exist_ok=True)
    from mltb_core.llm.local.models import MODELS_DIR_ENV, models_dir

    env = {**os.environ, "MLTB_LOCAL_THREADS": str(args.threads), "MLTB_CACHE_DIR": str(out / "cache"),
           MODELS_DIR_ENV: str(models_dir())}   # an empty cache, the model already assembled
    server = None
    if arm != "local":
        from mltb_core.llm.local.backend import default_model_path

        server, base_url = _start_llama_cpp_server(Path(default_model_path()), args.threads, out / "server.log")
        env.update(OPENAI_BASE_URL=base_url, OPENAI_API_KEY="none", MLTB_OPENAI_CALLS="json_object",
                   MLTB_OPENAI_N="off", MLTB_LLM_TIMEOUT="600")
    try:
        with (out / "pytest.log").open("w") as log:
            subprocess.run(_trial_command(args, arm, out), cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                           check=False)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=60)
    record = _record(out)
    if record is None:
        raise SystemExit(f"the {arm} run wrote no record; its log: {out / 'pytest.log'}")
    return record


def main() -> int:
    p = bench_parser(__doc__.split("\n", 1)[0])
    p.add_argument("--out", type=Path, default=ROOT / "mltb-runs" / "side-by-side")
    p.add_argument("--rounds", type=count, default=2)
    p.add_argument("--calls", type=count, default=10)
    p.add_argument("--planner", default="mcts_shaped")
    p.add_argument("--task", default="spaceship-titanic")
    p.add_argument("--threads", type=count, default=2)
    args = p.parse_args()
    print(json.dumps(machine()))
    rows, walls = [], {arm: [] for arm in ARMS}
    for round_ in range(args.rounds):
        for arm in (ARMS if round_ % 2 == 0 else ARMS[::-1]):
            out = args.out / f"round{round_ + 1}-{arm.replace('.', '_')}"
            record = run_arm(args, arm, out)
            requests, parsed = _replies(out)
            uncached = record.tokens_in - record.tokens_in_cached
            walls[arm].append(record.wall_seconds)
            rows.append([round_ + 1, arm, f"{record.wall_seconds:.0f}", record.llm_calls, requests, parsed,
                         f"{uncached:,}", f"{record.tokens_in:,}", record.tokens_out, record.stage_reached])
    print(tabulate(rows, headers=["round", "server", "wall s", "LLM calls", "requests", "parsed replies",
                                  "uncached prompt tok", "prompt tok", "completion tok", "stage"],
                   tablefmt="github"))
    ratios = [other / local for local, other in zip(walls["local"], walls["llama_cpp.server"])]
    emit("embedded server against llama_cpp.server",
         [Figure("wall ratio llama_cpp.server / local", ", ".join(f"{r:.2f}" for r in ratios),
                 note=f"{args.planner}, {args.task}, {args.calls} calls, {args.threads} threads")], args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
