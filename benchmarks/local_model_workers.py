"""Warm local-model calls under ``pytest -n 2``: one worker alone vs two workers at once.

Run: ``python benchmarks/local_model_workers.py [--calls 3] [--shared]``. Each worker is a child
process with xdist's environment (``PYTEST_XDIST_WORKER``/``_COUNT``) and a prompt of its own (a
different planner system prompt, then the real spaceship-titanic task prompt, the tool catalogue and
a few steps of history: ~4,000 tokens), so the two workers' prompts differ from the first token, as
two planners' did. Per worker: one cold call (server start + whole prompt), then ``--calls`` warm
calls whose last message changes. ``--shared`` also runs both workers on one server (the design
before issue 9: one KV cache, the prefixes evict each other). Target: a warm call of either of two
workers costs at most 2x a warm call of one worker alone.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _bench import Figure, count, emit, load_average

PLANNER_SYSTEMS = [
    "You are ReAct, a data-science agent. Think, then call exactly one tool per step.",
    "You expand one node of a search tree over tool calls. Propose the single most useful next tool call.",
]


def messages(worker: int, step: int) -> list[dict]:
    from mltb_core.bench.tasks import get_task

    task = get_task("spaceship-titanic")
    history = []
    for i in range(6):  # a few steps of scratchpad listings, as a mid-trial prompt has
        history += [{"role": "assistant", "content": json.dumps({"tool_name": "get_dataframe_summary",
                                                                 "tool_args": {"bindings": {"df": "train"}}})},
                    {"role": "user", "content": f"Result {i}:\n" + "\n".join(
                        f"- {name}: {text.strip()[:120]}" for name, text in task.fields.items())}]
    return ([{"role": "system", "content": PLANNER_SYSTEMS[worker % len(PLANNER_SYSTEMS)]},
             {"role": "user", "content": task.prompt(Path("submission.csv"))}]
            + history + [{"role": "user", "content": f"Step {step}: your next tool call?"}])


def child(worker: int, calls: int, cache_dir: str) -> None:
    """One worker: a cold call, then ``calls`` warm ones; prints one JSON line."""
    sys.path.insert(0, str(Path(__file__).parent))
    from local_model import realistic_tools
    from mltb_core.llm import make_backend

    tools = realistic_tools()
    backend = make_backend("local:smollm2", seed=0, cache_dir=cache_dir, keep_server=False, timeout=900.0)
    seconds, prompt_tokens = [], 0
    try:
        for step in range(calls + 1):
            start = time.perf_counter()
            response = backend.complete(messages(worker, step), tools, temperature=0.7, seed=step)
            seconds.append(time.perf_counter() - start)
            prompt_tokens = response.usage.prompt_tokens
    finally:
        backend.close()
    print(json.dumps({"worker": worker, "cold": seconds[0], "warm": seconds[1:], "prompt_tokens": prompt_tokens,
                      "threads": backend.server.n_threads_batch if backend.server else None}), flush=True)


def run(workers: int, calls: int, shared: bool) -> list[dict]:
    """``workers`` children at once; ``shared``: all on one server (no xdist worker id)."""
    with tempfile.TemporaryDirectory() as cache_dir:
        procs = []
        for worker in range(workers):
            env = dict(os.environ, PYTEST_XDIST_WORKER_COUNT=str(1 if shared else workers))
            env.pop("PYTEST_XDIST_WORKER", None)
            if not shared and workers > 1:
                env["PYTEST_XDIST_WORKER"] = f"gw{worker}"
            procs.append(subprocess.Popen([sys.executable, __file__, "--child", str(worker), "--calls", str(calls),
                                           "--cache-dir", cache_dir], env=env, stdout=subprocess.PIPE, text=True))
        results = []
        for proc in procs:
            out, _ = proc.communicate()
            if proc.returncode != 0:
                raise SystemExit(f"worker exited with {proc.returncode}")
            results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def describe(label: str, results: list[dict]) -> tuple[float, Figure]:
    warm = [s for r in results for s in r["warm"]]
    median = statistics.median(warm)
    per_worker = "; ".join(f"worker {r['worker']}: cold {r['cold']:.1f} s, warm "
                           f"{', '.join(f'{s:.1f}' for s in r['warm'])} s ({r['prompt_tokens']} prompt tokens, "
                           f"{r['threads']} prompt threads)" for r in results)
    figure = Figure(f"warm call, {label}", f"{median:.2f} s median over {len(warm)} calls", note=per_worker)
    print(f"{figure.name}: {figure.value} - {figure.note}", flush=True)  # each phase as soon as it is measured
    return median, figure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=count, default=3, help="warm calls per worker")
    parser.add_argument("--shared", action="store_true", help="also measure two workers on one shared server")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--cache-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.calls, args.cache_dir)
        return
    one, one_fig = describe("1 worker", run(1, args.calls, shared=False))
    two, two_fig = describe("each of 2 workers, a server each", run(2, args.calls, shared=False))
    figures = [one_fig, two_fig, Figure("2 workers / 1 worker (warm call)", f"{two / one:.2f}x", target="<= 2x",
                                        met=two / one <= 2.0, note=f"load {load_average()}")]
    if args.shared:
        shared, shared_fig = describe("each of 2 workers, one shared server", run(2, args.calls, shared=True))
        figures += [shared_fig, Figure("shared server / 1 worker (warm call)", f"{shared / one:.2f}x")]
    emit("Local model under -n 2", figures, args.json)


if __name__ == "__main__":
    main()
