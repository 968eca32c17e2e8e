"""Split provisioning: ``prepare_split`` cold (fresh cache directory) versus cached, per bundled task.

Run: ``python benchmarks/split_provisioning.py [--tasks a,b]``. Target: a cached split < 1 s.
"""
from __future__ import annotations

import shutil
import tempfile
import time

from _bench import Figure, emit, parser


def timed(func) -> float:
    start = time.perf_counter()
    func()
    return time.perf_counter() - start


def main() -> None:
    from mltb_core.bench.splits import prepare_split
    from mltb_core.bench.tasks import load_tasks

    p = parser(__doc__.splitlines()[0])
    p.add_argument("--tasks", help="comma list of slugs (default: every bundled task)")
    args = p.parse_args()
    tasks = load_tasks()
    slugs = args.tasks.split(",") if args.tasks else sorted(s for s, t in tasks.items() if t.source == "bundled")
    figures, worst_cached = [], 0.0
    for slug in slugs:
        cache = tempfile.mkdtemp(prefix="mltb-split-")
        try:
            task = tasks[slug]
            cold = timed(lambda: prepare_split(task, seed=0, cache_dir=cache))  # noqa: B023  (called here, at once)
            cached = min(timed(lambda: prepare_split(task, seed=0, cache_dir=cache)) for _ in range(3))  # noqa: B023
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        worst_cached = max(worst_cached, cached)
        figures.append(Figure(f"split {slug}", f"cold {cold:.2f} s, cached {cached * 1000:.2f} ms"))
    figures.insert(0, Figure("slowest cached split", f"{worst_cached * 1000:.2f} ms", "< 1 s", worst_cached < 1.0,
                             note=f"{len(slugs)} tasks, cache in a fresh directory per task"))
    emit("Split provisioning", figures, args.json)


if __name__ == "__main__":
    main()
