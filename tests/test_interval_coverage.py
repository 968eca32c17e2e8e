"""Every interval mltb prints reaches its coverage at the n where it is printed (issues 18 and 37).

Exact where the coverage can be summed (binomial intervals), seeded simulation elsewhere, and two-sided: a
too-narrow interval fails and so does a too-wide one. An exact interval over discrete order statistics cannot
cover exactly 95 %: its coverage is a known *attainable* level at or above the nominal one (the
order-statistic interval of a median at n = 6: 1 - 2/64 = 0.969), and the tests hold the simulated coverage
within +-1.5 points of it. Where no interval can reach its nominal coverage at the n where it is printed (a
difference of two rates at n = 1, a rate pooled over 3 tasks), the coverage it does reach is stated in
docs/statistics.md (the figures in ``STATED`` below) and the tests hold the interval to those figures, both
ways.
"""

import numpy as np
import pytest
from scipy import stats

from mltb_core.analysis.coverage import (DEPENDENCES, RATE_GRID, acceptable, paired_cells, paired_coverage,
                                         paired_interval_ends, paired_table_weights, unpaired_coverage)
from mltb_core.analysis.stats import (CI, MIN_TASKS_FOR_RATING_CI, MIN_TRIALS_FOR_MEDIAN_CI, NEWCOMBE_MIN_TRIALS,
                                      RateSample, TrialSample, _mann_whitney_cdf, bradley_terry_ratings, clustered_ci,
                                      clustered_rate_interval, family_level, median_change, median_interval,
                                      median_ranks, min_n_for_median_ci, min_n_for_shift_ci, newcombe_interval,
                                      paired_newcombe_interval, paired_proportion_diff_ci, paired_rate_change_exact,
                                      proportion_diff_ci, rate_interval, shift_rank, t_interval)

TOLERANCE = 0.015     # +- points around an interval's attainable coverage
REPS = 4000

# Coverage docs/statistics.md states where an interval cannot reach its nominal 95 % (each measured below).
STATED = {
    # the smallest exact coverage over the 39 x 39 grid at any n it is printed at (checked up to 40 / 16)
    "newcombe unpaired, grid minimum": 0.874,     # at n = 9, near rates of 0 or 1
    "newcombe paired, grid minimum": 0.884,       # at n = 16, correlated pairs
    # conservative: three tasks' spread has 2 degrees of freedom, and a rate of 0 or 1 over all of them counts
    # the tasks, not the trials (clustered_rate_interval)
    "korn-graubard, 3 x 3, uniform task rates": 1.0,
    "korn-graubard, 3 x 3, Beta(5, 5) task rates": 1.0,
    "korn-graubard, 3 x 3, Beta(0.5, 0.5) task rates": 1.0,
    "korn-graubard, 3 x 3, Beta(0.1, 0.1) task rates": 1.0,
    "korn-graubard, 3 x 3, Beta(0.1, 0.4) task rates": 0.9985,
    # the worst case of the 0/1 end: every task all-or-nothing, P(1) = 0.29; exact 0.9756 (a miss: all 9 succeed,
    # [0.29, 1] leaves 0.29 out by a hair), never below 0.975 by construction
    "korn-graubard, 3 x 3, all-or-nothing (0.29) task rates": 0.976,
}


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


def discrete_attainable(k: int, values: np.ndarray, pmf: np.ndarray, level: float = 0.95) -> float:
    """Exact coverage of the order-statistic interval of a median over k draws of a discrete distribution
    (``values`` with probabilities ``pmf``) for its median m: 1 - P(X_(l+1) > m) - P(X_(u+1) < m)."""
    low, high = median_ranks(k, level)
    cdf = np.cumsum(pmf)
    m = values[np.searchsorted(cdf, 0.5 - 1e-12)]             # the smallest value with F(m) >= 1/2
    below, at_most = float(pmf[values < m].sum()), float(pmf[values <= m].sum())
    return 1.0 - float(stats.binom.cdf(low, k, at_most)) - (1.0 - float(stats.binom.cdf(high, k, below)))


