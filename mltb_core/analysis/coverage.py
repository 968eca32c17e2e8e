"""Exact coverage of the approximate rate-difference intervals (Newcombe's, unpaired and paired), summed over
every outcome: the one computation behind the n from which they are printed (``stats.NEWCOMBE_MIN_TRIALS``,
derived by ``benchmarks/interval_thresholds.py``, checked by tests/test_interval_coverage.py) and the gate's
measured error rates (docs/statistics.md).

Grid: 39 x 39 true rates 0.025 .. 0.975 (a pair of rates per side); paired trials are drawn from a mix of
independence and the most positive dependence the margins allow (``dependence`` 0 and 0.5).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy import special as _special
from scipy import stats as _scipy_stats

from mltb_core.analysis.stats import DEFAULT_LEVEL, CI, newcombe_interval, paired_newcombe_interval

__all__ = ["RATE_GRID", "DEPENDENCES", "GridCoverage", "paired_tables", "paired_cells", "unpaired_coverage",
           "paired_coverage", "APPROXIMATE_MEAN", "APPROXIMATE_LOW", "APPROXIMATE_LOW_SHARE", "acceptable",
           "unpaired_interval_ends", "paired_interval_ends", "paired_table_weights", "GateRates", "GateRule"]

RATE_GRID = np.linspace(0.025, 0.975, 39)
DEPENDENCES = (0.0, 0.5)
# An approximate interval is printed where its mean coverage over the grid is within these bounds and at most
# APPROXIMATE_LOW_SHARE of the grid's points fall below APPROXIMATE_LOW (issue 57).
APPROXIMATE_MEAN = (0.935, 0.965)
APPROXIMATE_LOW, APPROXIMATE_LOW_SHARE = 0.90, 0.05

Interval = Callable[..., CI]


@dataclass(frozen=True)
class GridCoverage:
    """Exact coverage at every point of the grid (rows: baseline rate, columns: current rate)."""
    n: int
    coverage: np.ndarray

    @property
    def mean(self) -> float:
        return float(self.coverage.mean())

    @property
    def minimum(self) -> float:
        return float(self.coverage.min())

    @property
    def low_share(self) -> float:
        return float((self.coverage < APPROXIMATE_LOW).mean())


def acceptable(grids: list[GridCoverage]) -> bool:
    """Whether every grid meets the printing rule for an approximate interval."""
    return all(APPROXIMATE_MEAN[0] <= g.mean <= APPROXIMATE_MEAN[1] and g.low_share <= APPROXIMATE_LOW_SHARE
               for g in grids)


def unpaired_interval_ends(n: int, interval: Interval = newcombe_interval,
                           level: float = DEFAULT_LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) of current - baseline for every (baseline count, current count) of n trials per side."""
    low, high = np.empty((n + 1, n + 1)), np.empty((n + 1, n + 1))
    for b in range(n + 1):
        for c in range(n + 1):
            ci = interval(c, n, b, n, level)
            low[b, c], high[b, c] = ci.low, ci.high
    return low, high


def unpaired_coverage(n: int, interval: Interval = newcombe_interval, grid: np.ndarray = RATE_GRID,
                      level: float = DEFAULT_LEVEL) -> GridCoverage:
    """Exact coverage of ``interval`` (the signature of :func:`stats.proportion_diff_ci`) at n trials per side."""
    low, high = unpaired_interval_ends(n, interval, level)
    pmf = _scipy_stats.binom.pmf(np.arange(n + 1)[None, :], n, grid[:, None])           # (rates, counts)
    truth = grid[None, :] - grid[:, None]                                               # (base, cur)
    covered = ((low[None, None] <= truth[..., None, None] + 1e-12)
               & (truth[..., None, None] - 1e-12 <= high[None, None]))                  # (base, cur, xb, xc)
    coverage = np.einsum("ik,jl,ijkl->ij", pmf, pmf, covered)
    return GridCoverage(n, coverage)


@functools.lru_cache(maxsize=64)
def paired_tables(n: int) -> np.ndarray:
    """Every 2 x 2 table of n pairs as counts (both valid, baseline only, current only, neither), shape (T, 4)."""
    rows = [(a, b, c, n - a - b - c) for a in range(n + 1) for b in range(n + 1 - a) for c in range(n + 1 - a - b)]
    return np.array(rows, dtype=int)


def paired_cells(p_base: float, p_cur: float, dependence: float) -> np.ndarray:
    """Cell probabilities (both, baseline only, current only, neither) of a pair with these margins: a mix of
    independence and the most positive dependence the margins allow."""
    both = min(p_base, p_cur)
    independent = np.array([p_base * p_cur, p_base * (1 - p_cur), (1 - p_base) * p_cur, (1 - p_base) * (1 - p_cur)])
    tied = np.array([both, p_base - both, p_cur - both, 1 - p_base - p_cur + both])
    return (1 - dependence) * independent + dependence * tied


