"""Kaggle leaderboards: percentile, medal and median of a score among the real teams.

A board file is a CSV with columns ``rank,score`` (one row per team, as in
``fixtures/leaderboards/<slug>.private.csv``). The metric's direction is given by the caller.

Conventions (documented once here, used by grading):

* **Percentile** = share of the board's teams that the score beats, a tied team counting half
  (mid-rank, the usual convention for ties), in percent: 0 when worse than every team, 100 when
  strictly better than the best; tying the best of N teams alone gives 100 (N - 1/2) / N.
* **Truncated boards** (``total_teams`` > rows, e.g. Porto Seguro: 4,598 rows of 5,156 teams)
  list only the top teams; the missing teams are all worse than the board's worst row. A score
  at least as good as that worst row beats them all; a score worse than every row beats an
  unknown share of them and is conservatively counted as beating none (percentile 0).
* **Medals** follow MLE-bench's reading of Kaggle's progression rules with the team count N
  (ranks truncated to integers, as MLE-bench does; ``mlebench_style_thresholds`` in the
  leaderboard provenance match this): N<100: gold/silver/bronze = top 10 %/20 %/40 %;
  100<=N<250: top 10 / 20 % / 40 %; 250<=N<1000: top 10+0.2 %N / 50 / 100;
  N>=1000: top 10+0.2 %N / 5 % / 10 %. The threshold is the score at that rank; a score at
  least as good as the threshold (ties included) earns the medal. When the rank lies beyond a
  truncated file, the threshold is the file's worst row (the missing teams are worse).
* **Median** is the median of all N teams' scores (pandas median when the file is complete);
  ``above_median`` is strict, as in MLE-bench.
* Leaked perfect scores (1.0 at the top of spaceship-titanic and forest-cover) and degenerate
  0.0 rows were real leaderboard entries, so they stay in the field: they shift ranks by one,
  exactly as on Kaggle, and a perfect submission ties them (half of them count as beaten; gold).
* Ties are detected with a tiny relative tolerance (1e-9) so float noise in a recomputed score
  does not break a tie with the board's rounded value.
"""
from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
import numpy.typing as npt
import pandas as pd

__all__ = ["Leaderboard", "LeaderboardError", "MedalThresholds", "medal_ranks", "MEDALS"]

MEDALS = ("gold", "silver", "bronze")
_REQUIRED_COLUMNS = ("rank", "score")
_TIE_TOLERANCE = 1e-9
# a score or an array of scores: _to_goodness keeps the kind it is given
_Scores = TypeVar("_Scores", float, np.ndarray)


class LeaderboardError(ValueError):
    """A missing or malformed leaderboard file (the message names the file and line)."""


@dataclass(frozen=True)
class MedalThresholds:
    """Scores needed for each medal and the field's median, in the metric's own units."""

    gold: float
    silver: float
    bronze: float
    median: float

    def as_dict(self) -> dict[str, float]:
        return {"gold": self.gold, "silver": self.silver, "bronze": self.bronze, "median": self.median}


def medal_ranks(n_teams: int) -> tuple[int, int, int]:
    """Worst rank (1-based) that still earns gold, silver, bronze among ``n_teams`` teams."""
    if n_teams < 1:
        raise ValueError(f"a leaderboard needs at least one team, got {n_teams}")
    if n_teams < 100:
        ranks = (int(n_teams * 0.1), int(n_teams * 0.2), int(n_teams * 0.4))
    elif n_teams < 250:
        ranks = (10, int(n_teams * 0.2), int(n_teams * 0.4))
    elif n_teams < 1000:
        ranks = (10 + int(n_teams * 0.002), 50, 100)
    else:
        ranks = (10 + int(n_teams * 0.002), int(n_teams * 0.05), int(n_teams * 0.1))
    # Tiny boards: at least the winner gets each medal, as MLE-bench does.
    gold, silver, bronze = (max(1, r) for r in ranks)
    return gold, silver, bronze