@pytest.mark.parametrize("trials", [3, 10])
@pytest.mark.parametrize("a, b", [(2, 2), (1, 3)])
def test_overall_consistency_over_tasks_covers_its_attainable_level(trials, a, b):
    """Tasks' true consistency from Beta(a, b), `trials` trials each, at the smallest k with an interval (6):
    the figure is a task's measured rate, a beta-binomial draw over trials + 1 values, so the exact
    coverage is a discrete attainable level (ties widen a closed interval), computed here and held both ways."""
    k = MIN_TRIALS_FOR_MEDIAN_CI
    rng = np.random.default_rng(k * 100 + trials)
    counts = np.arange(trials + 1)
    pmf = stats.betabinom.pmf(counts, trials, a, b)
    target = discrete_attainable(k, counts / trials, pmf)
    truth = (counts / trials)[np.searchsorted(np.cumsum(pmf), 0.5 - 1e-12)]
    valid = rng.binomial(trials, rng.beta(a, b, (REPS, k)))
    cis = [clustered_ci([RateSample(int(v), trials) for v in row]) for row in valid]
    covered = np.mean([ci.low <= truth <= ci.high for ci in cis])
    assert target >= 0.95 and abs(covered - target) <= TOLERANCE, (covered, target)


def test_overall_median_of_task_medians_covers_its_attainable_level():
    # per-task median percentiles: task centres from N(50, 20), trials N(centre, 10), 6 trials per task; the
    # task figure's distribution is symmetric about 50, so 50 is its median
    rng = np.random.default_rng(3)
    k = MIN_TRIALS_FOR_MEDIAN_CI
    centres = rng.normal(50, 20, (REPS, k))
    trials = rng.normal(centres[..., None], 10, (REPS, k, 6))
    cis = [clustered_ci([TrialSample(t) for t in tasks]) for tasks in trials]
    covered = np.mean([ci.low <= 50 <= ci.high for ci in cis])
    target = attainable(k, 0.95)
    assert abs(covered - target) <= TOLERANCE, (covered, target)


def unpaired_grids(n: int, interval=newcombe_interval) -> list:
    return [unpaired_coverage(n, interval)]


def paired_grids(n: int, interval=paired_newcombe_interval) -> list:
    return [paired_coverage(n, dependence, interval) for dependence in DEPENDENCES]


NEWCOMBE = {"unpaired": (unpaired_grids, 40), "paired": (paired_grids, 16)}    # the grids, the largest n checked


@pytest.mark.parametrize("kind", ["unpaired", "paired"])
def test_newcombe_is_printed_from_the_first_n_where_it_covers_about_95_percent(kind):
    """Newcombe's intervals of a difference of rates are approximate: printed from NEWCOMBE_MIN_TRIALS on, where
    (exact sums over the 39 x 39 grid of true rates; paired: independent and correlated pairs) the mean coverage
    is 0.935-0.965 and at most 5 % of the grid falls below 0.90, at every n checked from there; not one fewer
    (unpaired at 3: 6 % of the grid below 0.90; paired at 10, correlated: mean 0.966, so conservative)."""
    grids, largest = NEWCOMBE[kind]
    first = NEWCOMBE_MIN_TRIALS[kind]
    assert not acceptable(grids(first - 1))
    worst = 1.0
    for n in range(first, largest + 1):
        at_n = grids(n)
        assert acceptable(at_n), (n, [(g.mean, g.low_share) for g in at_n])
        worst = min(worst, *(g.minimum for g in at_n))
    # the grid's minimum over the printed n checked, as docs/statistics.md states it
    assert abs(worst - STATED[f"newcombe {kind}, grid minimum"]) <= 0.0005, worst


def test_newcombe_prints_counts_and_no_interval_below_its_first_n():
    below, at = NEWCOMBE_MIN_TRIALS["unpaired"] - 1, NEWCOMBE_MIN_TRIALS["unpaired"]
    assert not proportion_diff_ci(0, below, below, below).has_interval
    assert proportion_diff_ci(0, at, at, at).has_interval and proportion_diff_ci(0, at, at, 50).has_interval
    assert not proportion_diff_ci(0, below, at, 50).has_interval        # the smaller side decides
    pairs = [(True, False)] * (NEWCOMBE_MIN_TRIALS["paired"] - 1)
    assert not paired_proportion_diff_ci(pairs).has_interval and paired_proportion_diff_ci(pairs).estimate == -1.0
    assert paired_proportion_diff_ci(pairs + [(True, True)]).has_interval


