"""`pytest suites/ -n 8` with the local model on a small machine: throughput with -n 8 (capped) vs -n 2.

Run: ``python benchmarks/local_worker_cap.py [--trials 4] [--max-llm-calls 4] [--workers 8,2]``. Each run is
the suite with the default ``local`` model on the same items (one planner, one task, ``--trials`` trials of
``--max-llm-calls`` calls each, no LLM cache), in a fresh llama.cpp server state; splits are warmed first.
Per run: wall time, items and LLM calls per minute, and the header line in which the plugin says how many
workers and servers it started and why (issue 21: on 2 cores -n 8 used to start 8 servers and finish
nothing). Target: -n 8's throughput is no worse than -n 2's (ratio >= 0.9, noise on a shared box).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _bench import Figure, ROOT, count, emit, load_average, parser

TARGET = 0.9
CAP_LINE = "mltb: local model:"


def run_suite(workers: int, task: str, planner: str, trials: int, calls: int) -> dict:
    """One suite run; its wall time, items, LLM calls and the plugin's worker line."""
    out = Path(tempfile.mkdtemp(prefix=f"mltb-cap-n{workers}-"))
    # own llama.cpp server state (MLTB_CACHE_DIR): no warm server carried over from another run; the
    # prepared split stays in the data cache (MLTB_CACHE), so both runs time trials, not data preparation
    server_state = tempfile.mkdtemp(prefix="mltb-cap-servers-")
    argv = [sys.executable, "-m", "pytest", "suites/", "-q", "-p", "no:randomly", f"--planner={planner}",
            f"--task={task}", f"--trials={trials}", f"--max-llm-calls={calls}", "--no-llm-cache",
            f"--mltb-out={out}", "-n", str(workers)]
    env = {**os.environ, "MLTB_CACHE_DIR": server_state}
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    lines = done.stdout.splitlines()
    if done.returncode not in (0, 1):        # 1: planner failures, still a full run
        raise RuntimeError(f"-n {workers} exited {done.returncode}: {(lines or [done.stderr])[-1][-300:]}")
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]
    broken = [r.get("error") for r in records if r.get("outcome") == "infra_error"]
    if broken:   # a throughput of trials that never reached the model measures nothing
        raise RuntimeError(f"-n {workers}: {len(broken)} of {len(records)} trials were infrastructure errors, "
                           f"e.g. {(broken[0] or '')[:200]}")
    return {"workers": workers, "wall": wall, "items": len(records),
            "llm_calls": sum(r.get("llm_calls", 0) for r in records),
            "line": next((line for line in lines if line.startswith(CAP_LINE)), "(no worker line)"),
            "summary": lines[-1] if lines else ""}


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--task", default="spaceship-titanic")
    p.add_argument("--planner", default="mcts_shaped")
    p.add_argument("--trials", type=count, default=4)
    p.add_argument("--max-llm-calls", type=int, default=4)
    p.add_argument("--workers", default="8,2", help="the -n values to compare, the first against the second")
    args = p.parse_args()
    from mltb_core.bench.splits import prepare_split
    from mltb_core.bench.tasks import get_task

    prepare_split(get_task(args.task), seed=0)
    runs = []
    for workers in (int(w) for w in args.workers.split(",")):
        run = run_suite(workers, args.task, args.planner, args.trials, args.max_llm_calls)
        print(f"-n {workers}: {run['wall']:.1f} s, {run['items']} items, {run['llm_calls']} LLM calls "
              f"(load {load_average()}); {run['line']}", flush=True)
        runs.append(run)
    figures = [Figure(f"-n {r['workers']}", f"{r['wall']:.1f} s; {r['items'] / r['wall'] * 60:.2f} items/min, "
                                            f"{r['llm_calls'] / r['wall'] * 60:.1f} LLM calls/min",
                      note=f"{r['items']} items, {r['llm_calls']} calls; {r['line']}")
               for r in runs]
    if len(runs) >= 2 and runs[0]["items"] and runs[1]["items"]:
        ratio = (runs[0]["items"] / runs[0]["wall"]) / (runs[1]["items"] / runs[1]["wall"])
        figures.append(Figure(f"throughput -n {runs[0]['workers']} / -n {runs[1]['workers']}", f"{ratio:.2f}x",
                              f">= {TARGET:g}x", ratio >= TARGET,
                              note=f"{args.planner} on {args.task}, {args.trials} trials x {args.max_llm_calls} "
                                   f"LLM calls, {os.cpu_count()} cores"))
    emit("Local model: -n capped to the machine", figures, args.json)


if __name__ == "__main__":
    main()
