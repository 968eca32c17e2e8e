"""compare.py: baselines and the regression rule (upper CI bound of the change below -threshold)."""
import pytest

from mltb_core.compare import compare_to_baseline, load_baseline, parse_regression_spec, save_baseline
from mltb_core.results import TrialRecord


def cell(valid_flags, percentile=60.0, task="t"):
    return [TrialRecord(task=task, planner="react", model="sim", trial=i, seed=i, config_hash="h",
                        outcome="valid" if ok else "planner_failure", valid=ok,
                        percentile=percentile if ok else None, extra={"leaderboard": True}) for i, ok in enumerate(valid_flags)]


def test_parse_spec():
    assert parse_regression_spec("consistency:-0.05, percentile:2") == {"consistency": 0.05, "percentile": 2.0}
    for bad in ("speed:-1", "consistency", "percentile:abc", ""):
        with pytest.raises(ValueError):
            parse_regression_spec(bad)


def test_roundtrip_and_gate(tmp_path):
    path = tmp_path / "base.json"
    save_baseline(path, cell([True] * 8 + [False] * 2))
    baseline = load_baseline(path)
    spec = parse_regression_spec("consistency:-0.05,percentile:-2")
    same = compare_to_baseline(baseline, cell([True] * 8 + [False] * 2), spec)
    assert not same.failed and "no regression beyond noise" in same.render()
    worse = compare_to_baseline(baseline, cell([False] * 10), spec)
    assert worse.failed and {d.metric for d in worse.regressions} == {"consistency", "percentile"}
    assert "REGRESSION" in worse.render()


def test_noisy_small_drop_passes():
    baseline = {"version": 1, "cells": {}}
    records = cell([True, False, True, False])
    from mltb_core.compare import cell_figures
    baseline["cells"] = cell_figures(records)
    slightly_worse = compare_to_baseline(baseline, cell([True, False, False, False]),
                                         parse_regression_spec("consistency:-0.05"))
    assert not slightly_worse.failed  # a one-trial drop out of four is within the noise


def test_missing_cells_are_reported_not_failed(tmp_path):
    path = tmp_path / "b.json"
    save_baseline(path, cell([True] * 3, task="old"))
    comparison = compare_to_baseline(load_baseline(path), cell([True] * 3, task="new"), {"consistency": 0.05})
    assert comparison.only_in_baseline == ["old|react|sim"] and comparison.only_in_current == ["new|react|sim"]
    assert not comparison.failed


def test_bad_baseline_file(tmp_path):
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(ValueError, match="not an mltb baseline"):
        load_baseline(tmp_path / "x.json")