@pytest.mark.parametrize("comparisons", [1, 4, 48])
def test_the_exact_paired_change_never_undercovers_below_newcombe(comparisons):
    """The gate's paired consistency interval below NEWCOMBE_MIN_TRIALS["paired"] pairs (exact: the discordant
    split's Clopper-Pearson, i.e. McNemar's exact test, times the discordant share's): its minimum coverage over
    the grid, independent and correlated pairs, is at least its level at every n it is used at, and each end
    misses with at most (1 - level) / 2 (the gate's false REGRESSION and false ok per cell)."""
    level = family_level(comparisons)
    for n in range(1, NEWCOMBE_MIN_TRIALS["paired"]):
        for dependence in DEPENDENCES:
            grid = paired_coverage(n, dependence, paired_rate_change_exact, level=level)
            assert grid.minimum >= level - 1e-9, (n, dependence, grid.minimum)
    # one end alone: P(high < truth) over the grid at the largest n it serves
    n = NEWCOMBE_MIN_TRIALS["paired"] - 1
    low, high = paired_interval_ends(n, paired_rate_change_exact, level)
    cells = np.array([[paired_cells(a, b, 0.5) for b in RATE_GRID] for a in RATE_GRID])
    weights = paired_table_weights(n, cells)
    truth = (RATE_GRID[None, :] - RATE_GRID[:, None])[..., None]
    assert (weights * (high[None, None] < truth - 1e-12)).sum(axis=-1).max() <= (1 - level) / 2 + 1e-12
    assert (weights * (low[None, None] > truth + 1e-12)).sum(axis=-1).max() <= (1 - level) / 2 + 1e-12


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


@pytest.mark.parametrize("comparisons", [1, 4, 48])
@pytest.mark.parametrize("population", ["normal", "skewed", "bimodal"])
def test_unpaired_median_change_covers_at_its_attainable_level_at_the_smallest_n(comparisons, population):
    """The unpaired change (seeds differ): the exact Mann-Whitney interval of a shift, at the fewest trials per side
    that have one at the gate's level (4 alone, 5 at m = 4, 7 at m = 48). When the change moves every trial alike
    (a shift: then it is the change of the median), it covers at its attainable level 1 - 2 P(U <= k) (0.971,
    0.992, 0.9994), held both ways. The Bonferroni combination of both sides' 97.5 % order-statistic intervals
    used before covered 0.999 at 7 per side."""
    rng = np.random.default_rng(14)
    level = family_level(comparisons)
    n = min_n_for_shift_ci(level)
    k = shift_rank(n, n, level)
    target = 1.0 - 2.0 * float(_mann_whitney_cdf(n, n)[k])
    assert target >= level and shift_rank(n - 1, n - 1, level) is None
    base, cur = DRAWS[population](rng, (REPS, n)), DRAWS[population](rng, (REPS, n)) + 0.05
    cis = [median_change(TrialSample(c), TrialSample(b), paired=False, level=level) for b, c in zip(base, cur)]
    covered = np.mean([ci.low <= 0.05 <= ci.high for ci in cis])
    assert abs(covered - target) <= TOLERANCE, (n, covered, target)


POOLED_POPULATIONS = ["uniform", "Beta(5, 5)", "Beta(0.5, 0.5)", "Beta(0.1, 0.1)", "Beta(0.1, 0.4)",
                      "all-or-nothing (0.29)"]


def pooled_coverage(tasks: str, interval=clustered_rate_interval) -> tuple[float, np.ndarray, float]:
    """(coverage, successes per run and task, true rate) of a rate pooled over 3 tasks x 3 trials."""
    rng = np.random.default_rng(15)
    shape = {"Beta(5, 5)": (5, 5), "Beta(0.5, 0.5)": (0.5, 0.5), "Beta(0.1, 0.1)": (0.1, 0.1),
             "Beta(0.1, 0.4)": (0.1, 0.4)}.get(tasks)
    if tasks.startswith("all-or-nothing"):
        truth = 0.29
        rates = (rng.random((REPS, 3)) < truth).astype(float)
    else:
        truth = 0.5 if shape is None else shape[0] / sum(shape)   # the mean task rate the pooled rate estimates
        rates = rng.random((REPS, 3)) if shape is None else rng.beta(*shape, (REPS, 3))
    successes = rng.binomial(3, rates)
    covered = np.mean([(lambda c: c.low <= truth <= c.high)(interval([(int(s), 3) for s in row])) for row in successes])
    return float(covered), successes, truth


