"""Parallel scaling: throughput of ``pytest suites/ -n 2`` over ``-n 1`` on the same items (sim model).

Run: ``python benchmarks/parallel_scaling.py [--trials 3]``. Both runs use xdist (so worker start-up
is paid by both), the sim policy and ``--no-llm-cache``; splits are warmed first. The CPU time of
the ``-n 1`` run over its wall time shows whether a worker stays on one thread (MLTB_THREADS=1,
limits.limit_threads): near 1.0 means no oversubscription. Target >= 1.7x.
"""
from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time

from _bench import Figure, ROOT, count, emit, parser

TARGET = 1.7


def run_pytest(workers: int, tasks: str, planners: str, trials: int, *extra: str) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of all child processes, summary line) of one suite run."""
    out = tempfile.mkdtemp(prefix=f"mltb-scaling-n{workers}-")
    argv = [sys.executable, "-m", "pytest", "suites/", "-q", "-p", "no:randomly", f"--planner={planners}",
            "--model=sim", f"--task={tasks}", f"--trials={trials}", "--no-llm-cache", f"--mltb-out={out}",
            "-n", str(workers), *extra]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "MLTB_THREADS": "1"})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = done.stdout.strip().splitlines()
    summary = lines[-1] if lines else done.stderr.strip()[-200:]
    if done.returncode not in (0, 1, 5):  # 1: some planner failures, still a full run; 5: nothing selected
        raise RuntimeError(f"pytest -n {workers} exited {done.returncode}: {summary}")
    return wall, cpu, summary


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--tasks", default="spaceship-titanic,playground-series-s4e1")
    p.add_argument("--planners", default="react,mcts_shaped")
    p.add_argument("--trials", type=count, default=8)
    args = p.parse_args()
    items = len(args.tasks.split(",")) * len(args.planners.split(",")) * args.trials
    from mltb_core.bench.splits import prepare_split
    from mltb_core.bench.tasks import get_task

    for slug in args.tasks.split(","):
        prepare_split(get_task(slug), seed=0)  # cached splits: both runs measure trials only
    wall1, cpu1, summary1 = run_pytest(1, args.tasks, args.planners, args.trials)
    wall2, cpu2, summary2 = run_pytest(2, args.tasks, args.planners, args.trials)
    # Fixed costs (pytest start, worker start-up imports, teardown) with every item deselected:
    # subtracted, they leave the steady-state throughput the target is about.
    fixed1 = run_pytest(1, args.tasks, args.planners, args.trials, "-k", "no_such_item")[0]
    fixed2 = run_pytest(2, args.tasks, args.planners, args.trials, "-k", "no_such_item")[0]
    speedup = (wall1 - fixed1) / (wall2 - fixed2)
    raw = wall1 / wall2
    figures = [
        Figure("throughput -n 2 / -n 1 (steady state)", f"{speedup:.2f}x", f">= {TARGET:g}x", speedup >= TARGET,
               note=f"{items} items ({args.tasks}; {args.planners}; {args.trials} trials), {os.cpu_count()} cores; "
                    f"fixed start-up {fixed1:.1f} s (-n 1) / {fixed2:.1f} s (-n 2) subtracted"),
        Figure("wall-clock ratio -n 2 / -n 1 (incl. start-up)", f"{raw:.2f}x"),
        Figure("-n 1", f"{wall1:.1f} s ({items / wall1 * 60:.1f} items/min)", note=summary1),
        Figure("-n 2", f"{wall2:.1f} s ({items / wall2 * 60:.1f} items/min)", note=summary2),
        Figure("CPU / wall of the -n 1 run", f"{cpu1 / wall1:.2f}", "<= 1.2 (one thread per worker)",
               cpu1 / wall1 <= 1.2, note="controller + one worker"),
        Figure("CPU / wall of the -n 2 run", f"{cpu2 / wall2:.2f}", note="at most the core count"),
    ]
    emit("Parallel scaling", figures, args.json)


if __name__ == "__main__":
    main()
