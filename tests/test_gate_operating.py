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
import re
from pathlib import Path

import numpy as np
import pytest

from mltb_core.analysis.compare import _consistency_delta, _median_delta, _planning_rate
from mltb_core.analysis.coverage import DEPENDENCES, GateRule
from mltb_core.analysis.records import TrialRecord
from mltb_core.analysis.stats import NEWCOMBE_MIN_TRIALS, family_level, rate_gate_probabilities
from mltb_core.config import GATE_PRESETS

PRESET_TRIALS = int(GATE_PRESETS["ci"]["trials"])
STATISTICS = Path(__file__).resolve().parents[1] / "docs" / "statistics.md"
COMPARISONS = (1, 4, 48)
ROW = re.compile(r"^\| (\d+) \| (same|differ) \| ([0-9.]+) \| (.+) \|$")


def documented_rates() -> dict[tuple[int, bool, float], dict[int, tuple[float, float]]]:
    """docs/statistics.md's table of the consistency verdict's measured error rates: (n, paired, d) -> m ->
    (largest false REGRESSION, largest false ok)."""
    text = STATISTICS.read_text(encoding="utf-8")
    table = text[text.index("#### Measured error rates of the consistency verdict"):]
    out = {}
    for line in table.splitlines()[1:]:
        if line.startswith("#"):
            break
        match = ROW.match(line)
        if match:
            cells = [tuple(float(v) for v in cell.split(" / ")) for cell in match.group(4).split(" | ")]
            out[(int(match.group(1)), match.group(2) == "same", float(match.group(3)))] = dict(zip(COMPARISONS, cells))
    return out


DOCUMENTED = documented_rates()


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


def test_the_documented_error_rates_include_the_preset():
    ns = {n for n, _, _ in DOCUMENTED}
    assert PRESET_TRIALS in ns and NEWCOMBE_MIN_TRIALS["paired"] in ns, sorted(ns)
    assert {(PRESET_TRIALS, paired, d) for paired in (True, False) for d in (0.05, 0.2)} <= DOCUMENTED.keys()


@pytest.mark.parametrize("n", sorted({n for n, _, _ in DOCUMENTED}))
def test_documented_error_rates_are_the_measured_ones(n):
    """Every row of docs/statistics.md's table, recomputed exactly through the gate's own rule (every outcome of
    n trials per side summed, 39 true rates, paired: independent and correlated pairs), equal to the 4 decimals
    printed: the largest chance of REGRESSION on a true zero change and of ok on a true drop of d, per cell, at
    the level of m gated comparisons. Below NEWCOMBE_MIN_TRIALS["paired"] pairs the paired rule's interval is
    exact, so both stay within its share (1 - 0.95) / (2 m); Newcombe's (unpaired from 4 per side, paired from 11)
    exceed it, and the table says by how much."""
    for (rows_n, paired, drop), by_m in DOCUMENTED.items():
        if rows_n != n:
            continue
        for m, (false_regression, false_ok) in by_m.items():
            rates = GateRule(n, drop, m, paired).rates()
            assert abs(rates.false_regression - false_regression) <= 0.00005 + 1e-9, (paired, drop, m, rates)
            assert abs(rates.false_ok - false_ok) <= 0.00005 + 1e-9, (paired, drop, m, rates)
            if paired and n < NEWCOMBE_MIN_TRIALS["paired"]:
                share = (1 - family_level(m)) / 2
                assert rates.false_regression <= share + 1e-12 and rates.false_ok <= share + 1e-12, (m, rates)


@pytest.mark.parametrize("comparisons", COMPARISONS)
def test_the_trials_the_gate_prints_give_the_power_it_states(comparisons):
    """An inconclusive cell at the preset's trials prints the trials per cell at which a true drop of d is
    flagged, and a true zero change called ok, with power 0.8 at the cell's level: exact for the unpaired
    interval (what it is computed for) at the rate it plans with. The gate's paired rule at that number (exact
    over every table; a large d keeps the tables few): within 2-4 points of it for independent pairs, above it
    for correlated ones."""
    level = family_level(comparisons)
    base, cur = records([True] * PRESET_TRIALS), records([True] * (PRESET_TRIALS - 1) + [False])
    for drop in (0.2, 0.4):
        delta = _consistency_delta("c", base, cur, drop, level)
        assert delta.verdict == f"inconclusive (need ~{delta.trials_needed} trials/cell)", delta.verdict
        n, rate = delta.trials_needed, _planning_rate(PRESET_TRIALS, PRESET_TRIALS)
        flagged, passed = (rate_gate_probabilities(n, rate, rate - drop, drop, level)[0],
                           rate_gate_probabilities(n, rate, rate, drop, level)[1])
        assert flagged >= 0.8 and passed >= 0.8, (drop, n, flagged, passed)
    rule = GateRule(n, drop, comparisons, paired=True)
    assert n >= NEWCOMBE_MIN_TRIALS["paired"] and DEPENDENCES == (0.0, 0.5)
    (flagged, flagged_correlated), = rule.chance("REGRESSION", np.array([rate]), np.array([rate - drop])).T
    (passed, passed_correlated), = rule.chance("ok", np.array([rate]), np.array([rate])).T
    # as docs/statistics.md states: about the power for independent pairs (0.78-0.84), more for correlated ones
    assert 0.78 <= min(flagged, passed) and max(flagged, passed) <= 0.85, (n, flagged, passed)
    assert min(flagged_correlated, passed_correlated) >= 0.85, (n, flagged_correlated, passed_correlated)