@pytest.mark.parametrize("tasks", POOLED_POPULATIONS)
def test_a_rate_pooled_over_three_tasks_covers_as_stated(tasks):
    """3 tasks x 3 trials (the smallest design the stage comparison prints): the cluster-aware interval covers
    0.998-1.000 in the task populations measured and at least 0.975 in any (its 0/1 end is exact over the
    tasks; the worst case, all-or-nothing tasks succeeding with probability 0.29, reaches 0.976), as the
    table's note and docs/statistics.md state. A pooled Clopper-Pearson, treating 9 trials as independent,
    falls to 0.88 under uniform rates; and where most tasks are all-or-nothing (Beta(0.1, 0.1)), counting the
    trials at a pooled rate of 0 or 1 (what the interval did before) covered 0.83 only."""
    covered, successes, truth = pooled_coverage(tasks)
    assert covered >= 0.95 - TOLERANCE and abs(covered - STATED[f"korn-graubard, 3 x 3, {tasks} task rates"]) \
        <= TOLERANCE, covered
    if tasks == "uniform":
        pooled = [rate_interval(int(row.sum()), 9) for row in successes]
        assert np.mean([c.low <= truth <= c.high for c in pooled]) < 0.95 - TOLERANCE
    if tasks == "Beta(0.1, 0.1)":
        by_trials = [rate_interval(int(row.sum()), 9) if row.sum() in (0, 9)
                     else clustered_rate_interval([(int(s), 3) for s in row]) for row in successes]
        assert np.mean([c.low <= truth <= c.high for c in by_trials]) < 0.90


# Bradley-Terry ratings (ranking.py prints them for every planner, simultaneously). Two populations of tasks,
# 8 planners (as in reports/planner-comparison.md) x 3 trials each:
# - "normal": planner i's per-trial score on a task is b_i + a_ti + e, a_ti ~ N(0, 1) (how planner i suits task
#   t; a common task effect cancels in every pair), e ~ N(0, 1) per trial. i beats j on a task when its mean
#   of 3 trials is higher, with probability Phi((b_i - b_j) / sqrt(2 + 2/3)).
# - "ties": a trial is valid with probability logistic(b_i + a_ti), a_ti ~ N(0, 1); a valid trial scores
#   Beta(4, 4), a failed one 0, so two planners that fail every trial of a task tie, and one planner can win
#   every game (the sweeps whose ends mltb leaves open).
# The true rating is the Bradley-Terry fit to the population's chances of winning (what the fit converges to
# over ever more tasks), Elo scale, mean 0; all 0 when the planners are equal (b = 0).
BT_PLANNERS, BT_TRIALS = 8, 3
BT_SPREAD = {"normal": 1.0, "ties": 1.5}       # b = linspace(-s, s): true ratings about -175 .. +175
# Family-wise coverage (every planner's interval holds its true rating), measured over 4,000 seeded runs
# (seed 2026, docs/statistics.md); the tests rerun the first BT_RUNS of them.
BT_STATED = {("normal", 0.0, 3): 0.9507, ("normal", 1.0, 3): 0.9515, ("ties", 0.0, 3): 0.945,
             ("ties", 1.5, 3): 0.9377, ("normal", 1.0, 10): 0.9615}
BT_RUNS = 1000


def bt_fit(wins: np.ndarray) -> np.ndarray:
    """Ratings (Elo, mean 0) fitted to chances of winning wins[i, j]: Newton's method on
    sum P_ij log sigmoid(r_i - r_j)."""
    wins = wins.copy()
    np.fill_diagonal(wins, 0.0)
    games = wins + wins.T
    rating = np.zeros(len(wins))
    for _ in range(50):
        p = 1 / (1 + np.exp(rating[None, :] - rating[:, None]))
        gradient = (wins - games * p).sum(axis=1)
        hessian = games * p * (1 - p)
        step = np.linalg.solve(hessian - np.diag(hessian.sum(axis=1)) - 1.0, gradient)   # -1: the mean-0 gauge
        rating = rating - step
        rating -= rating.mean()
    return rating * 400 / np.log(10)


