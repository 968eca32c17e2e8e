"""Seeded bootstrap confidence intervals.

Everything here is deterministic for a given seed, so the same records always print the
same intervals (the terminal summary must be identical with and without xdist).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

__all__ = ["CI", "bootstrap_ci", "bootstrap_diff_ci", "grouped_bootstrap_ci", "median", "mean", "STATISTICS"]

DEFAULT_RESAMPLES = 2000
DEFAULT_LEVEL = 0.95


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


def _as_sample(values: Sequence[float]) -> np.ndarray:
    sample = np.asarray([float(v) for v in values if v is not None], dtype=float)
    if np.isnan(sample).any():
        raise ValueError("bootstrap sample contains NaN")
    return sample


def _statistic(stat: str | Callable) -> Callable[..., np.ndarray]:
    if callable(stat):
        return stat
    try:
        return STATISTICS[stat]
    except KeyError:
        raise ValueError(f"unknown statistic {stat!r}; choose one of {sorted(STATISTICS)}") from None


def _percentile_bounds(resampled: np.ndarray, level: float) -> tuple[float, float]:
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(resampled, [alpha, 1.0 - alpha])
    return float(low), float(high)


def bootstrap_ci(values: Sequence[float], stat: str | Callable = "median", *, level: float = DEFAULT_LEVEL,
                 resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> CI:
    """Percentile-bootstrap CI of ``stat`` over ``values`` (None entries are dropped).

    A single observation gives a zero-width interval: there is no spread to resample, and
    callers read ``n`` to judge how much to trust it.
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level must be in (0, 1), got {level}")
    sample = _as_sample(values)
    func = _statistic(stat)
    if sample.size == 0:
        return CI(None, None, None, 0, level)
    estimate = float(func(sample))
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, sample.size, size=(resamples, sample.size))
    low, high = _percentile_bounds(func(sample[idx], axis=1), level)
    return CI(estimate, low, high, int(sample.size), level)


def bootstrap_diff_ci(current: Sequence[float], baseline: Sequence[float], stat: str | Callable = "median", *,
                      level: float = DEFAULT_LEVEL, resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> CI:
    """CI of ``stat(current) - stat(baseline)``, resampling both samples independently.

    ``n`` is the smaller of the two sample sizes. Empty on either side → an empty CI.
    """
    cur, base = _as_sample(current), _as_sample(baseline)
    func = _statistic(stat)
    if cur.size == 0 or base.size == 0:
        return CI(None, None, None, 0, level)
    estimate = float(func(cur) - func(base))
    rng = np.random.default_rng(seed)
    cur_idx = rng.integers(0, cur.size, size=(resamples, cur.size))
    base_idx = rng.integers(0, base.size, size=(resamples, base.size))
    diffs = func(cur[cur_idx], axis=1) - func(base[base_idx], axis=1)
    low, high = _percentile_bounds(diffs, level)
    return CI(estimate, low, high, int(min(cur.size, base.size)), level)


def grouped_bootstrap_ci(groups: Sequence[Sequence[float]], within: str | Callable = "median",
                         across: str | Callable = "median", *, level: float = DEFAULT_LEVEL,
                         resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> CI:
    """CI of ``across`` over groups of ``within`` per group, e.g. the median over tasks of per-task consistency.

    Trials are resampled within each group and the groups (tasks) stay fixed: the benchmark's
    task list is a fixed population, and trial-to-trial noise is what a rerun would change.
    Empty groups are ignored; ``n`` is the number of non-empty groups.
    """
    samples = [s for s in (_as_sample(g) for g in groups) if s.size]
    inner, outer = _statistic(within), _statistic(across)
    if not samples:
        return CI(None, None, None, 0, level)
    estimate = float(outer(np.array([inner(s) for s in samples])))
    rng = np.random.default_rng(seed)
    per_group = np.empty((resamples, len(samples)))
    for col, sample in enumerate(samples):
        idx = rng.integers(0, sample.size, size=(resamples, sample.size))
        per_group[:, col] = inner(sample[idx], axis=1)
    low, high = _percentile_bounds(outer(per_group, axis=1), level)
    return CI(estimate, low, high, len(samples), level)
