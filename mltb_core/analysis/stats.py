"""Confidence intervals for the benchmark's figures, and what a given number of trials can detect.

Everything here is deterministic for a given seed, so the same records always print the
same intervals (the terminal summary must be identical with and without xdist).

Sources of noise and where each is handled:

- **trials**: a rerun draws new planner/LLM randomness. Rates (consistency) get exact
  Clopper-Pearson intervals (:func:`rate_interval`: at least 95 % coverage at every n and rate);
  medians (percentile, normalized score) the exact order-statistic interval of a median
  (:func:`median_interval`: distribution-free, at least 95 % for n >= ``MIN_TRIALS_FOR_MEDIAN_CI``,
  no interval below), its ends taken over the held-out-row resamples (next item).
- **held-out rows**: every trial of a task is graded on the same held-out split, so its sampling
  noise is shared by all trials and never averages out. The grader scores ``ROW_REPLICATES``
  resamples of the scored rows (:func:`mltb_core.bench.grading.row_bootstrap`, seeded by the split seed, so replicate
  ``b`` is the same row resample for every trial of the split); a bootstrap replicate picks one
  ``b`` per task and uses it for every trial drawn from that task (paired by ``b``).
- **tasks**: the across-task median is a median over tasks (:func:`clustered_ci`): the exact
  order-statistic interval over the k tasks' figures (none below ``MIN_TRIALS_FOR_MEDIAN_CI`` tasks);
  each task's figure, trials and split included, is one independent draw, so a different task list and a
  rerun of the trials are both inside it.

Changes of a rate (the gate, ``mltb compare``) get Newcombe's score intervals, which are approximate: printed
only from ``NEWCOMBE_MIN_TRIALS``, where their exact coverage averages about 95 % over true rates
(:mod:`mltb_core.analysis.coverage`); the gate's paired change below that uses the exact
:func:`paired_rate_change_exact`.

Every interval contains its own estimate (a bound that would exclude it is moved to it), and a
statistic whose sample is too small for an honest interval gets none (``low``/``high`` None; tables
print n and "–").
"""
from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from scipy import stats as _scipy_stats

__all__ = ["CI", "containing", "bootstrap_ci", "rate_interval", "median_interval", "median_ranks", "min_n_for_median_ci", "median", "mean", "STATISTICS", "wilson_interval", "proportion_diff_ci",
           "paired_proportion_diff_ci", "newcombe_interval", "paired_newcombe_interval", "NEWCOMBE_MIN_TRIALS", "paired_rate_change_exact", "TrialSample", "RateSample", "clustered_ci", "z_value",
           "trials_needed_for_rate_drop", "median_standard_error", "cluster_sign_flip", "t_interval", "trials_needed_for_rate_gate", "rate_gate_probabilities", "powered_half_width", "POWER", "MIN_TRIALS_FOR_MEDIAN_CI",
           "DEFAULT_LEVEL", "DEFAULT_RESAMPLES", "PASS_AT_K", "pass_at_k", "Rating", "pairwise_outcomes",
           "bradley_terry_ratings", "MIN_TASKS_FOR_RATING_CI", "MIN_TASKS_FOR_RATING", "FriedmanResult", "POSTHOC_TESTS", "outward", "reachable_k", "friedman_test", "friedman_permutation_p", "friedman_exact_p", "holm",
           "FRIEDMAN_PERMUTATIONS", "family_level", "sign_test_p", "median_change", "clustered_rate_interval",
           "shift_interval", "shift_rank", "min_n_for_shift_ci"]

DEFAULT_RESAMPLES = 2000
DEFAULT_LEVEL = 0.95
POWER = 0.8                 # 1 - beta of the power check
FRIEDMAN_PERMUTATIONS = 20_000   # Monte Carlo draws of the Friedman permutation p (its floor: 1/20,001)


