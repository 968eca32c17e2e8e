"""The regression gate's operating characteristics, by seeded simulation through the gate's own code.

At the trials per cell the gate prints for an inconclusive comparison, a true drop of the threshold d
must be flagged REGRESSION at least 80 % of the time, a true zero change called REGRESSION at most
2.5 % of the time (the documented level: the interval's upper tail), and a true drop of d never called
"ok" more than 2.5 % of the time (the gate's original failure). Consistency: Newcombe's paired interval on
Bernoulli trials; medians: the order-statistic interval of the median of paired differences on continuous
and on zero-inflated (failed trials = 0) values. Seeded, so the rates below are the same on every run. A simulated rate carries Monte Carlo
error, so "at least 80 %" is asserted as: the estimate is at least 0.80 less two standard errors of a
rate of 0.80 over the repetitions; for consistency the exact power (no simulation, every pair of
outcomes summed) is asserted at 0.80 itself.
"""
import math

import numpy as np
import pytest

from mltb_core.analysis.compare import _consistency_delta, _median_delta
from mltb_core.analysis.results import TrialRecord
from mltb_core.analysis.stats import rate_gate_probabilities


def at_least(rate: float, target: float, reps: int) -> bool:
    return rate >= target - 2 * math.sqrt(target * (1 - target) / reps)


def records(valid, values=None):
    return [TrialRecord(task="t", planner="react", model="sim", trial=i, seed=i, config_hash="h",
                        outcome="valid" if ok else "planner_failure", valid=bool(ok),
                        normalized=float(values[i]) if ok and values is not None else None)
            for i, ok in enumerate(valid)]


def verdict_rates(make_delta, reps):
    verdicts = [make_delta(r).verdict.split(" ")[0] for r in range(reps)]
    return {v: verdicts.count(v) / reps for v in ("REGRESSION", "ok", "inconclusive")}


def test_consistency_gate_flags_a_drop_of_d_and_rarely_a_zero_change():
    rng = np.random.default_rng(1)
    rate, drop = 0.5, 0.2
    pilot = _consistency_delta("c", records(rng.random(10) < rate), records(rng.random(10) < rate), drop)
    n = pilot.trials_needed
    assert 90 <= n <= 110          # the normal approximation says 99 at p = 0.5
    flagged, false_alarm = rate_gate_probabilities(n, rate, rate - drop, drop)[0], \
        rate_gate_probabilities(n, rate, rate, drop)[0]
    assert flagged >= 0.80 and false_alarm <= 0.05            # exact, for the unpaired interval
    reps = 1500
    dropped = verdict_rates(lambda r: _consistency_delta(
        "c", records(rng.random(n) < rate), records(rng.random(n) < rate - drop), drop), reps)
    unchanged = verdict_rates(lambda r: _consistency_delta(
        "c", records(rng.random(n) < rate), records(rng.random(n) < rate), drop), reps)
    assert at_least(dropped["REGRESSION"], 0.80, reps), dropped      # the paired interval the gate uses here
    assert unchanged["REGRESSION"] <= 0.025 + 2 * math.sqrt(0.025 * 0.975 / reps), unchanged
    assert at_least(unchanged["ok"], 0.80, reps), unchanged           # ok is earned: ~80 % at this n too
    assert dropped["ok"] <= 0.025 + 2 * math.sqrt(0.025 * 0.975 / reps), dropped   # never "ok" on a true drop


# (base, current) of n paired trials whose median per-trial change is -shift (the gate's estimand)
@pytest.mark.parametrize("draw, drop", [
    (lambda rng, n, shift: (lambda b: (b, b - shift + rng.normal(0, 0.1, n)))(rng.normal(0.5, 0.15, n)), 0.1),
    # 30 % of the seeds fail on both sides (value 0, change 0); the valid ones move by -shift + U(-0.5, 0.2),
    # whose 5/7 quantile is 0, so the median of all changes is -shift; values stay above 0 (a normalized
    # score below the baseline counts 0, which would move the true change); a larger d keeps n small
    (lambda rng, n, shift: (lambda fail, b: (np.where(fail, 0.0, b),
                                             np.where(fail, 0.0, b - shift + rng.uniform(-0.5, 0.2, n))))(
        rng.random(n) < 0.3, rng.uniform(0.75, 0.8, n)), 0.2),
], ids=["normal", "zero-inflated"])
def test_median_gate_flags_a_drop_of_d_at_the_printed_trials(draw, drop):
    rng = np.random.default_rng(7)

    def delta(n, shift):
        base, cur = draw(rng, n, shift)
        return _median_delta("c", "normalized", records([True] * n, base), records([True] * n, cur), drop)

    pilot = delta(10, 0.0)
    n = pilot.trials_needed
    assert pilot.verdict.startswith("inconclusive") and n > 10
    reps = 400
    dropped = verdict_rates(lambda r: delta(n, drop), reps)
    unchanged = verdict_rates(lambda r: delta(n, 0.0), reps)
    slack = 2 * math.sqrt(0.025 * 0.975 / reps)
    assert at_least(dropped["REGRESSION"], 0.80, reps), (n, dropped)
    assert dropped["ok"] <= 0.025 + slack, (n, dropped)              # never "ok" on a true drop of d
    assert unchanged["REGRESSION"] <= 0.025 + slack, (n, unchanged)