def bt_task_scores(rng: np.random.Generator, design: str, effects: np.ndarray, tasks: int) -> np.ndarray:
    """Each planner's mean score on each task, shape (tasks, planners)."""
    suits = rng.normal(0, 1, (tasks, len(effects)))
    if design == "normal":
        return effects[None, :] + suits + rng.normal(0, 1, (tasks, len(effects), BT_TRIALS)).mean(axis=-1)
    valid = rng.random((tasks, len(effects), BT_TRIALS)) < 1 / (1 + np.exp(-(effects[None, :] + suits)))[..., None]
    return np.where(valid, rng.beta(4, 4, valid.shape), 0.0).mean(axis=-1)


def bt_true_ratings(effects: np.ndarray, design: str = "normal") -> np.ndarray:
    if design == "normal":
        return bt_fit(stats.norm.cdf((effects[:, None] - effects[None, :]) / np.sqrt(2 + 2 / BT_TRIALS)))
    if not effects.any():
        return np.zeros(len(effects))          # equal planners: every chance is 1/2 by symmetry
    scores = bt_task_scores(np.random.default_rng(1), design, effects, 200_000)
    a, b = scores[:, :, None], scores[:, None, :]
    return bt_fit(((a > b) + 0.5 * (a == b)).mean(axis=0))


def bt_draw(rng: np.random.Generator, effects: np.ndarray, tasks: int, design: str = "normal") -> dict:
    scores = bt_task_scores(rng, design, effects, tasks)
    return {f"t{t}": {f"p{i}": float(scores[t, i]) for i in range(len(effects))} for t in range(tasks)}


def bt_family_coverage(design: str, spread: float, tasks: int, runs: int, seed: int = 2026) -> tuple[float, float]:
    """(share of runs where every interval holds its planner's true rating, share where some excludes 0)."""
    effects = np.linspace(-spread, spread, BT_PLANNERS)
    truth = dict(zip((f"p{i}" for i in range(BT_PLANNERS)), bt_true_ratings(effects, design)))
    rng = np.random.default_rng(seed)
    covered = excludes_zero = 0
    for _ in range(runs):
        ratings = bradley_terry_ratings(bt_draw(rng, effects, tasks, design))
        ends = [(-np.inf if r.low is None else r.low, np.inf if r.high is None else r.high, truth[r.player])
                for r in ratings]
        covered += all(low <= true <= high for low, high, true in ends)
        excludes_zero += any(not low <= 0 <= high for low, high, _ in ends)
    return covered / runs, excludes_zero / runs


def test_bradley_terry_estimand_is_what_the_fit_converges_to():
    effects = np.linspace(-BT_SPREAD["normal"], BT_SPREAD["normal"], BT_PLANNERS)
    truth = bt_true_ratings(effects)
    assert truth[-1] == pytest.approx(-truth[0]) and 150 < truth[-1] < 200 and abs(truth.mean()) < 1e-9
    scores = bt_draw(np.random.default_rng(5), effects, 3000)     # 3,000 tasks: sampling error ~ 5 points
    ratings = {r.player: r.estimate for r in bradley_terry_ratings(scores)}
    assert max(abs(ratings[f"p{i}"] - truth[i]) for i in range(BT_PLANNERS)) < 15, (ratings, truth)
    ties = bt_true_ratings(np.linspace(-BT_SPREAD["ties"], BT_SPREAD["ties"], BT_PLANNERS), "ties")
    assert 150 < ties[-1] < 200 and 150 < -ties[0] < 200


@pytest.mark.parametrize("design, spread, tasks", [
    pytest.param("normal", 0.0, MIN_TASKS_FOR_RATING_CI), pytest.param("normal", 1.0, MIN_TASKS_FOR_RATING_CI),
    pytest.param("ties", 0.0, MIN_TASKS_FOR_RATING_CI), pytest.param("ties", 1.5, MIN_TASKS_FOR_RATING_CI),
    pytest.param("normal", 1.0, 10, marks=pytest.mark.slow)])
