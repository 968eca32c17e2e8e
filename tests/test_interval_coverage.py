"""Every interval mltb prints reaches its coverage at the n where it is printed (issues 18 and 37).

Exact where the coverage can be summed (binomial intervals), seeded simulation elsewhere. An exact interval
over discrete order statistics cannot cover exactly 95 %: its coverage is a known *attainable* level at or
above the nominal one (the order-statistic interval of a median at n = 6: 1 - 2/64 = 0.969). Those tests
assert that the attainable level is >= nominal and that the simulated coverage lies within +-1.5 points of
it, so a too-narrow interval fails and so does a too-wide one. The resampling intervals over tasks keep a
one-sided floor ("at least 93 %": the estimate at least 0.93 less two standard errors of a rate of 0.93);
they are conservative (documented in docs/statistics.md).
"""
import math

import numpy as np
import pytest
from scipy import stats

from mltb_core.analysis.stats import (MIN_TRIALS_FOR_MEDIAN_CI, RateSample, TrialSample, _wilson_bounds, clustered_ci,
                                      clustered_rate_interval, family_level, median_change, median_interval,
                                      median_ranks, min_n_for_median_ci, rate_interval, t_interval, z_value)

TOLERANCE = 0.015     # +- points around an interval's attainable coverage
REPS = 4000

TARGET = 0.93


def at_least(coverage: float, reps: int, target: float = TARGET) -> bool:
    return coverage >= target - 2 * math.sqrt(target * (1 - target) / reps)


def test_rate_interval_covers_at_every_n_and_rate():
    # Clopper-Pearson: exact, so the minimum over rates is >= 95 % at every n (Wilson's dips to 0.79)
    for n in range(1, 31):
        bounds = [rate_interval(k, n) for k in range(n + 1)]
        for p in np.linspace(0.01, 0.99, 99):
            pmf = stats.binom.pmf(np.arange(n + 1), n, p)
            covered = sum(w for w, ci in zip(pmf, bounds) if ci.low <= p <= ci.high)
            assert covered >= 0.95 - 1e-9, (n, p, covered)


@pytest.mark.parametrize("n", [MIN_TRIALS_FOR_MEDIAN_CI, 7, 10, 20])
@pytest.mark.parametrize("population", ["lognormal", "zero-inflated"])
def test_median_interval_covers_the_median(n, population):
    rng = np.random.default_rng(n)
    reps = 2000
    if population == "lognormal":
        draw, true_median = (lambda: rng.lognormal(0, 1, n)), 1.0
    else:   # 30 % failed trials at 0, the rest uniform on (20, 100): median = 20 + 80 * (0.5 - 0.3) / 0.7
        draw, true_median = (lambda: np.where(rng.random(n) < 0.3, 0.0, rng.uniform(20, 100, n))), 20 + 80 * 0.2 / 0.7
    hits = 0
    for _ in range(reps):
        ci = median_interval(draw())
        hits += ci.low <= true_median <= ci.high
    target = attainable(n, 0.95)
    assert target >= 0.95 and abs(hits / reps - target) <= TOLERANCE, (hits / reps, target)


def test_no_median_interval_below_the_minimum():
    assert not median_interval([1.0, 2.0, 3.0, 4.0, 5.0]).has_interval
    assert median_interval([1.0] * MIN_TRIALS_FOR_MEDIAN_CI).has_interval


@pytest.mark.parametrize("k", [6, 15])
@pytest.mark.parametrize("trials", [3, 10])
@pytest.mark.parametrize("a, b", [(2, 2), (1, 3)])
def test_overall_median_over_tasks_covers(k, trials, a, b):
    # tasks' true consistency from Beta(a, b); the overall estimates the median task's consistency
    rng = np.random.default_rng(k * 100 + trials)
    reps, true_median = 200, stats.beta.median(a, b)
    hits = 0
    for r in range(reps):
        valid = rng.binomial(trials, rng.beta(a, b, k))
        ci = clustered_ci([RateSample(int(v), trials) for v in valid], resamples=300, seed=r)
        hits += ci.low <= true_median <= ci.high
    assert at_least(hits / reps, reps), hits / reps


def test_overall_median_of_task_medians_covers():
    # per-task median percentiles: task centres from N(50, 20), trials N(centre, 10), 6 trials per task
    rng = np.random.default_rng(3)
    reps, hits = 200, 0
    for r in range(reps):
        samples = [TrialSample(rng.normal(c, 10, 6)) for c in rng.normal(50, 20, 8)]
        ci = clustered_ci(samples, resamples=300, seed=r)
        hits += ci.low <= 50 <= ci.high
    assert at_least(hits / reps, reps), hits / reps


def newcombe_coverage(n: int, p_base: float, p_cur: float) -> float:
    """Exact coverage of Newcombe's hybrid score interval of p_cur - p_base, n trials per side."""
    x = np.arange(n + 1, dtype=float)
    low, high = _wilson_bounds(x, n, z_value())
    p = x / n
    pb, pc = p[:, None], p[None, :]
    lower = pc - pb - np.sqrt((pc - low[None, :]) ** 2 + (high[:, None] - pb) ** 2)
    upper = pc - pb + np.sqrt((high[None, :] - pc) ** 2 + (pb - low[:, None]) ** 2)
    weight = stats.binom.pmf(x, n, p_base)[:, None] * stats.binom.pmf(x, n, p_cur)[None, :]
    truth = p_cur - p_base
    return float(weight[(lower <= truth + 1e-12) & (truth - 1e-12 <= upper)].sum())