def paired_interval_ends(n: int, interval: Callable[..., CI] = paired_newcombe_interval,
                         level: float = DEFAULT_LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) of the paired interval for every table of :func:`paired_tables`."""
    lows, highs = [], []
    for both, lost, gained, neither in paired_tables(n):
        pairs = [(True, True)] * both + [(True, False)] * lost + [(False, True)] * gained + [(False, False)] * neither
        ci = interval(pairs, level)
        lows.append(ci.low)
        highs.append(ci.high)
    return np.array(lows, dtype=float), np.array(highs, dtype=float)


def paired_table_weights(n: int, cells: np.ndarray) -> np.ndarray:
    """Multinomial probabilities of every table of n pairs, for cell probabilities ``cells`` of shape (..., 4)."""
    tables = paired_tables(n)
    log_coefficient = _special.gammaln(n + 1) - _special.gammaln(tables + 1).sum(axis=1)
    logs = _special.xlogy(tables[None], np.asarray(cells).reshape(-1, 4)[:, None, :]).sum(axis=2)
    return np.exp(log_coefficient[None] + logs).reshape(*np.shape(cells)[:-1], len(tables))


def paired_coverage(n: int, dependence: float, interval: Callable[..., CI] = paired_newcombe_interval,
                    grid: np.ndarray = RATE_GRID, level: float = DEFAULT_LEVEL) -> GridCoverage:
    """Exact coverage of the paired interval at n pairs over the grid, for one ``dependence``."""
    low, high = paired_interval_ends(n, interval, level)
    cells = np.array([[paired_cells(a, b, dependence) for b in grid] for a in grid])   # (base, cur, 4)
    weights = paired_table_weights(n, cells)                                             # (base, cur, T)
    truth = (grid[None, :] - grid[:, None])[..., None]
    covered = (low[None, None] <= truth + 1e-12) & (truth - 1e-12 <= high[None, None])
    return GridCoverage(n, (weights * covered).sum(axis=-1))



# -- the gate's consistency rule, exactly ---------------------------------------------------------------
@dataclass(frozen=True)
class GateRates:
    """The gate's consistency verdicts at n trials per cell, summed exactly over every outcome: the largest
    chance over the grid (and dependences, paired) of REGRESSION on a true zero change, of ok on a true drop of
    ``drop``, and the smallest chance of REGRESSION on that drop (its power)."""
    n: int
    drop: float
    comparisons: int
    paired: bool
    false_regression: float
    false_ok: float
    power: float


def _verdict_of(name: str, base_valid: list[bool], cur_valid: list[bool], seeds_differ: bool, drop: float,
                level: float) -> str:
    from mltb_core.analysis.compare import _consistency_delta     # the gate's own rule (compare imports stats)
    from mltb_core.analysis.records import Outcome, TrialRecord

    def records(valid: list[bool], offset: int) -> list[TrialRecord]:
        return [TrialRecord(task="t", planner="p", model="sim", trial=i, seed=i + offset, config_hash="h",
                            outcome=Outcome.VALID if ok else Outcome.PLANNER_FAILURE, valid=ok) for i, ok in enumerate(valid)]
    return _consistency_delta(name, records(base_valid, 0), records(cur_valid, len(base_valid) if seeds_differ
                                                                    else 0), drop, level).verdict.split(" ")[0]


class GateRule:
    """The gate's consistency verdict on one cell (``compare._consistency_delta`` at the level of ``comparisons``
    gated comparisons, threshold ``drop``) at n trials per side, for every outcome, once: paired (same seeds) or
    unpaired (seeds differ)."""

    def __init__(self, n: int, drop: float, comparisons: int, paired: bool):
        from mltb_core.analysis.stats import family_level

        self.n, self.drop, self.comparisons, self.paired = n, drop, comparisons, paired
        level = family_level(comparisons)
        if paired:
            self.verdicts = np.array([_verdict_of("c", [True] * (a + b) + [False] * (c + d),
                                                  [True] * a + [False] * b + [True] * c + [False] * d, False, drop,
                                                  level) for a, b, c, d in paired_tables(n)])
        else:
            counts = range(n + 1)
            self.verdicts = np.array([[_verdict_of("c", [True] * b + [False] * (n - b), [True] * c + [False] * (n - c),
                                                   True, drop, level) for c in counts] for b in counts])

    def chance(self, verdict: str, p_base: np.ndarray, p_cur: np.ndarray) -> np.ndarray:
        """P(``verdict``) at each pair of true rates (paired: one row per dependence of DEPENDENCES)."""
        p_base, p_cur = np.atleast_1d(p_base), np.atleast_1d(p_cur)
        hit = (self.verdicts == verdict).astype(float)
        if self.paired:
            cells = np.array([[paired_cells(b, c, dep) for b, c in zip(p_base, p_cur)] for dep in DEPENDENCES])
            return (paired_table_weights(self.n, cells) * hit).sum(axis=-1)
        counts = np.arange(self.n + 1)
        pb = _scipy_stats.binom.pmf(counts[None, :], self.n, p_base[:, None])
        pc = _scipy_stats.binom.pmf(counts[None, :], self.n, p_cur[:, None])
        return np.einsum("ik,il,kl->i", pb, pc, hit)[None, :]

    def rates(self, grid: np.ndarray = RATE_GRID) -> GateRates:
        """The largest false REGRESSION and false ok, and the smallest power, over the grid (and dependences)."""
        dropped = grid[grid - self.drop >= -1e-12]
        cur = np.clip(dropped - self.drop, 0.0, 1.0)
        return GateRates(self.n, self.drop, self.comparisons, self.paired,
                         float(self.chance("REGRESSION", grid, grid).max()),
                         float(self.chance("ok", dropped, cur).max()),
                         float(self.chance("REGRESSION", dropped, cur).min()))