def test_bradley_terry_intervals_cover_jointly_as_stated(design, spread, tasks):
    """At the smallest number of tasks with an interval (and at 10), all 8 intervals at once hold the true
    ratings within 1.5 points of 95 %, both ways, and within three Monte-Carlo standard errors of the
    figure docs/statistics.md states."""
    stated = BT_STATED[(design, spread, tasks)]
    covered, excludes_zero = bt_family_coverage(design, spread, tasks, BT_RUNS)
    assert abs(stated - 0.95) <= TOLERANCE
    assert abs(covered - 0.95) <= TOLERANCE + 3 * np.sqrt(0.05 * 0.95 / BT_RUNS), (covered, stated)
    assert abs(covered - stated) <= 3 * np.sqrt(stated * (1 - stated) / BT_RUNS), (covered, stated)
    if spread == 0.0:
        assert excludes_zero == pytest.approx(1 - covered)    # the null: a false finding is a miss


def test_no_rating_interval_below_the_minimum_number_of_tasks():
    ratings = bradley_terry_ratings(bt_draw(np.random.default_rng(1), np.zeros(4), MIN_TASKS_FOR_RATING_CI - 1))
    assert not any(r.has_interval or r.low is not None or r.high is not None for r in ratings)
    scores = bt_draw(np.random.default_rng(1), np.zeros(4), MIN_TASKS_FOR_RATING_CI)
    assert all(r.has_interval for r in bradley_terry_ratings(scores))


# -- the checks above catch an interval made too narrow or too wide -----------------------------------------
# Each check is rerun on the interval with its ends moved about the estimate to 0.8x and 1.3x their distance
# from it: every one must fail, or the check could not tell a right interval from a wrong one.
WIDTHS = [0.8, 1.3]


def scaled(interval, factor: float):
    def rescaled(*args, **kwargs) -> CI:
        ci = interval(*args, **kwargs)
        if not ci.has_interval:
            return ci
        e = ci.estimate
        return CI(e, e - factor * (e - ci.low), e + factor * (ci.high - e), ci.n, ci.level)
    return rescaled


def clopper_pearson_holds(interval, n: int) -> bool:
    """Exact: coverage >= 95 % at every rate of a fine grid, and 97.5 % (within 1.5 points) just above the
    Clopper-Pearson upper end of 0 successes, beta(0.975; 1, n), where only X = 0 can miss."""
    bounds = [interval(k, n) for k in range(n + 1)]
    lows, highs = np.array([b.low for b in bounds]), np.array([b.high for b in bounds])

    def coverage(p: float) -> float:
        return float(stats.binom.pmf(np.arange(n + 1), n, p)[(lows <= p) & (p <= highs)].sum())

    tight = float(stats.beta.ppf(0.975, 1, n)) + 1e-9
    return (min(coverage(p) for p in np.linspace(0.005, 0.995, 199)) >= 0.95 - 1e-9
            and abs(coverage(tight) - 0.975) <= TOLERANCE)


@pytest.mark.parametrize("n", [1, 3, 15])
def test_clopper_pearson_check_holds_exactly(n):
    assert clopper_pearson_holds(rate_interval, n)


@pytest.mark.parametrize("factor", WIDTHS)
def test_clopper_pearson_check_catches_a_rescaled_interval(factor):
    assert not all(clopper_pearson_holds(scaled(rate_interval, factor), n) for n in (1, 3, 15))


@pytest.mark.parametrize("factor", WIDTHS)
@pytest.mark.parametrize("kind", ["unpaired", "paired"])
def test_newcombe_check_catches_a_rescaled_interval(kind, factor):
    grids, _ = NEWCOMBE[kind]
    raw = newcombe_interval if kind == "unpaired" else paired_newcombe_interval
    assert not acceptable(grids(NEWCOMBE_MIN_TRIALS[kind], scaled(raw, factor)))