@pytest.mark.parametrize("n", [2, 3, 5, 10, 20, 40])
def test_rate_difference_interval_covers_on_average_over_rates(n):
    # Newcombe's interval (the gate's consistency change, `mltb compare`'s validity change): its mean
    # coverage over true rates holds at every n; its minimum dips to 0.87 at n <= 8 for rates near 0 or 1
    # (a known property of score intervals; docs/grading.md says so), which is why the gate's operating
    # characteristics are checked separately (tests/test_gate_operating.py)
    grid = np.linspace(0.05, 0.95, 19)
    coverage = np.array([[newcombe_coverage(n, a, b) for b in grid] for a in grid])
    assert coverage.mean() >= 0.945
    assert coverage.min() >= 0.86


@pytest.mark.parametrize("k", [2, 3, 6])
def test_mean_change_over_tasks_covers(k):
    # combined rows: per-task changes = a task effect plus the task's trial noise (mean of 5 trials)
    rng = np.random.default_rng(k)
    reps, hits = 2000, 0
    for _ in range(reps):
        changes = rng.normal(0.1, 0.2, k) + rng.normal(0, 0.3, (k, 5)).mean(axis=1)
        ci = t_interval(changes)
        hits += ci.low <= 0.1 <= ci.high
    assert abs(hits / reps - 0.95) <= TOLERANCE, hits / reps      # exact for normal task effects: neither way


def attainable(n: int, level: float) -> float:
    low, _ = median_ranks(n, level)
    return 1.0 - 2.0 * float(stats.binom.cdf(low, n, 0.5))


DRAWS = {"normal": lambda rng, size: rng.normal(0.4, 0.2, size),
         "skewed": lambda rng, size: rng.exponential(0.3, size),
         "bimodal": lambda rng, size: np.where(rng.random(size) < 0.5, rng.normal(0.1, 0.05, size),
                                               rng.normal(0.8, 0.05, size))}


@pytest.mark.parametrize("comparisons", [1, 4, 48])     # alone, and at the gate's Bonferroni level
def test_paired_median_change_covers_at_its_attainable_level_at_the_smallest_n(comparisons):
    rng = np.random.default_rng(12)
    level = family_level(comparisons)
    n = min_n_for_median_ci(level)
    target = attainable(n, level)
    assert target >= level
    base = DRAWS["normal"](rng, (REPS, n))
    shift = -0.1
    cur = base + shift + rng.exponential(0.2, (REPS, n)) - 0.2 * np.log(2)   # skewed noise, median change -0.1
    cis = [median_change(TrialSample(c), TrialSample(b), paired=True, level=level) for b, c in zip(base, cur)]
    covered = np.mean([ci.low <= shift <= ci.high for ci in cis])
    assert abs(covered - target) <= TOLERANCE, (n, covered, target)


@pytest.mark.parametrize("n", [1, 3, 15])
def test_clopper_pearson_never_undercovers_and_is_tight(n):
    """Coverage >= 95 % at every rate (on a grid), and exactly 97.5 % just above an upper bound u(x): there
    only the tail P(X <= x) = 2.5 % misses, so a wider interval would show up as higher coverage there."""
    rng = np.random.default_rng(13)
    bounds = [rate_interval(x, n) for x in range(n + 1)]
    lows, highs = np.array([b.low for b in bounds]), np.array([b.high for b in bounds])

    def coverage(p: float) -> float:
        x = rng.binomial(n, p, REPS)
        return float(np.mean((lows[x] <= p) & (p <= highs[x])))

    grid = [coverage(p) for p in np.linspace(0.01, 0.99, 25)]
    assert min(grid) >= 0.95 - TOLERANCE, min(grid)
    tight = highs[0] + 1e-9                 # just above u(0): x = 0 misses (probability 2.5 %), nothing else
    assert abs(coverage(tight) - 0.975) <= TOLERANCE


def test_unpaired_median_change_never_undercovers():
    """The unpaired change (difference of medians, Bonferroni over the two sides) is conservative by design."""
    rng = np.random.default_rng(14)
    n = min_n_for_median_ci(0.975)
    base, cur = DRAWS["skewed"](rng, (REPS, n)), DRAWS["skewed"](rng, (REPS, n)) + 0.05
    cis = [median_change(TrialSample(c), TrialSample(b), paired=False) for b, c in zip(base, cur)]
    covered = np.mean([ci.low <= 0.05 <= ci.high for ci in cis])
    assert covered >= 0.95 - TOLERANCE, covered


def test_a_rate_pooled_over_three_tasks_covers_under_task_heterogeneity():
    """3 tasks x 3 trials whose task rates differ (uniform over [0, 1]): the cluster-aware interval keeps its
    95 % where a pooled Clopper-Pearson, treating 9 trials as independent, does not (0.88). Known limit: it is
    conservative when tasks agree (0.99 with Beta(5, 5) task rates) and near its floor, 0.93, when they differ
    most (Beta(0.5, 0.5)): three tasks carry little information about their spread."""
    rng = np.random.default_rng(15)
    rates = rng.random((REPS, 3))                         # tasks that differ
    successes = rng.binomial(3, rates)
    truth = 0.5                                           # the mean task rate the pooled rate estimates
    clustered = [clustered_rate_interval([(int(s), 3) for s in row]) for row in successes]
    pooled = [rate_interval(int(row.sum()), 9) for row in successes]
    assert np.mean([c.low <= truth <= c.high for c in clustered]) >= 0.95 - TOLERANCE
    assert np.mean([c.low <= truth <= c.high for c in pooled]) < 0.95 - TOLERANCE    # the failure it fixes
