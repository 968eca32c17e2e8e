"""Tool worker cost: start (spawn + imports + confinement) per trial, and the round trip per tool call.

Run: ``python benchmarks/worker_process.py [--repeats 5] [--calls 40]``. A trial now runs its tool calls
in a fresh, confined worker process (privilege separation, issue 20). This prints what that costs:
the worker's start (a new Python that imports pandas, scikit-learn and the boosters, reads the agent's
data, caps its memory, confines itself with Landlock and seccomp), and the same sequence of real tool
calls on spaceship-titanic run once in-process (``LocalWorkspace``) and once through the worker, so the
difference is the pipe, the JSON and the checks of every reply. Medians over ``--repeats`` runs.
"""
from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from _bench import Figure, count, emit, parser

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--repeats", type=count, default=5)
    args = p.parse_args()
    import mltb_core.toolkit.tools  # noqa: F401  (a trial's imports)
    from mltb_core.bench.splits import prepare_split
    from mltb_core.bench.tasks import get_task
    from mltb_core.stages.rewards import StageContext
    from mltb_core.stages.workspace import LocalWorkspace
    from mltb_core.runner.solve import WorkerSettings, fresh_dirs, prepare_agent_data, start_worker
    from mltb_core.toolkit.registry import REGISTRY, ToolCall, ToolContext
    from scripted import spaceship_pipeline

    task = get_task("spaceship-titanic")
    split = prepare_split(task, seed=0)
    calls = [ToolCall.from_dict(c) for c in spaceship_pipeline()]
    starts, local_runs, worker_runs = [], [], []
    label = ""
    for _ in range(args.repeats):
        root = Path(tempfile.mkdtemp(prefix="mltb-worker-bench-"))
        data_dir = prepare_agent_data(split, root)
        sandbox, scratch = root / "sandbox", root / "sandbox.tmp"
        fresh_dirs(sandbox, scratch)
        ctx = ToolContext(sandbox=sandbox, data_dir=data_dir, task=task, seed=0, time_limit=300.0)
        local = LocalWorkspace(StageContext.from_agent_data(task, data_dir), ctx, REGISTRY.for_toolset("paper"))
        started = time.perf_counter()
        for i, call in enumerate(calls, 1):
            local.step(i - 1, i, call)
        local_runs.append(time.perf_counter() - started)
        fresh_dirs(sandbox, scratch)
        started = time.perf_counter()
        worker = start_worker(task, data_dir, sandbox, scratch, [split.dir, split.labels_path],
                              WorkerSettings(toolset="paper", threads=1, seed=0, tool_time_limit=300.0))
        starts.append(time.perf_counter() - started)
        label = worker.confinement
        started = time.perf_counter()
        for i, call in enumerate(calls, 1):
            worker.step(i - 1, i, call, None)
        worker_runs.append(time.perf_counter() - started)
        worker.close()
    n = len(calls)
    extra = statistics.median(worker_runs) - statistics.median(local_runs)
    emit("Tool worker", [
        Figure("worker start (spawn, imports, data, confinement), per trial", f"{statistics.median(starts):.2f} s median",
               note=f"max {max(starts):.2f} s over {args.repeats} starts; {label}"),
        Figure(f"{n} pipeline calls in-process", f"{statistics.median(local_runs):.2f} s median"),
        Figure(f"the same {n} calls through the worker", f"{statistics.median(worker_runs):.2f} s median",
               note=f"{extra / n * 1000:+.1f} ms per call (pipe, JSON, reply checks)"),
    ], args.json)


if __name__ == "__main__":
    main()
