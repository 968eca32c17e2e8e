"""Seconds to check a submission against held-out labels of 100,000 rows (ids shuffled), integer and string ids.

The stage-10 check and the grader run this once per predictions object a trial saves; before the id keys were
held as Python objects, pandas 3's Arrow strings made the id check alone take ~2 s at this size.
"""
from __future__ import annotations

import statistics
import time

import numpy as np
import pandas as pd

from _bench import Figure, emit, load_average, parser

ROWS = 100_000
TARGET_S = 0.5


def case(task, string_ids: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Held-out labels of the task's columns, ROWS long, and a valid submission of them in shuffled order."""
    rng = np.random.default_rng(0)
    ids = pd.Series(np.arange(ROWS) + 1_000_000)
    if string_ids:
        ids = ids.map(lambda i: f"{i:07d}_01")
    labels = pd.DataFrame({task.id_column: ids, task.target: rng.integers(0, 2, ROWS).astype(bool)})
    return labels.sample(frac=1, random_state=0).reset_index(drop=True), labels


def main() -> None:
    from mltb_core.bench.grading import validate_submission
    from mltb_core.bench.tasks import get_task
    args = parser(__doc__).parse_args()
    task = get_task("spaceship-titanic")   # a binary label task: [PassengerId, Transported]
    figures = [Figure("load average", load_average())]
    for string_ids in (False, True):
        submission, labels = case(task, string_ids)
        times = []
        for _ in range(5):
            start = time.perf_counter()
            ok, reason, _ = validate_submission(task, submission, labels, classes=[False, True])
            times.append(time.perf_counter() - start)
            assert ok, reason
        median = statistics.median(times)
        figures.append(Figure(f"validate_submission, {ROWS:,} rows, {'string' if string_ids else 'integer'} ids",
                              f"{median:.3f} s", target=f"< {TARGET_S} s", met=median < TARGET_S))
    emit(f"submission check speed ({ROWS:,} held-out rows, shuffled; median of 5)", figures, args.json)


if __name__ == "__main__":
    main()
