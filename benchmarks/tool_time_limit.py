"""Tool time limit: how long a runaway call takes to come back as an ``Error:`` under a 0.5 s limit.

Run: ``python benchmarks/tool_time_limit.py``. Targets: a slow custom function (300,000 rows) back within
5 s, a random forest on 200,000 x 20 within 10 s (the alarm fires at 0.5 s; the rest is the library
reaching a point where Python can raise). tests/test_tool_limits.py checks the errors, not the times.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from _bench import Figure, emit, parser

LIMIT = 0.5
# Legal for the expression language (each value stays 360 characters) but slow: 60 text columns per row.
SLOW_FUNCTION = "lambda x: str_len(" + " + ".join(["str(x)"] * 60) + ")"


def overrun(call: dict, pad, sandbox: Path) -> tuple[float, bool]:
    from mltb_core.toolkit.registry import ToolContext, execute

    start = time.monotonic()
    result = execute(call, pad, ToolContext(sandbox=sandbox, time_limit=LIMIT))
    return time.monotonic() - start, (not result.ok and f"exceeded its {LIMIT} s time limit" in result.message)


def main() -> None:
    import mltb_core.toolkit.tools  # noqa: F401  (registers the toolset)
    from mltb_core.toolkit.scratchpad import Scratchpad

    args = parser(__doc__.splitlines()[0]).parse_args()
    rows = 300_000
    custom = Scratchpad()
    custom.set("frame", pd.DataFrame({"a": np.arange(rows), "b": np.arange(rows) % 7}))
    rng = np.random.default_rng(0)
    forest = Scratchpad()
    forest.set("X", pd.DataFrame(rng.normal(size=(200_000, 20)), columns=[f"f{i}" for i in range(20)]))
    forest.set("y", pd.Series(rng.integers(0, 2, 200_000)))
    cases = [
        ("custom function, 300,000 rows", 5.0, custom,
         {"tool_name": "apply_custom_function", "tool_args": {"bindings": {"df": "frame"}, "func_kwargs": {
             "name": "new", "source_columns": "a", "func": SLOW_FUNCTION}, "output": "out"}}),
        ("random forest, 200,000 x 20", 10.0, forest,
         {"tool_name": "fit_random_forest_classifier", "tool_args": {
             "bindings": {"X_train": "X", "y_train": "y"}, "func_kwargs": {}, "output": "model"}}),
    ]
    figures = []
    with tempfile.TemporaryDirectory(prefix="mltb-limit-") as sandbox:
        for label, target, pad, call in cases:
            seconds, stopped = overrun(call, pad, Path(sandbox))
            figures.append(Figure(f"{label}: back after", f"{seconds:.2f} s", f"< {target:g} s",
                                  stopped and seconds < target,
                                  note="stopped by the limit" if stopped else "NOT stopped by the limit"))
    emit("Tool time limit", figures, args.json)


if __name__ == "__main__":
    main()
