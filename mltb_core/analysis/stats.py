"""Confidence intervals for the benchmark's figures, and what a given number of trials can detect.

Everything here is deterministic for a given seed, so the same records always print the
same intervals (the terminal summary must be identical with and without xdist).

Sources of noise and where each is handled:

- **trials**: a rerun draws new planner/LLM randomness. Rates (consistency) get Wilson score
  intervals (:func:`wilson_interval`); medians (percentile, normalized score) a bootstrap that
  resamples trials (:class:`TrialSample`).
- **held-out rows**: every trial of a task is graded on the same held-out split, so its sampling
  noise is shared by all trials and never averages out. The grader scores ``ROW_REPLICATES``
  resamples of the scored rows (:func:`mltb_core.bench.grading.row_bootstrap`, seeded by the split seed, so replicate
  ``b`` is the same row resample for every trial of the split); a bootstrap replicate picks one
  ``b`` per task and uses it for every trial drawn from that task (paired by ``b``).
- **tasks**: the across-task median resamples tasks too (:func:`clustered_ci`): a different
  task list would give a different median.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from scipy import stats as _scipy_stats

__all__ = ["CI", "bootstrap_ci", "median", "mean", "STATISTICS", "wilson_interval", "proportion_diff_ci",
           "paired_proportion_diff_ci", "TrialSample", "RateSample", "clustered_ci", "diff_ci", "z_value",
           "trials_needed_for_rate_drop", "powered_half_width", "POWER", "MIN_TRIALS_FOR_MEDIAN_CI",
           "DEFAULT_LEVEL", "DEFAULT_RESAMPLES", "PASS_AT_K", "pass_at_k", "Rating", "pairwise_outcomes",
           "bradley_terry_ratings", "FriedmanResult", "friedman_test", "holm"]

DEFAULT_RESAMPLES = 2000
DEFAULT_LEVEL = 0.95
POWER = 0.8                 # 1 - beta of the power check
# A distribution-free 95 % interval for a median needs 6 values: the min-max range of n values covers
# the median with probability 1 - 2**(1-n), which is 0.9375 at n=5 and 0.969 at n=6. Below that a
# bootstrap interval of a median only reflects the few values drawn.
MIN_TRIALS_FOR_MEDIAN_CI = 6


@dataclass(frozen=True)
class CI:
    """A point estimate with a two-sided confidence interval; all None for an empty sample."""
    estimate: float | None
    low: float | None
    high: float | None
    n: int
    level: float = DEFAULT_LEVEL

    def to_dict(self) -> dict:
        return {"estimate": self.estimate, "low": self.low, "high": self.high, "n": self.n, "level": self.level}

    @property
    def half_width(self) -> float | None:
        return None if self.low is None else (self.high - self.low) / 2.0

    def format(self, digits: int = 2) -> str:
        """``0.60 [0.40, 0.80]``; ``n/a`` for an empty sample."""
        if self.estimate is None:
            return "n/a"
        return f"{self.estimate:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


def median(values: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.median(values, axis=axis)


def mean(values: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(values, axis=axis)


STATISTICS: dict[str, Callable[..., np.ndarray]] = {"median": median, "mean": mean}


def _statistic(stat: str | Callable) -> Callable[..., np.ndarray]:
    if callable(stat):
        return stat
    try:
        return STATISTICS[stat]
    except KeyError:
        raise ValueError(f"unknown statistic {stat!r}; choose one of {sorted(STATISTICS)}") from None


def _check_level(level: float) -> None:
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level must be in (0, 1), got {level}")


def _percentile_bounds(resampled: np.ndarray, level: float) -> tuple[float, float]:
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(resampled, [alpha, 1.0 - alpha])
    return float(low), float(high)


def z_value(level: float = DEFAULT_LEVEL) -> float:
    """The two-sided normal quantile z_{alpha/2} for a confidence level (1.96 at 0.95)."""
    _check_level(level)
    return float(_scipy_stats.norm.ppf(1.0 - (1.0 - level) / 2.0))


# -- rates ------------------------------------------------------------------------------------
def wilson_interval(successes: int, n: int, level: float = DEFAULT_LEVEL) -> CI:
    """Wilson score interval of a binomial rate (2/2 → [0.34, 1.00], never a zero-width interval)."""
    _check_level(level)
    if n == 0:
        return CI(None, None, None, 0, level)
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be in [0, {n}], got {successes}")
    interval = _scipy_stats.binomtest(int(successes), int(n)).proportion_ci(confidence_level=level, method="wilson")
    return CI(successes / n, float(interval.low), float(interval.high), int(n), level)


def _newcombe(current: CI, baseline: CI, phi: float, n: int, level: float) -> CI:
    """Newcombe's hybrid score interval for ``current - baseline`` from the two Wilson intervals
    (Newcombe 1998, method 10; with a correlation ``phi`` the paired version, 1998b method 10)."""
    p2, l2, u2 = current.estimate, current.low, current.high
    p1, l1, u1 = baseline.estimate, baseline.low, baseline.high
    delta = p2 - p1
    low = delta - math.sqrt(max((p2 - l2) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1) + (u1 - p1) ** 2, 0.0))
    high = delta + math.sqrt(max((u2 - p2) ** 2 - 2 * phi * (u2 - p2) * (p1 - l1) + (p1 - l1) ** 2, 0.0))
    return CI(delta, max(low, -1.0), min(high, 1.0), n, level)


def proportion_diff_ci(current_successes: int, current_n: int, baseline_successes: int, baseline_n: int,
                       level: float = DEFAULT_LEVEL) -> CI:
    """CI of the difference of two independent rates, current - baseline (Newcombe's hybrid score
    interval: honest at small n, e.g. 0/3 - 2/3 → [-0.94, 0.06]). ``n`` is the smaller sample."""
    current, baseline = wilson_interval(current_successes, current_n, level), wilson_interval(
        baseline_successes, baseline_n, level)
    if current.estimate is None or baseline.estimate is None:
        return CI(None, None, None, 0, level)
    return _newcombe(current, baseline, 0.0, min(current_n, baseline_n), level)


def paired_proportion_diff_ci(pairs: Sequence[tuple[bool, bool]], level: float = DEFAULT_LEVEL) -> CI:
    """CI of current - baseline rate over paired trials ``(baseline_ok, current_ok)`` (Newcombe 1998b,
    method 10: Wilson intervals of both margins combined with the pairs' correlation)."""
    n = len(pairs)
    if n == 0:
        return CI(None, None, None, 0, level)
    both = sum(1 for b, c in pairs if b and c)
    lost = sum(1 for b, c in pairs if b and not c)       # valid in the baseline only
    gained = sum(1 for b, c in pairs if c and not b)     # valid now only
    neither = n - both - lost - gained
    denominator = (both + lost) * (gained + neither) * (both + gained) * (lost + neither)
    phi = 0.0
    if denominator > 0:
        cross = both * neither - lost * gained
        # Newcombe's continuity-corrected phi when the correlation is positive
        phi = (max(cross - n / 2.0, 0.0) if cross > 0 else cross) / math.sqrt(denominator)
    current, baseline = wilson_interval(both + gained, n, level), wilson_interval(both + lost, n, level)
    return _newcombe(current, baseline, phi, n, level)


def _z_total(level: float, power: float) -> float:
    return z_value(level) + float(_scipy_stats.norm.ppf(power))


def trials_needed_for_rate_drop(rate: float, drop: float, level: float = DEFAULT_LEVEL, power: float = POWER) -> int:
    """Trials per cell to detect a drop ``drop`` of a rate near ``rate``:
    n = (z_{alpha/2} + z_beta)^2 * 2 p (1 - p) / d^2 (two-sample normal approximation)."""
    if drop <= 0:
        raise ValueError(f"drop must be positive, got {drop}")
    return max(1, math.ceil(_z_total(level, power) ** 2 * 2.0 * rate * (1.0 - rate) / drop ** 2))


def powered_half_width(drop: float, level: float = DEFAULT_LEVEL, power: float = POWER) -> float:
    """The largest interval half-width at which a true drop of ``drop`` is seen with ``power``:
    drop * z_{alpha/2} / (z_{alpha/2} + z_beta) (0.70 * drop at 95 % and power 0.8)."""
    return drop * z_value(level) / _z_total(level, power)


# -- bootstrap samples --------------------------------------------------------------------------
class TrialSample:
    """Per-trial values of one cell (e.g. percentiles), optionally with held-out-row replicates.

    ``replicates[i]`` holds trial i's value on each of R row resamples (None: the trial has no row
    noise, e.g. a failed trial's 0, or a record from before row resampling). A bootstrap draw
    resamples trials and picks one row resample ``b`` for all of them (they share the held-out rows).
    """

    def __init__(self, values: Sequence[float], replicates: Sequence[Sequence[float | None] | None] | None = None,
                 stat: str | Callable = "median"):
        self.values = np.asarray([float(v) for v in values], dtype=float)
        if np.isnan(self.values).any():
            raise ValueError("sample contains NaN")
        self.stat = _statistic(stat)
        replicates = list(replicates) if replicates is not None else [None] * len(self.values)
        if len(replicates) != len(self.values):
            raise ValueError(f"{len(replicates)} replicate lists for {len(self.values)} values")
        lengths = {len(r) for r in replicates if r is not None}
        if len(lengths) > 1:
            raise ValueError(f"trials carry different numbers of row replicates: {sorted(lengths)}")
        width = lengths.pop() if lengths else 1
        matrix = np.repeat(self.values[:, None], width, axis=1)
        for i, row in enumerate(replicates):
            if row is not None:
                # a replicate the metric could not score (e.g. one class only) stands at the trial's value
                matrix[i] = [self.values[i] if v is None else float(v) for v in row]
        self.replicates = matrix

    @property
    def n(self) -> int:
        return int(self.values.size)

    @property
    def row_resamples(self) -> int:
        return int(self.replicates.shape[1])

    def estimate(self) -> float:
        return float(self.stat(self.values))

    def draws(self, rng: np.random.Generator, size: int, trials: np.ndarray | None = None,
              rows: np.ndarray | None = None) -> np.ndarray:
        """``size`` bootstrap replicates of the statistic; ``trials`` (size, n) and ``rows`` (size,)
        may be given to pair this sample's draws with another's."""
        if trials is None:
            trials = rng.integers(0, self.n, size=(size, self.n))
        if rows is None:
            rows = rng.integers(0, self.row_resamples, size=size)
        return self.stat(self.replicates[trials, rows[:, None]], axis=1)


class RateSample:
    """A binomial cell (valid / counted trials); bootstrap draws come from the Jeffreys posterior
    Beta(k + 1/2, n - k + 1/2), so an all-valid cell still has spread (2/2 is not certainty)."""

    def __init__(self, successes: int, n: int):
        if n <= 0 or not 0 <= successes <= n:
            raise ValueError(f"a rate needs 0 <= successes <= n and n > 0, got {successes}/{n}")
        self.successes, self._n = int(successes), int(n)

    @property
    def n(self) -> int:
        return self._n

    def estimate(self) -> float:
        return self.successes / self._n

    def draws(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return rng.beta(self.successes + 0.5, self._n - self.successes + 0.5, size=size)


def bootstrap_ci(values: Sequence[float], stat: str | Callable = "median", *, replicates=None,
                 level: float = DEFAULT_LEVEL, resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> CI:
    """Percentile-bootstrap CI of ``stat`` over ``values`` (None entries are dropped when no
    ``replicates`` are given); with ``replicates`` (see :class:`TrialSample`) the held-out rows
    are resampled too. A single value without replicates gives a zero-width interval: callers
    show ``n`` beside it."""
    _check_level(level)
    if replicates is None:
        values = [v for v in values if v is not None]
    sample = TrialSample(values, replicates, stat)
    if sample.n == 0:
        return CI(None, None, None, 0, level)
    low, high = _percentile_bounds(sample.draws(np.random.default_rng(seed), resamples), level)
    return CI(sample.estimate(), low, high, sample.n, level)


def clustered_ci(samples: Sequence[TrialSample | RateSample], across: str | Callable = "median", *,
                 resample_groups: bool = True, level: float = DEFAULT_LEVEL, resamples: int = DEFAULT_RESAMPLES,
                 seed: int = 0) -> CI:
    """CI of ``across`` over per-task figures (e.g. the median over tasks of per-task percentiles).

    Two-level bootstrap: each replicate draws k tasks with replacement, then for every drawn task
    an independent within-task draw (trials and a row resample, or a Beta draw for a rate).
    ``resample_groups=False`` keeps the task list fixed (only within-task noise). ``n`` is the
    number of tasks.
    """
    _check_level(level)
    samples = [s for s in samples if s.n]
    if not samples:
        return CI(None, None, None, 0, level)
    outer = _statistic(across)
    k = len(samples)
    estimate = float(outer(np.array([s.estimate() for s in samples])))
    rng = np.random.default_rng(seed)
    # within[g, r, slot]: an independent within-task draw of task g for slot ``slot`` of replicate r
    within = np.stack([s.draws(rng, resamples * k).reshape(resamples, k) for s in samples])
    slots = np.arange(k)[None, :]
    replicate = np.arange(resamples)[:, None]
    tasks = rng.integers(0, k, size=(resamples, k)) if resample_groups else np.broadcast_to(slots, (resamples, k))
    low, high = _percentile_bounds(outer(within[tasks, replicate, slots], axis=1), level)
    return CI(estimate, low, high, k, level)


def diff_ci(current: TrialSample, baseline: TrialSample, *, paired: bool, shared_rows: bool,
            level: float = DEFAULT_LEVEL, resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> CI:
    """Bootstrap CI of ``stat(current) - stat(baseline)``.

    ``paired``: the i-th values of both samples come from the same (task, planner, model, trial
    seed), so a replicate draws the same trial indices on both sides. ``shared_rows``: both were
    graded on the same row resamples (same split seed), so a replicate uses the same ``b`` on both
    sides and the shared held-out noise cancels. ``n`` is the smaller sample size.
    """
    _check_level(level)
    if current.n == 0 or baseline.n == 0:
        return CI(None, None, None, 0, level)
    if paired and current.n != baseline.n:
        raise ValueError(f"paired samples differ in size: {current.n} and {baseline.n}")
    rng = np.random.default_rng(seed)
    trials = rng.integers(0, current.n, size=(resamples, current.n)) if paired else None
    rows = None
    if shared_rows and current.row_resamples == baseline.row_resamples:
        rows = rng.integers(0, current.row_resamples, size=resamples)
    diffs = current.draws(rng, resamples, trials, rows) - baseline.draws(rng, resamples, trials, rows)
    low, high = _percentile_bounds(diffs, level)
    return CI(current.estimate() - baseline.estimate(), low, high, min(current.n, baseline.n), level)


# --------------------------------------------------------------------- the seed papers' statistics
# pass@k (Agent K, AIDE), Bradley-Terry ratings of planners, and the Friedman test with a post-hoc across
# tasks (Demšar 2006: the critical-difference diagram). The tests are scipy's; only the bookkeeping is here.
PASS_AT_K = (1, 3, 10)


def pass_at_k(n: int, c: int, k: int) -> float | None:
    """Unbiased pass@k from ``n`` trials with ``c`` successes: 1 - C(n-c, k) / C(n, k); None when k > n."""
    if not 0 <= c <= n:
        raise ValueError(f"pass@k needs 0 <= successes <= trials, got c={c}, n={n}")
    if k < 1:
        raise ValueError(f"pass@k needs k >= 1, got {k}")
    if k > n:
        return None
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


@dataclass(frozen=True)
class Rating:
    """A planner's Bradley-Terry strength on the Elo scale (400 points = 10:1 odds), with a bootstrap CI."""
    player: str
    estimate: float
    low: float
    high: float
    wins: float
    games: int


def pairwise_outcomes(scores: dict[str, dict[str, float]]) -> list[tuple[str, str, float]]:
    """Per task, every pair of planners with scores on it: (a, b, 1 / 0.5 / 0 from a's side).

    ``scores`` maps task → planner → a per-task figure where higher is better (e.g. the mean normalized
    score of its trials); ties count half a win each.
    """
    games = []
    for task in sorted(scores):
        row = scores[task]
        names = sorted(row)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                sa, sb = row[a], row[b]
                games.append((a, b, 1.0 if sa > sb else 0.0 if sa < sb else 0.5))
    return games


def _win_matrices(players: list[str], scores: dict[str, dict[str, float]]) -> tuple[np.ndarray, np.ndarray]:
    """Per task: wins[t, i, j] (1, 0.5 for a tie, 0) and games[t, i, j] (1 when both have a score)."""
    index = {p: i for i, p in enumerate(players)}
    tasks = sorted(scores)
    wins = np.zeros((len(tasks), len(players), len(players)))
    games = np.zeros_like(wins)
    for t, task in enumerate(tasks):
        for a, b, result in pairwise_outcomes({task: scores[task]}):
            ia, ib = index[a], index[b]
            wins[t, ia, ib], wins[t, ib, ia] = result, 1.0 - result
            games[t, ia, ib] = games[t, ib, ia] = 1.0
    return wins, games


def _bradley_terry(wins: np.ndarray, games: np.ndarray, iters: int = 2000) -> np.ndarray:
    """Log-strengths by the MM algorithm (Hunter 2004), for a batch: wins/games of shape (..., m, m).

    Regularised by one tie against a virtual average player each, so a planner that won or lost
    everything keeps a finite rating.
    """
    total_wins = wins.sum(axis=-1) + 0.5
    strength = np.ones(total_wins.shape)
    for _ in range(iters):
        pair = strength[..., :, None] + strength[..., None, :]
        new = total_wins / ((games / pair).sum(axis=-1) + 1.0 / (strength + 1.0))
        new /= np.exp(np.mean(np.log(new), axis=-1, keepdims=True))
        change = np.max(np.abs(new / strength - 1.0))
        strength = new
        if change < 1e-9:
            break
    return np.log(strength)


def bradley_terry_ratings(scores: dict[str, dict[str, float]], *, replicates: int = 1000, seed: int = 0,
                          level: float = DEFAULT_LEVEL) -> list[Rating]:
    """Bradley-Terry ratings of planners from per-task pairwise outcomes, best first.

    Elo scale: 400 / ln 10 per unit of log-strength, mean 0 over the planners. The interval is a
    percentile bootstrap that resamples *tasks* (the games of one task stay together), so it reflects
    which tasks were drawn.
    """
    _check_level(level)
    players = sorted({p for row in scores.values() for p in row})
    if not players:
        return []
    scale = 400.0 / math.log(10.0)
    wins, games = _win_matrices(players, scores)
    point = _bradley_terry(wins.sum(axis=0), games.sum(axis=0)) * scale
    rng = np.random.default_rng(seed)
    counts = np.stack([np.bincount(rng.integers(0, len(wins), len(wins)), minlength=len(wins))
                       for _ in range(replicates)]).astype(float)
    draws = _bradley_terry(np.tensordot(counts, wins, 1), np.tensordot(counts, games, 1)) * scale
    lows, highs = np.quantile(draws, [(1 - level) / 2, 1 - (1 - level) / 2], axis=0)
    won, played = wins.sum(axis=(0, 2)), games.sum(axis=(0, 2))
    out = [Rating(p, float(point[i]), float(lows[i]), float(highs[i]), float(won[i]), int(played[i]))
           for i, p in enumerate(players)]
    return sorted(out, key=lambda r: -r.estimate)


@dataclass(frozen=True)
class FriedmanResult:
    """Friedman test over tasks (blocks) × planners, mean ranks (1 = best) and Nemenyi's critical difference."""
    planners: tuple[str, ...]
    tasks: tuple[str, ...]
    mean_ranks: dict[str, float]
    statistic: float | None
    p_value: float | None
    critical_difference: float | None
    posthoc: dict[tuple[str, str], float]     # Wilcoxon signed-rank p-values, Holm-adjusted
    alpha: float = 0.05

    def significant_pairs(self) -> list[tuple[str, str]]:
        return [pair for pair, p in self.posthoc.items() if p < self.alpha]


def friedman_test(scores: dict[str, dict[str, float]], alpha: float = 0.05) -> FriedmanResult:
    """Friedman test across the tasks on which every planner has a score (higher is better).

    scipy.stats.friedmanchisquare needs at least 3 planners; with fewer, only the mean ranks are given.
    The post-hoc is Wilcoxon signed-rank per pair (scipy.stats.wilcoxon) with Holm's step-down
    adjustment (Benavoli et al. 2016 recommend it over rank-based post-hocs); the Nemenyi critical
    difference (Demšar 2006, q from scipy.stats.studentized_range) is given for the CD diagram.
    """
    planners = sorted({p for row in scores.values() for p in row})
    tasks = sorted(t for t, row in scores.items() if all(p in row for p in planners))
    k, n = len(planners), len(tasks)
    if n == 0 or k == 0:
        return FriedmanResult(tuple(planners), tuple(tasks), {}, None, None, None, {}, alpha)
    table = np.array([[scores[t][p] for p in planners] for t in tasks], dtype=float)
    ranks = np.vstack([_scipy_stats.rankdata(-row) for row in table])    # 1 = best, ties averaged
    mean_ranks = {p: float(ranks[:, j].mean()) for j, p in enumerate(planners)}
    statistic = p_value = cd = None
    if k >= 3 and n >= 2:
        if np.all(table == table[:, :1]):
            statistic, p_value = 0.0, 1.0    # every planner tied on every task: no evidence of a difference
        else:
            res = _scipy_stats.friedmanchisquare(*table.T)
            statistic, p_value = float(res.statistic), float(res.pvalue)
        q = _scipy_stats.studentized_range.ppf(1 - alpha, k, np.inf) / math.sqrt(2.0)
        cd = float(q * math.sqrt(k * (k + 1) / (6.0 * n)))
    raw: dict[tuple[str, str], float] = {}
    for i, a in enumerate(planners):
        for j in range(i + 1, k):
            diff = table[:, i] - table[:, j]
            raw[(a, planners[j])] = 1.0 if np.all(diff == 0) else float(_scipy_stats.wilcoxon(diff).pvalue)
    return FriedmanResult(tuple(planners), tuple(tasks), mean_ranks, statistic, p_value, cd, holm(raw), alpha)


def holm(p_values: dict) -> dict:
    """Holm's step-down adjustment of a family of p-values (monotone, capped at 1)."""
    ordered = sorted(p_values.items(), key=lambda kv: kv[1])
    m = len(ordered)
    out, running = {}, 0.0
    for i, (key, p) in enumerate(ordered):
        running = max(running, min(1.0, (m - i) * p))
        out[key] = running
    return out