def median_change_coverage(paired: bool, change=median_change, reps: int = REPS) -> tuple[float, float]:
    """(simulated coverage, attainable level) of the change of a median at the fewest trials with an interval,
    alone (m = 1): paired on skewed noise, unpaired a shift of normal trials."""
    rng = np.random.default_rng(16)
    if paired:
        n = min_n_for_median_ci()
        target = attainable(n, 0.95)
        base = DRAWS["normal"](rng, (reps, n))
        cur = base - 0.1 + rng.exponential(0.2, (reps, n)) - 0.2 * np.log(2)
        truth = -0.1
    else:
        n = min_n_for_shift_ci()
        target = 1.0 - 2.0 * float(_mann_whitney_cdf(n, n)[shift_rank(n, n)])
        base, cur = DRAWS["normal"](rng, (reps, n)), DRAWS["normal"](rng, (reps, n)) + 0.05
        truth = 0.05
    cis = [change(TrialSample(c), TrialSample(b), paired=paired) for b, c in zip(base, cur)]
    return float(np.mean([ci.low <= truth <= ci.high for ci in cis])), target


@pytest.mark.parametrize("paired", [True, False])
def test_median_change_check_catches_a_rescaled_interval(paired):
    covered, target = median_change_coverage(paired)
    assert abs(covered - target) <= TOLERANCE
    for factor in WIDTHS:
        covered, target = median_change_coverage(paired, scaled(median_change, factor))
        assert abs(covered - target) > TOLERANCE, (factor, covered, target)


@pytest.mark.parametrize("factor", WIDTHS)
def test_median_interval_check_catches_a_rescaled_interval(factor):
    """At one of the n the coverage test checks (its attainable level is 0.969 at 6, 0.959 at 20)."""
    caught = []
    for n in (MIN_TRIALS_FOR_MEDIAN_CI, 20):
        rng, interval = np.random.default_rng(n), scaled(median_interval, factor)
        covered = np.mean([(lambda ci: ci.low <= 1.0 <= ci.high)(interval(rng.lognormal(0, 1, n))) for _ in range(2000)])
        caught.append(abs(covered - attainable(n, 0.95)) > TOLERANCE)
    assert any(caught)


def test_pooled_rate_check_catches_a_wider_interval():
    """Korn-Graubard at 3 tasks is conservative and labelled so (the stage table's note): the all-or-nothing
    population, where its 0/1 end binds at 0.976, tells a 1.3x wider interval from it. A 0.8x narrower one still
    covers 0.97 there and above 0.985 in every other population drawn: at 3 tasks it would be valid too, which is
    what "conservative" says, so no coverage check can (or should) fail it."""
    missed = [abs(pooled_coverage(tasks, scaled(clustered_rate_interval, 1.3))[0]
                  - STATED[f"korn-graubard, 3 x 3, {tasks} task rates"]) > TOLERANCE for tasks in POOLED_POPULATIONS]
    assert any(missed), missed
    narrower = pooled_coverage("all-or-nothing (0.29)", scaled(clustered_rate_interval, 0.8))[0]
    assert 0.95 <= narrower < STATED["korn-graubard, 3 x 3, all-or-nothing (0.29) task rates"], narrower


@pytest.mark.parametrize("factor", WIDTHS)
def test_bradley_terry_check_catches_a_rescaled_interval(factor, monkeypatch):
    """The jackknife's half-width is t(k-1) * se: with the t factor scaled (and so every jackknife end), the
    joint coverage at 10 tasks leaves the band the coverage test holds it to. At 3 tasks that band (1,000 runs:
    1.5 points plus three standard errors) holds 0.8x (0.931) and 1.3x (0.969) too: docs/statistics.md says so."""
    tasks = 10
    from mltb_core.analysis import stats as stats_module

    real = stats_module._scipy_stats.t

    class ScaledT:
        @staticmethod
        def ppf(q, df):
            return factor * real.ppf(q, df)

    monkeypatch.setattr(stats_module._scipy_stats, "t", ScaledT)
    covered, _ = bt_family_coverage("normal", 1.0, tasks, BT_RUNS)
    stated = BT_STATED[("normal", 1.0, tasks)]
    assert abs(covered - stated) > 3 * np.sqrt(stated * (1 - stated) / BT_RUNS), covered
    assert abs(covered - 0.95) > TOLERANCE + 3 * np.sqrt(0.05 * 0.95 / BT_RUNS), covered
