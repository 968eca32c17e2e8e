"""Tool limits: a runaway call returns an ``Error:`` the model can read, and the trial goes on.

Wall time: SIGALRM per call (ToolContext.time_limit, from TrialConfig.tool_time_limit). Memory: a
trial's solver process caps its address space once at its starting size plus MLTB_TOOL_MEMORY_LIMIT,
so numpy/Python raise MemoryError inside the call instead of the worker being OOM-killed.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import mltb_core.toolkit.tools  # noqa: F401  (registers the toolset)
from mltb_core.toolkit import limits
from mltb_core.config import TrialConfig
from mltb_core.runner.confine import python_read_paths, system_read_paths

sys.path.insert(0, str(Path(__file__).parent))
from confined_child import run_confined  # noqa: E402
from mltb_core.toolkit.registry import ToolContext, execute
from mltb_core.toolkit.scratchpad import Scratchpad
from mltb_core.bench.tasks import get_task
from mltb_core.runner.trial import run_trial

# Legal for the expression language (each value stays 360 characters) but slow: 60 text columns
# built and joined over every row.
SLOW_FUNCTION = "lambda x: str_len(" + " + ".join(["str(x)"] * 60) + ")"


def context(tmp_path: Path, time_limit: float | None = None) -> ToolContext:
    return ToolContext(sandbox=tmp_path, time_limit=time_limit)


def custom_function_call(func: str, output: str = "out") -> dict:
    return {"tool_name": "apply_custom_function",
            "tool_args": {"bindings": {"df": "frame"}, "func_kwargs": {"name": "new", "source_columns": "a",
                                                                         "func": func}, "output": output}}


def pad_with(rows: int) -> Scratchpad:
    pad = Scratchpad()
    pad.set("frame", pd.DataFrame({"a": np.arange(rows), "b": np.arange(rows) % 7}))
    return pad


def test_runaway_custom_function_times_out_with_a_readable_error(tmp_path):
    pad = pad_with(300_000)   # unguarded this takes several seconds
    result = execute(custom_function_call(SLOW_FUNCTION), pad, context(tmp_path, 0.5))   # seconds: benchmarks/tool_time_limit.py
    assert not result.ok
    assert result.message.startswith("Error: ToolTimeout: apply_custom_function exceeded its 0.5 s time limit")
    assert "Tool documentation for apply_custom_function" in result.message
    assert "out" not in pad
    # The same worker goes on: the next call runs normally, and no alarm is left armed.
    ok = execute(custom_function_call("lambda x: x + 1"), pad_with(10), context(tmp_path, 0.5))
    assert ok.ok, ok.message
    time.sleep(0.6)


def test_fit_on_a_huge_frame_times_out(tmp_path):
    rng = np.random.default_rng(0)
    pad = Scratchpad()
    pad.set("X", pd.DataFrame(rng.normal(size=(200_000, 20)), columns=[f"f{i}" for i in range(20)]))
    pad.set("y", pd.Series(rng.integers(0, 2, 200_000)))
    call = {"tool_name": "fit_random_forest_classifier",
            "tool_args": {"bindings": {"X_train": "X", "y_train": "y"}, "func_kwargs": {}, "output": "model"}}
    result = execute(call, pad, context(tmp_path, 0.5))   # seconds: benchmarks/tool_time_limit.py
    assert not result.ok and "exceeded its 0.5 s time limit" in result.message, result.message[:300]


def _in_budgeted_child(work, budget: int) -> dict:
    """Run ``work()`` in a solver process with a trial memory budget (as run_trial does)."""
    child = run_confined(lambda status: work(), read_only=system_read_paths() + python_read_paths(),
                         read_write=[], memory_budget=budget)
    assert child.payload and "result" in child.payload, (child.problem, child.payload)
    return child.payload["result"]


def test_memory_blowup_is_out_of_memory_not_an_oom_kill(tmp_path):
    def blow_up():
        # A cross join of 20,000 rows with itself: 400 million rows, gigabytes of index arrays alone.
        pad = pad_with(20_000)
        cross = {"tool_name": "join_dataframes", "tool_args": {"bindings": {"left_df": "frame", "right_df": "frame"},
                                                               "func_kwargs": {"left_on": "a", "how": "cross"}, "output": "out"}}
        result = execute(cross, pad, context(tmp_path, 30))
        stored = "out" in pad
        after = execute(custom_function_call("lambda x: x * 2"), pad, context(tmp_path, 30))
        return {"ok": result.ok, "message": result.message, "stored": stored, "after": after.ok}

    seen = _in_budgeted_child(blow_up, 150 * 2**20)
    assert not seen["ok"] and not seen["stored"]
    assert "join_dataframes ran out of memory (the trial's memory budget is 150 MiB)" in seen["message"]
    assert "Try a cheaper call" in seen["message"]
    assert seen["after"]   # the trial goes on: a cheap call still succeeds


def test_numpy_allocation_past_the_budget_raises_inside_the_call():
    def allocate(nbytes: int) -> int:
        return int(np.ones(nbytes // 8).sum())

    def calls():
        try:
            limits.call_with_limits(allocate, {"nbytes": 1 * 2**30}, None, label="allocate")
            big = "allowed"
        except limits.ToolOutOfMemory as exc:
            big = str(exc)
        return {"big": big, "small": limits.call_with_limits(allocate, {"nbytes": 8 * 2**20}, None, label="allocate")}

    seen = _in_budgeted_child(calls, 100 * 2**20)
    assert seen["big"].startswith("allocate ran out of memory") and seen["small"] == 2**20


def test_memory_budget_setting(monkeypatch):
    monkeypatch.delenv(limits.MEMORY_LIMIT_ENV, raising=False)
    assert limits.tool_memory_limit() == 6 * 2**30
    for off in ("0", "off"):
        monkeypatch.setenv(limits.MEMORY_LIMIT_ENV, off)
        assert limits.tool_memory_limit() is None
    monkeypatch.setenv(limits.MEMORY_LIMIT_ENV, "1.5G")
    assert limits.tool_memory_limit() == int(1.5 * 2**30)
    monkeypatch.setenv(limits.MEMORY_LIMIT_ENV, "lots")
    with pytest.raises(ValueError, match="MLTB_TOOL_MEMORY_LIMIT: not a size: 'lots'"):
        limits.tool_memory_limit()


def test_trial_goes_on_when_every_call_times_out(tmp_path):
    """A limit too small for any call: every call is an Error the policy reads; the trial ends as a
    planner failure (not an infra error) after its budget, in this same process."""
    config = TrialConfig(planner="react", model="sim", max_iterations=4, llm_cache=False, tool_time_limit=1e-6)
    record = run_trial(get_task("spaceship-titanic"), config, tmp_path)
    assert record.outcome == "planner_failure", record.error
    assert record.tool_calls >= 3 and record.stage_reached == 0
    steps = [json.loads(line) for line in Path(record.trajectory).read_text().splitlines()]
    results = [r for s in steps if s["step_type"] == "tool_execution_completion" for r in s["tool_results"]]
    assert results and all(not r["ok"] and "time limit" in r["content_preview"] for r in results)