class Leaderboard:
    """The real teams' scores on one competition, best first.

    ``scores``: one score per team (any order). ``total_teams``: the true team count when the
    list is truncated to the top teams (``None``: the list is complete).
    """

    def __init__(self, scores: npt.ArrayLike, greater_is_better: bool, total_teams: int | None = None,
                 name: str = "<leaderboard>") -> None:
        values = np.asarray(scores, dtype=float)
        if values.ndim != 1 or values.size == 0:
            raise LeaderboardError(f"{name}: a leaderboard needs at least one score")
        if not np.isfinite(values).all():
            raise LeaderboardError(f"{name}: scores must be finite numbers")
        if total_teams is not None:
            if isinstance(total_teams, bool) or not isinstance(total_teams, (int, np.integer)):
                raise LeaderboardError(f"{name}: total_teams must be an integer, got {total_teams!r}")
            if total_teams < values.size:
                raise LeaderboardError(
                    f"{name}: total_teams={total_teams} is smaller than the {values.size} rows in the file")
        self.name = name
        self.greater_is_better = bool(greater_is_better)
        self.rows = int(values.size)
        self.n_teams = int(total_teams) if total_teams is not None else self.rows
        # "Goodness": higher is better whatever the metric's direction; sorted best first.
        self._goodness = np.sort(self._to_goodness(values))[::-1]

    # -- loading -------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path, greater_is_better: bool, total_teams: int | None = None) -> "Leaderboard":
        """Read and validate a ``rank,score`` CSV; :class:`LeaderboardError` names file and line."""
        path = Path(path)
        stat = _stat_or_raise(path)
        return _load_cached(path.resolve(), stat.st_mtime_ns, bool(greater_is_better), total_teams)

    # -- basic facts ---------------------------------------------------------------------
    @property
    def truncated(self) -> bool:
        """True when the file lists fewer rows than the competition had teams."""
        return self.n_teams > self.rows

    @property
    def best(self) -> float:
        return float(self._from_goodness(self._goodness[0]))

    @property
    def worst(self) -> float:
        """The worst score in the file (not of the whole field when truncated)."""
        return float(self._from_goodness(self._goodness[-1]))

    def __repr__(self) -> str:
        direction = "higher" if self.greater_is_better else "lower"
        return (f"Leaderboard({self.name!r}, rows={self.rows}, teams={self.n_teams}, "
                f"{direction} is better, best={self.best:g})")

    # -- scoring -------------------------------------------------------------------------
    def percentile(self, score: float) -> float:
        """Percent of the competition's teams that ``score`` beats, ties counting half (0..100)."""
        beaten_or_tied = self._count_at_or_below(score)
        if beaten_or_tied == 0:
            # Worse than every listed team: it may still beat some unlisted teams of a
            # truncated board, but how many is unknown, so count none (conservative).
            return 0.0
        tied = beaten_or_tied - self._count_below(score)
        return 100.0 * (beaten_or_tied - 0.5 * tied + (self.n_teams - self.rows)) / self.n_teams

    def thresholds(self) -> MedalThresholds:
        """Medal and median thresholds for this field (see module docstring)."""
        gold, silver, bronze = (self._score_at_rank(r) for r in medal_ranks(self.n_teams))
        return MedalThresholds(gold=gold, silver=silver, bronze=bronze, median=self._median())

    def medal(self, score: float) -> str | None:
        """``"gold"``, ``"silver"``, ``"bronze"`` or ``None``."""
        goodness = self._checked_goodness(score)
        for medal_name, threshold in zip(MEDALS, medal_ranks(self.n_teams)):
            if goodness >= self._to_goodness(self._score_at_rank(threshold)) - self._tolerance(goodness):
                return medal_name
        return None

    def above_median(self, score: float) -> bool:
        """Strictly better than the median team."""
        goodness = self._checked_goodness(score)
        return goodness > self._to_goodness(self._median()) + self._tolerance(goodness)

    # -- helpers -------------------------------------------------------------------------
    def _to_goodness(self, values: _Scores) -> _Scores:
        return values if self.greater_is_better else -values

    _from_goodness = _to_goodness  # negation is its own inverse

    @staticmethod
    def _tolerance(goodness: float) -> float:
        return _TIE_TOLERANCE * max(1.0, abs(goodness))

    def _checked_goodness(self, score: float) -> float:
        try:
            value = float(score)
        except (TypeError, ValueError):
            raise ValueError(f"score must be a number, got {score!r}") from None
        if math.isnan(value):
            raise ValueError("score is NaN")
        return float(self._to_goodness(value))

    def _count_at_or_below(self, score: float) -> int:
        goodness = self._checked_goodness(score)
        limit = goodness + self._tolerance(goodness)
        # _goodness is descending; count entries <= limit via the ascending view.
        ascending = self._goodness[::-1]
        return int(np.searchsorted(ascending, limit, side="right"))

    def _count_below(self, score: float) -> int:
        """Listed teams strictly worse than ``score`` (outside the tie tolerance)."""
        goodness = self._checked_goodness(score)
        limit = goodness - self._tolerance(goodness)
        return int(np.searchsorted(self._goodness[::-1], limit, side="left"))

    def _score_at_rank(self, rank: int) -> float:
        """Score of the team at 1-based ``rank`` in the full field (file's worst if beyond it)."""
        index = min(rank, self.rows) - 1
        return float(self._from_goodness(self._goodness[index]))

    def _median(self) -> float:
        # Median of the full field, best-first positions (N-1)//2 and N//2. Positions beyond a
        # truncated file fall back to its worst row (the true value is lower but unknown).
        lower = self._score_at_rank((self.n_teams - 1) // 2 + 1)
        upper = self._score_at_rank(self.n_teams // 2 + 1)
        return (lower + upper) / 2.0


def _stat_or_raise(path: Path) -> os.stat_result:
    try:
        return path.stat()
    except FileNotFoundError:
        raise LeaderboardError(f"{path}: leaderboard file not found") from None


@functools.lru_cache(maxsize=64)
def _load_cached(path: Path, _mtime_ns: int, greater_is_better: bool, total_teams: int | None) -> Leaderboard:
    scores = _read_board_scores(path, greater_is_better)
    return Leaderboard(scores, greater_is_better, total_teams=total_teams, name=str(path))


def _read_board_scores(path: Path, greater_is_better: bool) -> np.ndarray:
    """Validated scores of a ``rank,score`` file, in file order."""
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True)
    except pd.errors.EmptyDataError:
        raise LeaderboardError(f"{path}: file is empty (expected a 'rank,score' header)") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise LeaderboardError(f"{path}: cannot parse CSV: {exc}") from None
    frame.columns = [str(c).strip() for c in frame.columns]
    missing = [c for c in _REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise LeaderboardError(
            f"{path}: missing column(s) {missing}; expected 'rank,score', found {list(frame.columns)}")
    if frame.empty:
        raise LeaderboardError(f"{path}: no rows after the header")
    numeric = {}
    for column in _REQUIRED_COLUMNS:
        values = pd.to_numeric(frame[column].str.strip(), errors="coerce").to_numpy(dtype=float)
        bad = np.flatnonzero(~np.isfinite(values))
        if bad.size:
            row = int(bad[0])
            # +2: line 1 is the header and pandas rows are 0-based.
            raise LeaderboardError(
                f"{path}, line {row + 2}: {column} {frame[column].iloc[row]!r} is not a finite number")
        numeric[column] = values
    _check_direction(path, numeric["rank"], numeric["score"], greater_is_better)
    return numeric["score"]


def _check_direction(path: Path, ranks: np.ndarray, scores: np.ndarray, greater_is_better: bool) -> None:
    """Catch a board loaded with the wrong metric direction (rank 1 must hold the best score)."""
    by_rank = scores[np.argsort(ranks, kind="stable")]
    first, last = by_rank[0], by_rank[-1]
    if (greater_is_better and first < last) or (not greater_is_better and first > last):
        direction = "higher" if greater_is_better else "lower"
        raise LeaderboardError(
            f"{path}: rank 1 scores {first:g} but the last rank scores {last:g}, which contradicts "
            f"'{direction} is better' for this metric")
