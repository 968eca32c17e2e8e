"""The gate's behaviour rule (issue 57) through compare_to_baseline: the rates docs/gating.md and
benchmarks/gate_preset.py print (compare.behaviour_fire_probability, exact) are the rates the gate's own code
shows on simulated synthetic-policy runs at the preset's size, and the preset catches a planner that stops."""
import math

import numpy as np
import pytest

from mltb_core.analysis.compare import (behaviour_fire_probability, cell_figures, compare_to_baseline,
                                        parse_regression_spec)
from mltb_core.analysis.records import TrialRecord
from mltb_core.config import GATE_LOST_SHARE, GATE_PRESETS

TRIALS = int(GATE_PRESETS["ci"]["trials"])
TASKS = GATE_PRESETS["ci"]["task"].split(",")
SPEC = parse_regression_spec("consistency:-0.05")


def run(valid: np.ndarray) -> list[TrialRecord]:
    """One synthetic planner's records: valid[task, trial], the trial seed being the trial number."""
    return [TrialRecord(task=task, planner="react", model="sim", trial=i, seed=i, config_hash="h",
                        outcome="valid" if ok else "planner_failure", valid=bool(ok), synthetic=True)
            for task, flags in zip(TASKS, valid) for i, ok in enumerate(flags)]


def fires(rng, before: float, after: float) -> bool:
    base = run(rng.random((len(TASKS), TRIALS)) < before)
    cur = run(rng.random((len(TASKS), TRIALS)) < after)
    comparison = compare_to_baseline({"cells": cell_figures(base)}, cur, SPEC, lost_share=GATE_LOST_SHARE)
    return any(d.lost for d in comparison.regressions)


@pytest.mark.parametrize("before, after", [(0.5, 0.5), (0.75, 0.75), (0.75, 0.3), (0.5, 0.0)])
def test_the_exact_rates_are_the_gates_own(before, after):
    rng = np.random.default_rng(11)
    reps = 600
    rate = sum(fires(rng, before, after) for _ in range(reps)) / reps
    exact = behaviour_fire_probability(TRIALS, len(TASKS), before, after, SPEC["consistency"])
    assert abs(rate - exact) <= 3 * math.sqrt(max(exact * (1 - exact), 1e-4) / reps) + 1e-9, (rate, exact)


def test_a_planner_that_stops_submitting_is_caught_whenever_it_had_a_submission():
    for before in (0.25, 0.5, 1.0):
        exact = behaviour_fire_probability(TRIALS, len(TASKS), before, 0.0, SPEC["consistency"])
        assert exact == pytest.approx(1 - (1 - before) ** (TRIALS * len(TASKS)))