def median_ranks(n: int, level: float = DEFAULT_LEVEL) -> tuple[int, int] | None:
    """0-based indices (l, u) of the order statistics whose closed range covers the median of any
    distribution with probability >= ``level`` (1 - 2 P(Bin(n, 1/2) <= l)); the narrowest such pair.
    None when even the min-max range covers less (n = 5: 1 - 2**-4 = 0.9375 < 0.95)."""
    _check_level(level)
    alpha = 1.0 - level
    best = None
    for rank in range((n + 1) // 2):
        if 2.0 * _scipy_stats.binom.cdf(rank, n, 0.5) <= alpha + 1e-12:
            best = rank   # P(X_(rank+1) > median) = P(Bin <= rank): widest rank with tail <= alpha/2
        else:
            break
    return None if best is None else (best, n - 1 - best)
def min_n_for_median_ci(level: float = DEFAULT_LEVEL) -> int:
    """The fewest values with an order-statistic interval of the median at ``level`` (6 at 95 %)."""
    n = 1
    while median_ranks(n, level) is None:
        n += 1
    return n




@dataclass(frozen=True)
class CI:
    """A point estimate with a two-sided confidence interval; all None for an empty sample, and
    ``low``/``high`` None when the sample is too small for an honest interval (then ``n`` says why)."""
    estimate: float | None
    low: float | None
    high: float | None
    n: int
    level: float = DEFAULT_LEVEL

    def to_dict(self) -> dict:
        return {"estimate": self.estimate, "low": self.low, "high": self.high, "n": self.n, "level": self.level}

    @property
    def has_interval(self) -> bool:
        return self.low is not None and self.high is not None

    @property
    def half_width(self) -> float | None:
        return None if not self.has_interval else (self.high - self.low) / 2.0

    def format(self, digits: int = 2, signed: bool = False) -> str:
        """``0.60 [0.40, 0.80]`` (``signed``: ``+0.60 [+0.40, +0.80]``); ``0.60 [–]`` without an interval; ``n/a``
        for an empty sample. The bounds are rounded outward, so a printed interval never covers less than the
        computed one (0/1 trials: [0.00, 0.98], not [0.00, 0.97])."""
        if self.estimate is None:
            return "n/a"
        sign = "+" if signed else ""
        estimate = f"{self.estimate:{sign}.{digits}f}"
        if not self.has_interval:
            return f"{estimate} [–]"
        return f"{estimate} {self.bounds(digits, signed)}"

    def bounds(self, digits: int = 2, signed: bool = False) -> str:
        """``[low, high]`` rounded outward to ``digits`` decimals (so the printed interval holds the computed
        one, and the estimate rounded to nearest stays inside it); ``[–]`` without an interval."""
        if not self.has_interval:
            return "[–]"
        return f"[{outward(self.low, digits, math.floor, signed)}, {outward(self.high, digits, math.ceil, signed)}]"


def outward(value: float, digits: int, direction: Callable[[float], int], signed: bool = False) -> str:
    """``value`` rounded to ``digits`` decimals with ``direction`` (math.floor for a lower bound, math.ceil for an
    upper one), ignoring float noise below 1e-9 of a unit (0.3 stored as 0.29999999999999998 stays 0.30). A
    non-zero end that would round onto 0 gets the digits that keep it off 0 (a lower bound of 0.008 prints
    0.008, not 0.00; an upper one of -0.003 prints -0.003: the printed end says which side of 0 it lies on),
    up to ``MAX_EXTRA_DIGITS`` more."""
    if not math.isfinite(value):
        raise ValueError(f"an interval bound must be a finite number, got {value!r}")
    for shown in range(digits, digits + MAX_EXTRA_DIGITS + 1):
        scale = 10 ** shown
        scaled = value * scale
        nearest = round(scaled)
        rounded = (nearest if abs(scaled - nearest) < 1e-9 * max(1.0, abs(scaled)) else direction(scaled)) / scale
        if rounded != 0 or value == 0:
            break
    else:
        shown, rounded = digits, 0.0
    return f"{rounded + 0.0:{'+' if signed else ''}.{shown}f}"    # + 0.0: -0.0 prints as 0


MAX_EXTRA_DIGITS = 4    # an end within 10**-(digits + 4) of 0 prints as 0: float noise, not a bound


def containing(estimate: float | None, low: float | None, high: float | None, n: int,
               level: float = DEFAULT_LEVEL) -> CI:
    """A CI whose interval holds its estimate: a resampling interval can miss it (e.g. a bootstrap of
    a rate of 0/3 drawn from a posterior that never reaches 0), and then the bound moves to it."""
    if estimate is not None and low is not None and high is not None:
        low, high = min(low, estimate), max(high, estimate)
    return CI(estimate, low, high, n, level)


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


# Below this a 95 % interval of a median does not exist without assumptions (the min-max range of 5
# values covers the median 93.75 % of the time); tables print n and "–" instead.
MIN_TRIALS_FOR_MEDIAN_CI = 6


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
    low, high = _wilson_bounds(np.asarray(float(successes)), int(n), z_value(level))   # scipy's "wilson", closed form
    return CI(successes / n, max(float(low), 0.0), min(float(high), 1.0), int(n), level)


def rate_interval(successes: int, n: int, level: float = DEFAULT_LEVEL) -> CI:
    """Exact Clopper-Pearson interval of a binomial rate: coverage >= ``level`` at every n and true
    rate (Wilson's dips to 0.83 at small n for rates near 0 or 1). 2/2 → [0.158, 1]; 0/3 → [0, 0.708].
    The interval every table prints for a rate (consistency, medal rates)."""
    _check_level(level)
    if n == 0:
        return CI(None, None, None, 0, level)
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be in [0, {n}], got {successes}")
    alpha = (1.0 - level) / 2.0   # the beta-quantile form of scipy's binomtest(...).proportion_ci("exact")
    low = 0.0 if successes == 0 else float(_scipy_stats.beta.ppf(alpha, successes, n - successes + 1))
    high = 1.0 if successes == n else float(_scipy_stats.beta.ppf(1.0 - alpha, successes + 1, n - successes))
    return CI(successes / n, low, high, int(n), level)


def median_interval(values: Sequence[float], replicates: np.ndarray | None = None,
                    level: float = DEFAULT_LEVEL) -> CI:
    """The median with its exact order-statistic interval (distribution-free; no interval below
    ``min_n_for_median_ci(level)`` values).

    ``replicates`` (n, R): each value re-measured under R draws of a noise source the values share
    (held-out-row resamples: column b is the same row resample for every value; or independent
    within-task draws): the order statistics are taken in every column and the interval runs from the
    alpha/2 quantile of the lower one to the 1 - alpha/2 quantile of the upper one.
    """
    _check_level(level)
    values = np.asarray([float(v) for v in values], dtype=float)
    n = int(values.size)
    if n == 0:
        return CI(None, None, None, 0, level)
    estimate = float(np.median(values))
    ranks = median_ranks(n, level)
    if ranks is None:
        return CI(estimate, None, None, n, level)
    matrix = values[:, None] if replicates is None else np.asarray(replicates, dtype=float)
    if matrix.shape[0] != n:
        raise ValueError(f"{matrix.shape[0]} replicate rows for {n} values")
    ordered = np.sort(matrix, axis=0)
    alpha = (1.0 - level) / 2.0
    low = float(np.quantile(ordered[ranks[0]], alpha))
    high = float(np.quantile(ordered[ranks[1]], 1.0 - alpha))
    return containing(estimate, low, high, n, level)


def family_level(comparisons: int, level: float = DEFAULT_LEVEL) -> float:
    """Bonferroni's per-comparison level for ``comparisons`` intervals read together: each at
    1 - (1 - level) / m, so all m cover at once with probability >= ``level`` (any dependence)."""
    _check_level(level)
    return 1.0 - (1.0 - level) / max(1, int(comparisons))


def sign_test_p(differences: Sequence[float], alternative: str = "two-sided") -> float | None:
    """Exact sign test of a median difference of 0 (zero differences dropped): the test that matches the
    order-statistic interval of :func:`median_change` (the interval excludes 0 exactly when this test rejects
    at its level). ``alternative``: "two-sided", "less" (the median is below 0) or "greater". None without a
    difference; 1.0 when every difference is 0."""
    values = np.asarray([float(v) for v in differences], dtype=float)
    if values.size == 0:
        return None
    below, above = int((values < 0).sum()), int((values > 0).sum())
    if below + above == 0:
        return 1.0
    return float(_scipy_stats.binomtest(below, below + above, 0.5,
                                        alternative={"less": "greater", "greater": "less"}.get(alternative,
                                                                                               alternative)).pvalue)


def median_change(current: "TrialSample", baseline: "TrialSample", *, paired: bool,
                  level: float = DEFAULT_LEVEL) -> CI:
    """The change of a median figure, current - baseline: the estimand both the regression gate and
    ``mltb compare`` report (docs/statistics.md says why).

    ``paired`` (the i-th values of both come from the same trial seed): the **median of the paired
    differences**, with the exact order-statistic interval of a median (distribution-free, coverage
    1 - 2 P(Bin(n, 1/2) <= l) >= ``level``; none below ``min_n_for_median_ci(level)`` pairs); when both
    carry held-out-row replicates of one width, replicate b of a difference is the difference of the two
    trials' replicate b (the same row resample on one split, so the split's noise cancels).
    Unpaired (seeds differ): no per-trial difference exists; :func:`shift_interval`, the Hodges-Lehmann shift
    with its exact Mann-Whitney interval over the two runs' trial values (the held-out split both runs are
    graded on is the same rows for both, so its noise is not added, as it cancels in the paired change). Its
    estimand is the location shift between the two runs' distributions of trial values: the change of the
    median when the change moves every trial alike (a shift), not otherwise. ``n`` is the number of pairs
    (paired) or the smaller side."""
    _check_level(level)
    if current.n == 0 or baseline.n == 0:
        return CI(None, None, None, 0, level)
    if paired:
        if current.n != baseline.n:
            raise ValueError(f"paired samples differ in size: {current.n} and {baseline.n}")
        differences = current.values - baseline.values
        replicates = None
        if current.replicates.shape == baseline.replicates.shape:
            replicates = current.replicates - baseline.replicates
        ci = median_interval(differences, replicates, level)
        return CI(ci.estimate, ci.low, ci.high, ci.n, level)
    return shift_interval(current.values, baseline.values, level)


MAX_EXACT_SHIFT_PAIRS = 40_000   # m * n beyond which the Mann-Whitney quantile is the normal approximation's


@functools.lru_cache(maxsize=256)
def _mann_whitney_cdf(m: int, n: int) -> np.ndarray:
    """P(U <= u), u = 0..m n, of the Mann-Whitney count for samples of m and n without ties under the null:
    the coefficients of the Gaussian binomial [m + n, m]_q = prod_i (1 - q^(n + i)) / (1 - q^i), normalised."""
    coefficients = np.ones(1)
    for i in range(1, m + 1):
        grown = np.zeros(coefficients.size + n + i)
        grown[:coefficients.size] += coefficients
        grown[n + i:] -= coefficients                          # times (1 - q^(n+i))
        width = -(-grown.size // i) * i
        padded = np.zeros(width)
        padded[:grown.size] = grown
        coefficients = padded.reshape(-1, i).cumsum(axis=0).ravel()[: i * n + 1]   # divided by (1 - q^i)
        coefficients = np.clip(coefficients, 0.0, None) / coefficients.sum()
    return np.cumsum(coefficients)


def shift_rank(m: int, n: int, level: float = DEFAULT_LEVEL) -> int | None:
    """The 0-based rank k of the exact Mann-Whitney interval of a shift for samples of m and n: the largest k
    with P(U <= k) <= (1 - level) / 2, so [D_(k+1), D_(mn-k)] of the m n sorted differences covers a shift
    with probability 1 - 2 P(U <= k) >= ``level`` (continuous values). None when no such k exists."""
    _check_level(level)
    alpha = (1.0 - level) / 2.0
    if m * n > MAX_EXACT_SHIFT_PAIRS:
        spread = math.sqrt(m * n * (m + n + 1) / 12.0)
        k = math.floor(m * n / 2.0 - z_value(level) * spread - 0.5)
        return k if k >= 0 else None
    cdf = _mann_whitney_cdf(min(m, n), max(m, n))
    k = int(np.searchsorted(cdf, alpha + 1e-12, side="right")) - 1
    return k if k >= 0 else None


def min_n_for_shift_ci(level: float = DEFAULT_LEVEL) -> int:
    """The fewest values per side with an exact Mann-Whitney interval of a shift at ``level`` (4 at 95 %)."""
    n = 1
    while shift_rank(n, n, level) is None:
        n += 1
    return n


def shift_interval(current: Sequence[float], baseline: Sequence[float], level: float = DEFAULT_LEVEL) -> CI:
    """The shift current - baseline between two independent samples: the Hodges-Lehmann estimate (the median
    of the m n differences current_i - baseline_j) with the exact distribution-free Mann-Whitney interval
    (:func:`shift_rank`): coverage 1 - 2 P(U <= k) >= ``level`` when the two distributions differ by a shift
    (0.971 at 4 per side for 95 %, and at least that with ties). None below the fewest values that have one;
    ``n`` is the smaller side."""
    _check_level(level)
    cur, base = np.asarray(current, dtype=float), np.asarray(baseline, dtype=float)
    if cur.size == 0 or base.size == 0:
        return CI(None, None, None, 0, level)
    differences = np.sort((cur[:, None] - base[None, :]).ravel())
    estimate = float(np.median(differences))
    n = int(min(cur.size, base.size))
    k = shift_rank(cur.size, base.size, level)
    if k is None:
        return CI(estimate, None, None, n, level)
    return containing(estimate, float(differences[k]), float(differences[-1 - k]), n, level)


def clustered_rate_interval(counts: Sequence[tuple[int, int]], level: float = DEFAULT_LEVEL) -> CI:
    """A rate pooled over clusters (``counts``: (successes, trials) per task) whose trials are not
    independent (trials of one task share its data and difficulty): Korn and Graubard's (1998) exact
    interval, Clopper-Pearson at the effective sample size n* = p (1 - p) / var(p), var(p) the
    between-cluster (ratio-estimator) variance over the k tasks, capped at n, then scaled by
    (t_{n-1} / t_{k-1})^2 for the k - 1 degrees of freedom that variance has (so even tasks that agree
    widen the interval: three tasks cannot show that they agree). 3/3, 3/3, 0/3 gives [0.00, 1.00] where
    the pooled 6/9 read [0.30, 0.93]. A pooled rate of 0 or 1 has no estimable variance; its open end is then
    the Clopper-Pearson bound of k tasks that all failed (all succeeded): whatever the task rates, a task fails
    all its trials with probability at most 1 minus its rate, so this end misses with probability at most
    (1 - level) / 2 however much the tasks differ, where counting the trials as independent (n* = n) covered
    0.83 when most tasks are all-or-nothing (tests/test_interval_coverage.py). That bound counts k tasks and
    the one beside it (one success) the trials' spread, so with many tasks the interval is not monotone in
    the count there (6 tasks of 10 trials: 0/60 reaches 0.46, 1/60 0.13). One task is plain Clopper-Pearson
    over its trials."""
    _check_level(level)
    for s, n in counts:
        if not 0 <= int(s) <= int(n):
            raise ValueError(f"a task's successes must be in [0, trials], got {s} of {n}")
    counts = [(int(s), int(n)) for s, n in counts if int(n) > 0]
    total = sum(n for _, n in counts)
    if total == 0:
        return CI(None, None, None, 0, level)
    successes = sum(s for s, _ in counts)
    p = successes / total
    k = len(counts)
    effective = float(total)
    if k >= 2 and 0 < successes < total:
        sizes = np.asarray([n for _, n in counts], dtype=float)
        residuals = np.asarray([s for s, _ in counts], dtype=float) - p * sizes
        variance = k / (k - 1) * float((residuals ** 2).sum()) / total ** 2
        if variance > 0:
            effective = min(effective, p * (1 - p) / variance)
        alpha = (1.0 - level) / 2.0
        effective *= (float(_scipy_stats.t.ppf(1 - alpha, total - 1)) / float(_scipy_stats.t.ppf(1 - alpha, k - 1))) ** 2
    elif k < 2:
        return rate_interval(successes, total, level)
    else:   # 0 or 1: the tasks are the units (see above)
        tasks = rate_interval(k if successes else 0, k, level)
        return CI(p, tasks.low, tasks.high, total, level)
    x = p * effective
    alpha = (1.0 - level) / 2.0
    low = 0.0 if successes == 0 else float(_scipy_stats.beta.ppf(alpha, x, effective - x + 1))
    high = 1.0 if successes == total else float(_scipy_stats.beta.ppf(1.0 - alpha, x + 1, effective - x))
    return containing(p, low, high, total, level)


def _newcombe(current: CI, baseline: CI, phi: float, n: int, level: float) -> CI:
    """Newcombe's hybrid score interval for ``current - baseline`` from the two Wilson intervals
    (Newcombe 1998, method 10; with a correlation ``phi`` the paired version, 1998b method 10)."""
    p2, l2, u2 = current.estimate, current.low, current.high
    p1, l1, u1 = baseline.estimate, baseline.low, baseline.high
    delta = p2 - p1
    low = delta - math.sqrt(max((p2 - l2) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1) + (u1 - p1) ** 2, 0.0))
    high = delta + math.sqrt(max((u2 - p2) ** 2 - 2 * phi * (u2 - p2) * (p1 - l1) + (p1 - l1) ** 2, 0.0))
    return CI(delta, max(low, -1.0), min(high, 1.0), n, level)


# The fewest trials per side (unpaired; pairs, paired) at which a Newcombe interval of a difference of rates is
# printed: from there on its exact coverage averaged over a 39 x 39 grid of true rates is 0.935-0.965 with at most
# 5 % of the grid below 0.90 (paired: for independent and for correlated pairs). Derived by
# benchmarks/interval_thresholds.py from mltb_core/analysis/coverage.py; tests/test_interval_coverage.py checks it.
# Below it the tables print the counts and "–".
NEWCOMBE_MIN_TRIALS = {"unpaired": 4, "paired": 11}


def newcombe_interval(current_successes: int, current_n: int, baseline_successes: int, baseline_n: int,
                      level: float = DEFAULT_LEVEL) -> CI:
    """Newcombe's hybrid score interval of current - baseline for two independent rates at any n (an
    approximate interval: e.g. 0/3 - 2/3 → [-0.94, 0.06]). ``n`` is the smaller sample. What is printed is
    :func:`proportion_diff_ci`."""
    current, baseline = wilson_interval(current_successes, current_n, level), wilson_interval(
        baseline_successes, baseline_n, level)
    if current.estimate is None or baseline.estimate is None:
        return CI(None, None, None, 0, level)
    return _newcombe(current, baseline, 0.0, min(current_n, baseline_n), level)


def proportion_diff_ci(current_successes: int, current_n: int, baseline_successes: int, baseline_n: int,
                       level: float = DEFAULT_LEVEL) -> CI:
    """The difference of two independent rates, current - baseline, with Newcombe's interval
    (:func:`newcombe_interval`) from ``NEWCOMBE_MIN_TRIALS["unpaired"]`` trials on the smaller side, where it
    covers about 95 % (docs/statistics.md); below, the estimate without an interval."""
    return _printable(newcombe_interval(current_successes, current_n, baseline_successes, baseline_n, level),
                      NEWCOMBE_MIN_TRIALS["unpaired"])


def _printable(ci: CI, fewest: int) -> CI:
    return ci if ci.n >= fewest or ci.estimate is None else CI(ci.estimate, None, None, ci.n, ci.level)


def paired_newcombe_interval(pairs: Sequence[tuple[bool, bool]], level: float = DEFAULT_LEVEL) -> CI:
    """Newcombe's (1998b, method 10) interval of current - baseline rate over paired trials ``(baseline_ok,
    current_ok)`` at any n: Wilson intervals of both margins combined with the pairs' correlation. What is
    printed is :func:`paired_proportion_diff_ci`."""
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


def paired_proportion_diff_ci(pairs: Sequence[tuple[bool, bool]], level: float = DEFAULT_LEVEL) -> CI:
    """The change of a rate over paired trials with Newcombe's paired interval (:func:`paired_newcombe_interval`)
    from ``NEWCOMBE_MIN_TRIALS["paired"]`` pairs, where it covers about 95 % (docs/statistics.md); below, the
    estimate without an interval."""
    return _printable(paired_newcombe_interval(pairs, level), NEWCOMBE_MIN_TRIALS["paired"])


# How paired_rate_change_exact splits its error: most to the split of the discordant pairs (whose sign is the
# change's: McNemar's exact test), the rest to their share of all pairs (which only scales the change).
EXACT_PAIRED_SPLIT_SHARE = 0.9


def paired_rate_change_exact(pairs: Sequence[tuple[bool, bool]], level: float = DEFAULT_LEVEL) -> CI:
    """An exact (conservative) interval of the change of a rate over paired trials ``(baseline_ok, current_ok)``,
    valid at any n: the change is s (2 t - 1), s the share of discordant pairs and t the share of them that
    gained; t's Clopper-Pearson interval given the discordant count (McNemar's exact test: the upper end is below
    0 exactly when that test shows a drop at its tail) at 1 - ``EXACT_PAIRED_SPLIT_SHARE`` (1 - level), s's at
    1 - the rest, and the change's interval spans the products, so it covers with >= ``level`` whatever the rates
    and their dependence, and each end misses with at most (1 - level) / 2. The gate's paired consistency
    interval below ``NEWCOMBE_MIN_TRIALS["paired"]`` pairs. No discordant pair: [-upper(s), +upper(s)]."""
    _check_level(level)
    n = len(pairs)
    if n == 0:
        return CI(None, None, None, 0, level)
    lost = sum(1 for b, c in pairs if b and not c)
    gained = sum(1 for b, c in pairs if c and not b)
    discordant = lost + gained
    alpha = 1.0 - level
    share = rate_interval(discordant, n, 1.0 - (1.0 - EXACT_PAIRED_SPLIT_SHARE) * alpha)
    if discordant == 0:
        return CI(0.0, -share.high, share.high, n, level)
    split = rate_interval(gained, discordant, 1.0 - EXACT_PAIRED_SPLIT_SHARE * alpha)
    ends = [s * (2.0 * t - 1.0) for s in (share.low, share.high) for t in (split.low, split.high)]
    return containing((gained - lost) / n, min(ends), max(ends), n, level)


def _z_total(level: float, power: float) -> float:
    return z_value(level) + float(_scipy_stats.norm.ppf(power))


def trials_needed_for_rate_drop(rate: float, drop: float, level: float = DEFAULT_LEVEL, power: float = POWER) -> int:
    """Trials per cell to detect a drop ``drop`` of a rate near ``rate``:
    n = (z_{alpha/2} + z_beta)^2 * 2 p (1 - p) / d^2 (two-sample normal approximation)."""
    if drop <= 0:
        raise ValueError(f"drop must be positive, got {drop}")
    return max(1, math.ceil(_z_total(level, power) ** 2 * 2.0 * rate * (1.0 - rate) / drop ** 2))


MAX_GATE_TRIALS = 5000      # trials per side beyond which the gate's sample-size search says "at least this"


def _wilson_bounds(x: np.ndarray, n: int, z: float) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score bounds for every count in ``x`` (vectorised; the same bounds as :func:`wilson_interval`)."""
    centre = (x + z * z / 2.0) / (n + z * z)
    half = z * np.sqrt(x * (n - x) / n + z * z / 4.0) / (n + z * z)
    return centre - half, centre + half


def rate_gate_probabilities(n: int, baseline_rate: float, current_rate: float, drop: float,
                            level: float = DEFAULT_LEVEL) -> tuple[float, float]:
    """Exact (P(regression), P(ok)) of the gate's rule on a rate with ``n`` independent trials per side:
    Newcombe's interval of current - baseline, regression = upper < 0 and lower <= -drop, ok = lower > -drop
    (:mod:`mltb_core.analysis.compare`). Summed over every pair of outcomes, no simulation."""
    z = z_value(level)

    def support(rate: float) -> np.ndarray:
        # counts outside 9 standard deviations carry < 1e-18 of the mass: left out to keep this O(n)
        spread = 9.0 * math.sqrt(n * rate * (1.0 - rate)) + 2.0
        return np.arange(max(0, math.floor(n * rate - spread)), min(n, math.ceil(n * rate + spread)) + 1, dtype=float)

    xb, xc = support(baseline_rate), support(current_rate)
    lb, hb = _wilson_bounds(xb, n, z)
    lc, hc = _wilson_bounds(xc, n, z)
    pb_, pc_ = (xb / n)[:, None], (xc / n)[None, :]                 # rows: baseline count; columns: current
    lb, hb, lc, hc = lb[:, None], hb[:, None], lc[None, :], hc[None, :]
    delta = pc_ - pb_
    lower = delta - np.sqrt((pc_ - lc) ** 2 + (hb - pb_) ** 2)
    upper = delta + np.sqrt((hc - pc_) ** 2 + (pb_ - lb) ** 2)
    weight = _scipy_stats.binom.pmf(xb, n, baseline_rate)[:, None] * _scipy_stats.binom.pmf(xc, n, current_rate)[None, :]
    regression = float(weight[(upper < 0) & (lower <= -drop)].sum())
    ok = float(weight[lower > -drop].sum())
    return regression, ok


@functools.lru_cache(maxsize=1024)
def trials_needed_for_rate_gate(rate: float, drop: float, level: float = DEFAULT_LEVEL, power: float = POWER) -> int:
    """Trials per side for the gate's rule on a rate near ``rate`` to flag a true drop of ``drop`` as a
    regression with probability >= ``power`` and to call a true zero change ok as often, computed exactly
    for the interval the gate uses (:func:`rate_gate_probabilities`), starting from the normal
    approximation (:func:`trials_needed_for_rate_drop`)."""
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"rate must be in [0, 1], got {rate}")
    start = trials_needed_for_rate_drop(min(max(rate, 0.05), 0.95), drop, level, power)
    n = max(2, int(start * 0.7))
    step = max(1, n // 40)
    while n < MAX_GATE_TRIALS:
        # a rate below the drop cannot fall by it: only the ok side of the rule then needs trials
        flagged = rate_gate_probabilities(n, rate, rate - drop, drop, level)[0] if rate >= drop else 1.0
        _, passed = rate_gate_probabilities(n, rate, rate, drop, level)
        if flagged >= power and passed >= power:
            return n
        n += step
    return MAX_GATE_TRIALS


def median_standard_error(values: Sequence[float]) -> float | None:
    """Price and Bonett's (2001) distribution-free standard error of a sample median:
    (x_(n-c+1) - x_(c)) / (2 z_c), c = round((n + 1) / 2 - sqrt(n)), z_c = Phi^-1(1 - P(Bin(n, 1/2) <= c - 1)).
    Steadier at small n than a bootstrap, whose spread of a median is too narrow there. None below 3 values."""
    x = np.sort(np.asarray([float(v) for v in values], dtype=float))
    n = x.size
    if n < 3:
        return None
    c = min(max(1, int(round((n + 1) / 2.0 - math.sqrt(n)))), (n + 1) // 2)
    z_c = float(_scipy_stats.norm.ppf(1.0 - _scipy_stats.binom.cdf(c - 1, n, 0.5)))
    if z_c <= 0:
        return None
    return float((x[n - c] - x[c - 1]) / (2.0 * z_c))


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

    def interval(self, level: float = DEFAULT_LEVEL) -> CI:
        """The median with its order-statistic interval over trials and held-out rows (:func:`median_interval`)."""
        if self.stat is not median:
            raise ValueError("an order-statistic interval is for a median")
        return median_interval(self.values, self.replicates, level)

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
    """A binomial cell (valid / counted trials): its rate is one task's figure in :func:`clustered_ci`."""

    def __init__(self, successes: int, n: int):
        if n <= 0 or not 0 <= successes <= n:
            raise ValueError(f"a rate needs 0 <= successes <= n and n > 0, got {successes}/{n}")
        self.successes, self._n = int(successes), int(n)

    @property
    def n(self) -> int:
        return self._n

    def estimate(self) -> float:
        return self.successes / self._n


def bootstrap_ci(values: Sequence[float], stat: str | Callable = "median", *,
                 replicates: Sequence[Sequence[float | None] | None] | None = None,
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
    return containing(sample.estimate(), low, high, sample.n, level)


def clustered_ci(samples: Sequence[TrialSample | RateSample], *, level: float = DEFAULT_LEVEL) -> CI:
    """The median over tasks of per-task figures (e.g. per-task median percentiles or consistency), with the
    exact order-statistic interval over the k tasks (:func:`median_interval`; none below
    ``min_n_for_median_ci(level)`` tasks). ``n`` is the number of tasks.

    Its estimand is the median, over the population of tasks, of a task's figure *as measured* (its trials
    and its own held-out split included): each task's figure is one independent draw of that, so the
    interval covers it with probability 1 - 2 P(Bin(k, 1/2) <= l) (0.969 at k = 6) for continuous figures,
    and at least that for discrete ones (a rate over 3 trials takes 4 values; ties widen the closed
    interval). The within-task bootstraps once added to its ends counted the trial noise twice (coverage
    1.0 in tests/test_interval_coverage.py). With few trials per task this median is not the median task's
    true rate (Beta(1, 3) task rates, 3 trials each: median true rate 0.21, median measured rate 0 or 1/3).
    """
    _check_level(level)
    samples = [s for s in samples if s.n]
    if not samples:
        return CI(None, None, None, 0, level)
    return median_interval([s.estimate() for s in samples], level=level)


# -- across tasks: tasks are the independent units ---------------------------------------------------
MAX_EXACT_SIGN_FLIPS = 16   # every one of 2**16 patterns enumerated (exact p); more tasks are sampled (seeded)


def cluster_sign_flip(task_changes: Sequence[float], *, resamples: int = 20000, seed: int = 0) -> float | None:
    """Two-sided p-value of a mean change over tasks being 0, flipping the sign of each task's change as a
    whole (a permutation test that treats tasks, not items, as the units: with k tasks no p below 2**(1-k),
    so 2 tasks can never show a difference however many seeds each holds). None without a task."""
    changes = np.asarray([float(c) for c in task_changes], dtype=float)
    k = changes.size
    if k == 0:
        return None
    observed = abs(changes.mean())
    if k <= MAX_EXACT_SIGN_FLIPS:
        signs = 1 - 2 * ((np.arange(2 ** k)[:, None] >> np.arange(k)[None, :]) & 1)
    else:
        signs = np.random.default_rng(seed).choice([-1, 1], size=(resamples, k))
    means = np.abs((signs * changes[None, :]).mean(axis=1))
    return float(np.mean(means >= observed - 1e-12))


def t_interval(values: Sequence[float], level: float = DEFAULT_LEVEL) -> CI:
    """The mean of per-task figures with Student's t interval over the k tasks (no interval below 2)."""
    _check_level(level)
    values = np.asarray([float(v) for v in values], dtype=float)
    k = values.size
    if k == 0:
        return CI(None, None, None, 0, level)
    estimate = float(values.mean())
    if k < 2:
        return CI(estimate, None, None, k, level)
    half = float(_scipy_stats.t.ppf(1 - (1 - level) / 2, k - 1) * values.std(ddof=1) / math.sqrt(k))
    return containing(estimate, estimate - half, estimate + half, k, level)


# --------------------------------------------------------------------- the seed papers' statistics
# pass@k (Agent K, AIDE), Bradley-Terry ratings of planners, and the Friedman test with a post-hoc across
# tasks (Demšar 2006: the critical-difference diagram). The tests are scipy's; only the bookkeeping is here.
PASS_AT_K = (1, 3, 10)


def reachable_k(most: int) -> list[int]:
    """The k of PASS_AT_K that a table whose largest cell has ``most`` counted trials can show (k = 1 always):
    a column of '-' for every cell says nothing."""
    return [k for k in PASS_AT_K if k == 1 or k <= most]


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


# Fewer tasks print no rating interval: the jackknife's spread over k tasks has k - 1 degrees of freedom,
# and at k = 2 its t factor at the Bonferroni tail of 8 planners is about 100 (every interval spans any rating).
MIN_TASKS_FOR_RATING_CI = 3
# Fewer tasks with a game print no rating at all: from one task a rating only restates which planner scored higher
# there, dressed as a strength.
MIN_TASKS_FOR_RATING = 2


@dataclass(frozen=True)
class Rating:
    """A planner's Bradley-Terry strength on the Elo scale (400 points = 10:1 odds), with a jackknife CI
    simultaneous over the planners rated together (none below ``MIN_TASKS_FOR_RATING_CI`` tasks). ``low``
    None with an interval: the planner lost every game it played (e.g. it failed every trial while the others
    did not), so the data set no lower bound; ``high`` None likewise for one that won every game. Both None:
    no left-out task moved the rating, or the planner played no game, so the data show no spread to build an
    interval from. ``tasks``: the tasks with at least one game."""
    player: str
    estimate: float
    low: float | None
    high: float | None
    wins: float
    games: int
    tasks: int

    @property
    def has_interval(self) -> bool:
        """An interval was computed (either end may still be open)."""
        return self.tasks >= MIN_TASKS_FOR_RATING_CI


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


def _ranked_first_bound(log_strength: np.ndarray, player: int, games: np.ndarray, tail: float,
                        last: bool) -> float:
    """The log-strength at which ``player`` would come first (``last``: last) among the planners it met on
    every task with probability ``tail``, the others held at their estimates: Plackett-Luce, whose pairwise
    chances are Bradley-Terry's (for "last", the same model on the reversed order). The bound of a planner
    that won (lost) every game, where the task-to-task spread is zero and measures nothing."""
    sign = -1.0 if last else 1.0
    opponents = [np.exp(sign * log_strength[row > 0]).sum() for row in games[:, player] if row.any()]

    def log_chance(x: float) -> float:
        return sum(sign * x - math.log(math.exp(sign * x) + total) for total in opponents)

    target = math.log(tail)
    near, far = float(log_strength[player]), float(log_strength[player]) - sign * 50.0
    if log_chance(near) <= target:
        return near
    for _ in range(100):                     # bisection: the chance is monotone in the strength
        middle = (near + far) / 2
        near, far = (middle, far) if log_chance(middle) > target else (near, middle)
    return far


def bradley_terry_ratings(scores: dict[str, dict[str, float]], *, level: float = DEFAULT_LEVEL) -> list[Rating]:
    """Bradley-Terry ratings of planners from per-task pairwise outcomes, best first.

    Elo scale: 400 / ln 10 per unit of log-strength, mean 0 over the planners. The interval is a jackknife
    over *tasks* (each task with a game left out in turn; its games stay together, and a task's figure already
    carries its trials' noise): rating ± t_{k-1} · se over k such tasks. The m planners' intervals are read
    together (which one excludes 0?), so t is taken at 1 - (1 - level) / (2m) (Bonferroni, aiming at all m
    covering at once with ``level``; docs/statistics.md gives the coverage measured, 0.938-0.952 at 3 tasks).
    Where the spread measures nothing, no spread is claimed: a planner that won (lost) every game it played
    has that end open and the other from :func:`_ranked_first_bound` or the jackknife, whichever is wider; one
    whose rating no left-out task moves, or that played no game, has both ends open. No interval below
    ``MIN_TASKS_FOR_RATING_CI`` tasks with a game.
    """
    _check_level(level)
    players = sorted({p for row in scores.values() for p in row})
    if not players:
        return []
    scale = 400.0 / math.log(10.0)
    wins, games = _win_matrices(players, scores)
    log_strength = _bradley_terry(wins.sum(axis=0), games.sum(axis=0))
    point = log_strength * scale
    # only tasks with a game inform the ratings: one where a single planner has a score adds no degree of freedom
    informative = games.sum(axis=(1, 2)) > 0
    wins, games = wins[informative], games[informative]
    k, m = len(wins), len(players)
    won, played = wins.sum(axis=(0, 2)), games.sum(axis=(0, 2))
    lows: list[float | None] = [None] * m
    highs: list[float | None] = [None] * m
    if k >= MIN_TASKS_FOR_RATING_CI:
        left_out = _bradley_terry(wins.sum(axis=0) - wins, games.sum(axis=0) - games) * scale      # (k, m)
        spread = np.sqrt((k - 1) / k * ((left_out - left_out.mean(axis=0)) ** 2).sum(axis=0))
        tail = (1 - family_level(m, level)) / 2
        half = float(_scipy_stats.t.ppf(1 - tail, k - 1)) * spread
        for i in range(m):
            if played[i] == 0:
                continue        # no game: the rating is the regulariser's alone, both ends open
            swept_won, swept_lost = won[i] >= played[i], won[i] <= 0
            if swept_won or swept_lost:
                # the jackknife's end beyond the sweep is the regulariser's, so it is left open; the other end
                # is the wider of the jackknife's and the sweep's own bound (its spread may be ~0)
                bound = _ranked_first_bound(log_strength, i, games, tail, last=swept_lost)
                others = (log_strength.sum() - log_strength[i]) / m
                end = (bound * (m - 1) / m - others) * scale     # on the mean-0 scale, the others held
                lows[i], highs[i] = ((None, max(end, float(point[i] + half[i]))) if swept_lost
                                     else (min(end, float(point[i] - half[i])), None))
            elif spread[i] > 1e-6:
                lows[i], highs[i] = float(point[i] - half[i]), float(point[i] + half[i])
    out = [Rating(p, float(point[i]), lows[i], highs[i], float(won[i]), int(played[i]), k)
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
    posthoc: dict[tuple[str, str], float]     # per-pair p-values (POSTHOC_TESTS[posthoc_test]), Holm-adjusted
    alpha: float = 0.05
    permutation_p: float | None = None         # the same statistic's p over within-block permutations
    permutations: int = 0
    posthoc_test: str = "wilcoxon"             # a key of POSTHOC_TESTS
    # the smallest raw p any pair's post-hoc could reach: 2 / 2**m over the m blocks where the pair differ (the
    # exact two-sided floor of the sign test and of Wilcoxon alike), taken over the pairs
    posthoc_floor: float = 1.0
    tied: bool = False                         # every planner tied in every block: nothing was tested
    exact: bool = False                        # permutation_p enumerated over every arrangement (permutations 0)

    def significant_pairs(self) -> list[tuple[str, str]]:
        return [pair for pair, p in self.posthoc.items() if p < self.alpha]

    def beyond_critical_difference(self) -> list[tuple[str, str]]:
        """The pairs whose mean ranks lie further apart than Nemenyi's critical difference (the CD diagram's
        verdict; it can differ from the per-pair post-hoc's)."""
        if self.critical_difference is None:
            return []
        return [(a, b) for a, b in self.posthoc
                if abs(self.mean_ranks[a] - self.mean_ranks[b]) > self.critical_difference]


# The per-pair post-hoc of friedman_test, by the scale of what was ranked: Wilcoxon weighs the sizes of the
# paired differences (an interval scale: normalized scores); the sign test only their direction (an ordinal
# scale: the stage reached, where stage 9 is not "three times" stage 3).
POSTHOC_TESTS = {"wilcoxon": "Wilcoxon signed-rank per pair (scipy.stats.wilcoxon)",
                 "sign": "exact sign test per pair (scipy.stats.binomtest on the blocks one planner reached further "
                         "in, ties left out; the measure is ordinal)"}


def friedman_test(scores: dict[str, dict[str, float]], alpha: float = 0.05,
                  permutations: int = FRIEDMAN_PERMUTATIONS, seed: int = 0, ordinal: bool = False) -> FriedmanResult:
    """Friedman test across the tasks on which every planner has a score (higher is better).

    scipy.stats.friedmanchisquare needs at least 3 planners; with fewer, only the mean ranks are given. Its p
    is the χ² approximation, loose with few blocks, so the result also carries a permutation p, which holds at
    any number of blocks: exact where the arrangements can be enumerated (:func:`friedman_exact_p`), else Monte
    Carlo (:func:`friedman_permutation_p`).
    The post-hoc is a paired test per pair with Holm's step-down adjustment (Benavoli et al. 2016 recommend
    paired tests over rank-based post-hocs): Wilcoxon signed-rank, or with ``ordinal`` scores (only their
    order means anything) the exact sign test. The Nemenyi critical difference (Demšar 2006, q from
    scipy.stats.studentized_range) is given for the CD diagram.
    """
    planners = sorted({p for row in scores.values() for p in row})
    tasks = sorted(t for t, row in scores.items() if all(p in row for p in planners))
    k, n = len(planners), len(tasks)
    if n == 0 or k == 0:
        return FriedmanResult(tuple(planners), tuple(tasks), {}, None, None, None, {}, alpha)
    table = np.array([[scores[t][p] for p in planners] for t in tasks], dtype=float)
    ranks = np.vstack([_scipy_stats.rankdata(-row) for row in table])    # 1 = best, ties averaged
    mean_ranks = {p: float(ranks[:, j].mean()) for j, p in enumerate(planners)}
    statistic = p_value = cd = perm_p = None
    exact = False
    tied = bool(np.all(table == table[:, :1]))
    if k >= 3 and n >= 2:
        if tied:
            statistic, p_value, perm_p = 0.0, 1.0, 1.0   # every planner tied on every task: no evidence of a difference
        else:
            res = _scipy_stats.friedmanchisquare(*table.T)
            statistic, p_value = float(res.statistic), float(res.pvalue)
            perm_p = friedman_exact_p(ranks) if permutations else None    # permutations=0: none asked for
            exact = perm_p is not None
            if not exact:
                perm_p = friedman_permutation_p(ranks, permutations, seed)
        q = _scipy_stats.studentized_range.ppf(1 - alpha, k, np.inf) / math.sqrt(2.0)
        cd = float(q * math.sqrt(k * (k + 1) / (6.0 * n)))
    raw: dict[tuple[str, str], float] = {}
    floor = 1.0
    for i, a in enumerate(planners):
        for j in range(i + 1, k):
            diff = table[:, i] - table[:, j]
            floor = min(floor, 2.0 / 2.0 ** int((diff != 0).sum()))
            if np.all(diff == 0):
                raw[(a, planners[j])] = 1.0
            elif ordinal:
                ahead = int((diff > 0).sum())
                raw[(a, planners[j])] = float(_scipy_stats.binomtest(ahead, ahead + int((diff < 0).sum())).pvalue)
            else:
                raw[(a, planners[j])] = float(_scipy_stats.wilcoxon(diff).pvalue)
    return FriedmanResult(tuple(planners), tuple(tasks), mean_ranks, statistic, p_value, cd, holm(raw), alpha,
                          perm_p, permutations if perm_p is not None and not tied and not exact else 0,
                          "sign" if ordinal else "wilcoxon", floor, tied, exact)


# Candidate states (rank-sum multisets times a block's arrangements) beyond which Friedman's permutation p is
# Monte Carlo instead of enumerated
MAX_EXACT_FRIEDMAN_STATES = 2_000_000


def friedman_exact_p(ranks: np.ndarray) -> float | None:
    """The exact p of Friedman's statistic under its null (within each block every arrangement of its ranks among
    the planners equally likely), enumerated over all (k!)^n arrangements by a recursion over blocks on the
    planners' rank sums. The future is the same for every relabelling of the planners, so a state is the sorted
    vector of rank sums; ranks are doubled to integers (ties share half ranks). None when the states would exceed
    ``MAX_EXACT_FRIEDMAN_STATES`` (then :func:`friedman_permutation_p` samples them)."""
    doubled = np.rint(np.asarray(ranks, dtype=float) * 2).astype(np.int64)
    n, k = doubled.shape
    orders = np.array(list(itertools.permutations(range(k))))
    states, weights = np.zeros((1, k), dtype=np.int64), np.ones(1)
    for row in doubled:
        arrangements, counts = np.unique(row[orders], axis=0, return_counts=True)
        if len(states) * len(arrangements) > MAX_EXACT_FRIEDMAN_STATES:
            return None
        grown = np.sort((states[:, None, :] + arrangements[None, :, :]).reshape(-1, k), axis=1)
        chances = (weights[:, None] * (counts / len(orders))[None, :]).ravel()
        states, inverse = np.unique(grown, axis=0, return_inverse=True)
        weights = np.bincount(inverse.ravel(), weights=chances, minlength=len(states))
    observed = int((doubled.sum(axis=0) ** 2).sum())
    return float(min(1.0, weights[(states ** 2).sum(axis=1) >= observed].sum()))


def friedman_permutation_p(ranks: np.ndarray, permutations: int = FRIEDMAN_PERMUTATIONS, seed: int = 0) -> float:
    """Monte Carlo p of Friedman's statistic under its null (within each block, which planner got which rank
    is exchangeable): every draw shuffles each block's ranks among the planners. Ties keep their shape under
    the shuffle, so the sum of squared rank sums orders draws exactly as the tie-corrected χ² does. The
    observed table counts as one draw, so p ≥ 1/(permutations + 1)."""
    rng = np.random.default_rng(seed)
    observed = float((ranks.sum(axis=0) ** 2).sum())
    hits, left = 0, permutations
    while left:
        batch = min(left, 5000)    # bounded memory whatever the table's size
        draws = rng.permuted(np.broadcast_to(ranks, (batch, *ranks.shape)), axis=2)
        hits += int(((draws.sum(axis=1) ** 2).sum(axis=1) >= observed - 1e-9).sum())
        left -= batch
    return (hits + 1) / (permutations + 1)


def holm(p_values: dict) -> dict:
    """Holm's step-down adjustment of a family of p-values (monotone, capped at 1)."""
    ordered = sorted(p_values.items(), key=lambda kv: kv[1])
    m = len(ordered)
    out, running = {}, 0.0
    for i, (key, p) in enumerate(ordered):
        running = max(running, min(1.0, (m - i) * p))
        out[key] = running
    return out
