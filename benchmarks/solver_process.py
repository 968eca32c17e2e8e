"""Solver process cost: fork + memory cap + Landlock confinement + JSON result, per trial.

Run: ``python benchmarks/solver_process.py [--repeats 20]``. Measured in a process that has imported
the toolset (as a pytest worker has when it starts a trial): ``run_confined`` with a trial's grants
(``trial.solver_paths``) and a solver that returns at once, so the time is all overhead: fork,
RLIMIT_AS, Landlock ruleset (~40 rules), the pipe, waitpid. The confinement step alone is timed
inside the child. Median and max over ``--repeats`` runs.
"""
from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from _bench import Figure, emit, parser


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=20)
    args = p.parse_args()
    import mltb_core.toolkit.tools  # noqa: F401  (a trial's imports)
    from mltb_core.runner.confine import confine, run_confined
    from mltb_core.runner.trial import solver_paths

    root = Path(tempfile.mkdtemp(prefix="mltb-solver-bench-"))
    for name in ("data", "sandbox", "scratch"):
        (root / name).mkdir()
    read_only, read_write = solver_paths(root / "data", root / "sandbox", root / "scratch")

    def confine_only(status) -> dict:
        return {"label": status.label}

    totals, confines = [], []
    for _ in range(args.repeats):
        started = time.perf_counter()
        child = run_confined(confine_only, read_only=read_only, read_write=read_write, memory_budget=6 * 2**30)
        totals.append((time.perf_counter() - started) * 1000)
        label = child.payload["result"]["label"]

    def timed_confine(status) -> dict:   # a second, nested confinement: what one ruleset costs
        started = time.perf_counter()
        confine(read_only, read_write)
        return {"ms": (time.perf_counter() - started) * 1000}

    for _ in range(args.repeats):
        confines.append(run_confined(timed_confine, read_only=read_only, read_write=read_write)
                        .payload["result"]["ms"])
    rules = len(read_only) + len(read_write)
    emit("Solver process", [
        Figure("fork + cap + confine + result, per trial", f"{statistics.median(totals):.1f} ms median",
               note=f"max {max(totals):.1f} ms over {args.repeats} runs; {label}; {rules} grants"),
        Figure("Landlock ruleset + restrict_self alone", f"{statistics.median(confines):.2f} ms median",
               note=f"max {max(confines):.2f} ms over {args.repeats} runs"),
    ], args.json)


if __name__ == "__main__":
    main()
