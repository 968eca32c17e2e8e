"""Baselines and regression gating for planner changes in CI.

A baseline (``--save-baseline FILE``) holds, per (task, planner, model) cell, the figures with
their 95 % intervals and n, and the trial records they came from (reduced to what the figures
need, row-resample percentiles included), so a comparison recomputes both sides the same way.

``--compare FILE --fail-on-regression SPEC`` compares the current run with it cell by cell.

The change ``current - baseline`` and its interval (docs/statistics.md: the estimand and why):

- **paired** when both runs hold the same trial seeds for the cell (same ``--seed`` and trial
  numbers): consistency by Newcombe's paired score interval (Wilson margins and the pairs'
  correlation); percentile / normalized as the **median of the paired per-trial differences** with the
  exact order-statistic interval of a median (:func:`stats.median_change`; distribution-free, coverage
  >= its level at every n that has one; with row replicates on one split the split's noise cancels);
  ``mltb compare`` reports the same figure;
- **unpaired** otherwise: Newcombe's hybrid score interval for two independent rates; for medians the
  Hodges-Lehmann shift with its exact Mann-Whitney interval (:func:`stats.shift_interval`: the change of
  the median when the change moves every trial alike).

Every gated comparison of a run is read together (one failing cell fails the run), so each cell interval
is at level 1 - 0.05/m, m the gated comparisons that are not unchanged (:func:`stats.family_level`). For
the medians, and paired consistency below ``stats.NEWCOMBE_MIN_TRIALS["paired"]`` pairs (an exact interval),
each cell's false REGRESSION and false ok stay within 0.025/m, so the run's within 2.5 %; Newcombe's
approximate intervals (more pairs, or unpaired seeds) exceed that share: their measured per-cell rates are
tabulated in docs/statistics.md ("Measured error rates of the consistency verdict"). Verdict per gated (cell, metric), SPEC being ``metric:threshold`` pairs such
as ``consistency:-0.05,percentile:-2`` (a threshold d is the largest tolerated drop; its sign is ignored):

- ``unchanged``: paired, and every pair of trials gave the same figure (valid flag, or value): a fact
  about the seeds run, not an inference; it takes no share of the error. Exit status 0.
- ``REGRESSION (behaviour)``: a synthetic-policy cell (deterministic per seed on both sides), paired, that
  kept none of what it had (every valid submission lost, or its median percentile / normalized score down to
  0) by more than the tolerated drop; or a planner whose paired synthetic trials over all the tasks both runs
  hold kept at most ``1 - lost_share`` (``--gate-lost-share``, default 0.5) of them (its "all tasks" row). A
  fact about this code for the seeds run, like ``unchanged``, so it holds at any n and takes no share of the
  error: a planner that stops submitting fails the gate at 2 trials per cell. Exit status 1.
- ``REGRESSION``: a drop is shown (the interval's upper bound is below 0) and the interval reaches
  past -d (a drop larger than tolerated is not excluded). Exit status 1.
- ``ok``: non-inferiority is shown: the interval's lower bound is above -d. A shown drop smaller than d
  is ok too.
- ``inconclusive``: neither; the verdict names the trials per cell with which a true drop of d is
  flagged, and a true zero change called ok, 80 % of the time at the interval's level: consistency
  exactly for Newcombe's interval (:func:`stats.trials_needed_for_rate_gate`, unpaired) at the baseline
  rate nearest 1/2 inside the baseline's exact 95 % interval (:func:`consistency_trials_needed`: 1,585 for
  d = 0.05 with one gated comparison); paired medians exactly for the order-statistic interval from the
  differences' shape (:func:`_paired_median_trials_needed`). Exit status 0, printed loudly.

``tests/test_gate_operating.py`` checks the power at the printed trials and, exactly, the per-cell error
rates tabulated in docs/statistics.md.

Exit status under ``--compare`` (pytest plugin): 1 when a cell regresses; ``inconclusive`` does
not fail (a loud line says the gate could not decide); planner failures alone do not fail
the session (they are benchmark results, already in consistency); errors (infra included) and
failures of other tests still do. Cells present on one side only are reported, never failed.

Beside the cells, one combined row per (planner, model) and metric over the tasks both runs hold:
the mean over tasks of the per-task change (tasks weigh equally; items are never pooled across
tasks), a 95 % t interval over the tasks (its spread includes each task's trial noise), and a
task-level sign-flip permutation p-value (:func:`mltb_core.analysis.stats.cluster_sign_flip`), Holm-adjusted
over the combined rows.
Combined rows inform; only cells decide the exit status.
"""
from __future__ import annotations

import functools
import json
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import numpy as np
from scipy.stats import binom as _binom
from scipy.stats import chi2 as _chi2
from tabulate import tabulate

from mltb_core.analysis.records import TrialRecord
from mltb_core.analysis.results import counted_records, group_by, latest_records, normalized_cell, percentile_cell
from mltb_core.analysis.safety import terminal_text
from mltb_core.analysis.stats import (CI, DEFAULT_LEVEL, MAX_GATE_TRIALS, MIN_TRIALS_FOR_MEDIAN_CI, POWER, TrialSample,
                                      cluster_sign_flip, family_level, holm, median_change, median_standard_error,
                                      min_n_for_median_ci, min_n_for_shift_ci, NEWCOMBE_MIN_TRIALS, paired_proportion_diff_ci,
                                      paired_rate_change_exact, powered_half_width,
                                      proportion_diff_ci, rate_interval, t_interval, trials_needed_for_rate_gate,
                                      z_value)
from mltb_core.bench.documents import read_document
from mltb_core.config import GATE_LOST_SHARE as DEFAULT_LOST_SHARE

__all__ = ["METRICS", "BASELINE_VERSION", "parse_regression_spec", "cell_figures", "save_baseline",
           "load_baseline", "compare_to_baseline", "Comparison", "Delta", "paired_median_change",
           "consistency_trials_needed", "behaviour_fire_probability"]

BASELINE_VERSION = 3      # 3: normalized scores on every task, with their row resamples
# Format 2 (before normalized_samples and llm_calls) still reads: its normalized intervals cover trials only.
READABLE_BASELINE_VERSIONS = (2, BASELINE_VERSION)
METRICS = ("consistency", "percentile", "normalized")
# What a baseline keeps of each trial record: enough to recompute every figure the same way.
_RECORD_FIELDS = ("task", "planner", "model", "trial", "seed", "config_hash", "outcome", "valid", "percentile",
                  "normalized", "row_seed", "percentile_samples", "normalized_samples", "llm_calls")
_RECORD_EXTRAS = ("leaderboard", "percentile_note")


def _cell_name(task: str, planner: str, model: str) -> str:
    return f"{task}|{planner}|{model}"


def parse_regression_spec(spec: str) -> dict[str, float]:
    """``"consistency:-0.05,percentile:-2"`` → ``{"consistency": 0.05, "percentile": 2.0}`` (tolerated drops)."""
    thresholds: dict[str, float] = {}
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        name, sep, value = part.partition(":")
        name = name.strip()
        if not sep or name not in METRICS:
            raise ValueError(f"bad regression spec item {part!r}: expected metric:threshold with metric one of "
                             f"{sorted(METRICS)}")
        try:
            thresholds[name] = abs(float(value))
        except ValueError:
            raise ValueError(f"bad regression threshold {value!r} for {name}: not a number") from None
        if thresholds[name] == 0 or not math.isfinite(thresholds[name]):
            raise ValueError(f"bad regression threshold {value!r} for {name}: must be a non-zero finite drop")
    if not thresholds:
        raise ValueError(f"empty regression spec {spec!r}")
    return thresholds


# -- per-cell samples ------------------------------------------------------------------------------
@dataclass
class _Median:
    """A median metric's per-trial sample of one cell, keyed by trial seed for pairing."""
    seeds: list[int]
    sample: TrialSample
    row_seeds: set[int]
    excluded: str | None = None


def _median_sample(records: list[TrialRecord], metric: str) -> _Median:
    counted = sorted(counted_records(records), key=lambda r: r.seed)
    cell = percentile_cell(counted) if metric == "percentile" else normalized_cell(counted)
    return _Median(cell.seeds, TrialSample(cell.values, cell.replicates),
                   {s for s in cell.row_seeds if s is not None}, cell.excluded)


def paired_median_change(base: list[TrialRecord], cur: list[TrialRecord], metric: str,
                         level: float = DEFAULT_LEVEL) -> tuple[CI, list[float], str | None]:
    """The change of a median figure (``percentile`` or ``normalized``) over the trial seeds both lists
    score, as the gate computes it (:func:`stats.median_change`, paired): the change with its interval, the
    per-seed differences, and why there is none (the task has no comparable percentile). ``mltb compare``
    calls this, so both front ends print the same change for the same two runs."""
    b, c = _median_sample(base, metric), _median_sample(cur, metric)
    if b.excluded or c.excluded:
        return CI(None, None, None, 0, level), [], b.excluded or c.excluded
    shared = sorted(set(b.seeds) & set(c.seeds))
    pick = lambda m: [m.seeds.index(s) for s in shared]  # noqa: E731
    sides = [TrialSample(m.sample.values[pick(m)], m.sample.replicates[pick(m)]) for m in (b, c)]
    change = median_change(sides[1], sides[0], paired=True, level=level)
    return change, [float(v) for v in sides[1].values - sides[0].values], None


def _reduced(record: TrialRecord) -> dict:
    data = {name: getattr(record, name) for name in _RECORD_FIELDS}
    extra = {k: record.extra[k] for k in _RECORD_EXTRAS if k in record.extra}
    if getattr(record, "percentile_note", None) is not None:
        data["percentile_note"] = record.percentile_note
    return {**data, "extra": extra} if extra else data


def cell_figures(records: Iterable[TrialRecord], seed: int = 0) -> dict[str, dict]:
    """Per (task, planner, model) cell: n, infra errors, each metric's estimate and 95 % interval,
    and the cell's trial records reduced to what the figures need (``trials``)."""
    records = latest_records(records)
    cells: dict[str, dict] = {}
    for (task, planner, model), cell in group_by(records, "task", "planner", "model").items():
        counted = counted_records(cell)
        valid = sum(1 for r in counted if r.valid)
        figures: dict = {"task": task, "planner": planner, "model": model, "n": len(counted),
                         "infra_errors": len(cell) - len(counted), "synthetic": any(r.synthetic for r in cell),
                         "config_hashes": sorted({r.config_hash for r in cell}),
                         "llm_calls_mean": (sum(r.llm_calls for r in counted) / len(counted)) if counted else None,
                         "consistency": {**rate_interval(valid, len(counted)).to_dict(), "valid": valid,
                                         "interval": "clopper-pearson"}}
        for metric in ("normalized", "percentile"):
            median = _median_sample(cell, metric)
            ci = median.sample.interval()
            figures[metric] = {**ci.to_dict(), "excluded": median.excluded,
                               "interval": (f"none: n < {MIN_TRIALS_FOR_MEDIAN_CI}" if not ci.has_interval and ci.n
                                            else "order statistics over trials"
                                            + (", ends over held-out-row resamples" if median.row_seeds else ""))}
        figures["trials"] = [_reduced(r) for r in counted]
        cells[_cell_name(task, planner, model)] = figures
    return cells


_NUMBER_LIST = re.compile(r"\[\s*\n\s*((?:[-0-9.eE+]+|null|true|false)(?:,\s*\n\s*(?:[-0-9.eE+]+|null|true|false))*)\s*\n\s*\]")


def _dumps(data: dict) -> str:
    """Indented JSON with lists of numbers on one line (row-resample lists stay readable in diffs)."""
    text = json.dumps(data, indent=2, sort_keys=True)
    return _NUMBER_LIST.sub(lambda m: "[" + ", ".join(v.strip() for v in m.group(1).split(",")) + "]", text)


def save_baseline(path: Path, records: Iterable[TrialRecord], seed: int = 0) -> dict:
    """Write the baseline JSON for ``records`` to ``path``; returns what was written."""
    data = {"version": BASELINE_VERSION, "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "cells": cell_figures(records, seed)}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_dumps(data) + "\n", encoding="utf-8")
    return data


def load_baseline(path: Path) -> dict:
    """Read a baseline written by :func:`save_baseline`; a clear error names what is wrong."""
    path = Path(path)
    data = read_document(path, "baseline file", "json")
    if not isinstance(data, dict) or not isinstance(data.get("cells"), dict):
        raise ValueError(f"baseline file {path} is not an mltb baseline (version {BASELINE_VERSION})")
    if data.get("version") not in READABLE_BASELINE_VERSIONS:
        raise ValueError(f"baseline file {path} has format version {data.get('version')}, this mltb reads "
                         f"versions {', '.join(map(str, READABLE_BASELINE_VERSIONS))}: regenerate it with "
                         "--save-baseline")
    for name, cell in data["cells"].items():
        try:
            _baseline_records(cell)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"baseline file {path}: cell {name} has no valid trial list ({exc})") from None
    return data


def _baseline_records(cell: dict) -> list[TrialRecord]:
    return [TrialRecord.from_dict(t) for t in cell["trials"]]


# -- comparison --------------------------------------------------------------------------------------
@dataclass
class Delta:
    """The change of one metric in one cell, and the gate's verdict on it."""
    cell: str
    metric: str
    baseline: float | None
    current: float | None
    change: CI
    threshold: float | None      # tolerated drop (positive), None when the metric is not gated
    n_baseline: int = 0
    n_current: int = 0
    paired: bool = False
    trials_needed: int | None = None   # per cell, for the rule to decide at 80 % (see the module docstring)
    note: str = ""
    combined: bool = False             # the mean over tasks of per-task changes (informs, never fails)
    p_value: float | None = None       # combined rows: task-level sign-flip permutation test
    unchanged: bool = False            # paired, and every pair of trials gave the same figure
    trials: list[int] = field(default_factory=list)   # the current run's trial numbers in this cell
    # deterministic policy, paired: (baseline, current) per paired trial (valid as 1/0, or the value), what
    # they show as a fact, and whether it is a behaviour loss (:func:`_behaviour`)
    pairs: list[tuple[float, float]] = field(default_factory=list)
    behaviour: str = ""
    lost: bool = False

    @property
    def measurable(self) -> bool:
        """An interval the rule may act on (a median needs enough trials for its level, see stats.median_change)."""
        return self.change.has_interval

    @property
    def regressed(self) -> bool:
        """A behaviour loss on the seeds run (:func:`_behaviour`), or a drop is shown (upper bound below 0) and
        one beyond the tolerance is not excluded."""
        if self.threshold is None or self.unchanged:
            return False
        if self.combined:    # a row over tasks fails only on a behaviour loss; its statistics inform
            return self.lost
        return self.lost or (self.measurable and self.change.high < 0 and self.change.low <= -self.threshold)

    @property
    def ok(self) -> bool:
        """Non-inferiority is shown: the lower bound is above -threshold (never beside a behaviour loss)."""
        return (self.threshold is not None and not self.unchanged and not self.lost and self.measurable
                and self.change.low > -self.threshold)

    @property
    def inconclusive(self) -> bool:
        return (self.threshold is not None and self.change.estimate is not None and not self.unchanged
                and not self.regressed and not self.ok)

    @property
    def verdict(self) -> str:
        if self.threshold is None:
            return ""
        if self.change.estimate is None:
            return f"n/a ({self.note})" if self.note else "n/a"
        if self.unchanged:
            return "unchanged"
        if self.lost:
            return "REGRESSION (behaviour)"
        if self.regressed:
            return "REGRESSION"
        if self.ok:
            return "ok"
        need = f" (need ~{self.trials_needed} trials/cell)" if self.trials_needed else ""
        return f"inconclusive{need}"


def _planning_rate(valid: int, n: int) -> float:
    """The baseline rate the trials-needed computation assumes: the one nearest 1/2 (the most variable)
    inside the baseline's exact 95 % interval, lest a few lucky trials print too few trials."""
    ci = rate_interval(valid, n)
    return round(min(max(0.5, ci.low), ci.high), 4)


def consistency_trials_needed(valid: int, n: int, drop: float, level: float = DEFAULT_LEVEL) -> int:
    """Trials per cell at which the gate flags a true consistency drop of ``drop`` (and calls no change ok)
    80 % of the time, for a baseline of ``valid``/``n``: the one computation the gate prints and the docs
    quote (1,585 for a drop of 0.05 at the least favourable rate 1/2, one gated comparison)."""
    return trials_needed_for_rate_gate(_planning_rate(valid, n), drop, level)


# A cell loses its behaviour when it keeps none of what it had: every valid submission, or its whole median.
# Over a planner's tasks (more seeds, so a reshuffle of which seeds succeed rarely looks like a loss) the share
# is --gate-lost-share. docs/gating.md gives both rules' rates.
CELL_LOST_SHARE = 1.0


def _behaviour(metric: str, pairs: list[tuple[float, float]], threshold: float | None,
               lost_share: float) -> tuple[str, bool]:
    """The behaviour rule for a deterministic policy's paired trials (a fact about the seeds run, not an
    inference, so it holds at any n): what the pairs show, and whether they kept at most ``1 - lost_share``
    of the baseline's level (valid submissions, or the median score) with a drop beyond the tolerated one."""
    before, after = [b for b, _ in pairs], [c for _, c in pairs]
    if metric == "consistency":
        base_level, cur_level = sum(before), sum(after)
        text = f"valid {base_level:g} -> {cur_level:g} of {len(pairs)} paired seeds"
        drop = (base_level - cur_level) / len(pairs)
    else:
        base_level, cur_level = float(np.median(before)), float(np.median(after))
        text = f"median {base_level:.3g} -> {cur_level:.3g} over {len(pairs)} paired seeds"
        drop = base_level - cur_level
    lost = (threshold is not None and base_level > 0 and cur_level <= (1.0 - lost_share) * base_level + 1e-12
            and drop > threshold)
    return text, lost


def _ones(count: int, of: int) -> list[float]:
    return [1.0] * count + [0.0] * (of - count)


def behaviour_fire_probability(trials: int, tasks: int, before: float, after: float, drop: float,
                               lost_share: float = DEFAULT_LOST_SHARE) -> float:
    """The chance that a synthetic-policy planner gated over ``tasks`` cells of ``trials`` paired trials fails the
    behaviour rule (:func:`_behaviour`: a cell that keeps none, or the planner keeping at most 1 - lost_share of
    its valid submissions), when the baseline's trials succeed at rate ``before`` and the changed code's at
    ``after``, independently (a change that alters the policy's path draws its outcomes afresh; ``after =
    before`` is a change that moves no rate, whose firing is the rule's cost). Exact: the tasks' outcomes are
    summed by dynamic programming over (baseline valid, current valid, a cell fired)."""
    from scipy.stats import binom

    cell = [[float(binom.pmf(b, trials, before) * binom.pmf(c, trials, after)) for c in range(trials + 1)]
            for b in range(trials + 1)]
    cell_fires = [[_behaviour("consistency", list(zip(_ones(b, trials), _ones(c, trials))), drop, CELL_LOST_SHARE)[1]
                   for c in range(trials + 1)] for b in range(trials + 1)]
    states: dict[tuple[int, int, bool], float] = {(0, 0, False): 1.0}
    for _ in range(tasks):
        nxt: dict[tuple[int, int, bool], float] = {}
        for (b0, c0, fired), weight in states.items():
            for b in range(trials + 1):
                for c in range(trials + 1):
                    key = (b0 + b, c0 + c, fired or cell_fires[b][c])
                    nxt[key] = nxt.get(key, 0.0) + weight * cell[b][c]
        states = nxt
    total = trials * tasks
    return sum(weight for (b, c, fired), weight in states.items()
               if fired or _behaviour("consistency", list(zip(_ones(b, total), _ones(c, total))), drop, lost_share)[1])


def _consistency_delta(name: str, base: list[TrialRecord], cur: list[TrialRecord], threshold: float | None,
                       level: float = DEFAULT_LEVEL, deterministic: bool = False) -> Delta:
    base_by_seed = {r.seed: r.valid for r in base}
    cur_by_seed = {r.seed: r.valid for r in cur}
    paired = (len(base_by_seed) == len(base) and len(cur_by_seed) == len(cur) and bool(base)
              and base_by_seed.keys() == cur_by_seed.keys())
    base_valid, cur_valid = sum(base_by_seed.values()), sum(cur_by_seed.values())
    unchanged = paired and all(base_by_seed[s] == cur_by_seed[s] for s in base_by_seed)
    if paired:
        pairs = [(base_by_seed[s], cur_by_seed[s]) for s in sorted(base_by_seed)]
        # below the pairs where Newcombe's interval covers ~95 % (it prints none there), the exact interval whose
        # upper end is below 0 exactly when McNemar's exact test shows a drop
        change = (paired_proportion_diff_ci(pairs, level) if len(pairs) >= NEWCOMBE_MIN_TRIALS["paired"]
                  else paired_rate_change_exact(pairs, level))
    else:
        change = proportion_diff_ci(cur_valid, len(cur), base_valid, len(base), level)
    needed = None
    if threshold is not None and base and not unchanged:
        needed = consistency_trials_needed(base_valid, len(base), threshold, level)
    delta = Delta(name, "consistency", base_valid / len(base) if base else None,
                  cur_valid / len(cur) if cur else None, change, threshold, len(base), len(cur), paired, needed,
                  unchanged=unchanged)
    if deterministic and paired:
        delta.pairs = [(float(base_by_seed[s]), float(cur_by_seed[s])) for s in sorted(base_by_seed)]
        delta.behaviour, delta.lost = _behaviour("consistency", delta.pairs, threshold, CELL_LOST_SHARE)
    return delta


def _median_delta(name: str, metric: str, base: list[TrialRecord], cur: list[TrialRecord],
                  threshold: float | None, level: float = DEFAULT_LEVEL, deterministic: bool = False) -> Delta:
    b, c = _median_sample(base, metric), _median_sample(cur, metric)
    estimate = lambda m: m.sample.estimate() if m.sample.n else None  # noqa: E731
    if b.excluded or c.excluded or not b.sample.n or not c.sample.n:
        why = b.excluded or c.excluded or "no values"
        return Delta(name, metric, estimate(b), estimate(c), CI(None, None, None, 0), threshold,
                     b.sample.n, c.sample.n, note=why)
    paired = b.seeds == c.seeds and len(set(b.seeds)) == len(b.seeds)
    change = median_change(c.sample, b.sample, paired=paired, level=level)
    unchanged = paired and bool((c.sample.values == b.sample.values).all())
    needed = None
    if threshold is not None and not unchanged:
        needed = _median_trials_needed(b.sample, c.sample, change, threshold, paired)
    delta = Delta(name, metric, b.sample.estimate(), c.sample.estimate(), change, threshold, b.sample.n,
                  c.sample.n, paired, needed, unchanged=unchanged)
    if deterministic and paired:
        delta.pairs = [(float(x), float(y)) for x, y in zip(b.sample.values, c.sample.values)]
        delta.behaviour, delta.lost = _behaviour(metric, delta.pairs, threshold, CELL_LOST_SHARE)
    return delta


@functools.lru_cache(maxsize=16)
def _lower_ranks(level: float) -> np.ndarray:
    """For every n from 0 to MAX_GATE_TRIALS, the 0-based rank l of the order-statistic interval of a median
    at ``level`` (stats.median_ranks, vectorised; -1 where none exists)."""
    ns = np.arange(MAX_GATE_TRIALS + 1)
    alpha = (1.0 - level) / 2.0
    k = _binom.ppf(alpha, ns, 0.5)
    return np.where(_binom.cdf(k, ns, 0.5) <= alpha + 1e-12, k, k - 1).astype(int)


def _paired_median_trials_needed(differences: np.ndarray, threshold: float, level: float) -> int:
    """Pairs at which the gate's rule on the median of paired differences flags a true median change of
    -threshold (upper bound below 0) and calls a true zero change ok (lower bound above -threshold), each with
    probability POWER, computed exactly for the order-statistic interval (binomial counts of differences
    below 0 and below -threshold). The shape comes from these differences, centred on their median; the two
    shares it gives are estimated as (k + 1/2) / (n + 1) (Jeffreys), so no share is taken as certain. A
    planning figure: tests/test_gate_operating.py checks the power at the printed n."""
    centred = differences - np.median(differences)
    n0 = centred.size
    below_d = int((centred < threshold).sum())      # shifted down by d, still below 0: flags the drop
    beyond_d = int((centred <= -threshold).sum())   # at no change, at or below -d: blocks "ok"
    q1, q0 = (below_d + 0.5) / (n0 + 1.0), (beyond_d + 0.5) / (n0 + 1.0)    # Jeffreys: never 0 or 1
    if q1 <= 0.5 or q0 >= 0.5:
        return MAX_GATE_TRIALS
    start = min_n_for_median_ci(level)
    for stop in (start + 200, MAX_GATE_TRIALS + 1):     # most answers are small: look there first
        ns = np.arange(start, stop)
        lows = _lower_ranks(level)[start:stop]
        flagged = _binom.sf(ns - 1 - lows, ns, q1)    # more than u of the n below 0: the upper bound is below 0
        passed = _binom.cdf(lows, ns, q0)             # at most l at or below -d: the lower bound is above -d
        good = np.flatnonzero((flagged >= POWER) & (passed >= POWER) & (lows >= 0))
        if good.size:
            return int(ns[good[0]])
        start = stop
    return MAX_GATE_TRIALS


def _median_trials_needed(base: TrialSample, cur: TrialSample, change: CI, threshold: float, paired: bool) -> int:
    """Trials per side for a drop of ``threshold`` to be flagged (and no change called ok) with power POWER.
    Paired: :func:`_paired_median_trials_needed`. Unpaired: n * (spread / bound)^2 * inflation, bound =
    threshold * z / (z + z_beta) on the half-width, the spread the larger of the interval's half-width and z
    times Price-Bonett's standard error of each side's median combined, taken at its 80 % upper confidence
    bound (Browne 1995: inflation (n - 1) / chi2_{0.2, n-1}). Never below the fewest trials with an interval
    at the gate's level."""
    level = change.level
    if paired:
        return _paired_median_trials_needed(cur.values - base.values, threshold, level)
    n = min(base.n, cur.n)
    fewest = min_n_for_shift_ci(level)
    inflation = (n - 1) / float(_chi2.ppf(1.0 - POWER, n - 1)) if n > 1 else 1.0
    bound = powered_half_width(threshold, level)
    spreads = [change.half_width or 0.0]   # none below the minimum: Price-Bonett's alone
    errors = [median_standard_error(s.values) for s in (base, cur)]
    if all(e is not None for e in errors):
        spreads.append(z_value(level) * math.hypot(*errors))
    if max(spreads) == 0.0:
        return max(fewest, n + 1)
    return max(fewest, math.ceil(n * (max(spreads) / bound) ** 2 * inflation))


@dataclass
class Comparison:
    deltas: list[Delta]
    only_in_baseline: list[str] = field(default_factory=list)
    only_in_current: list[str] = field(default_factory=list)
    level: float = DEFAULT_LEVEL    # each cell interval's level: family_level over the gated comparisons
    family: int = 0                 # gated comparisons that share the family-wise error (unchanged ones are facts)

    @property
    def inconclusive(self) -> list[Delta]:
        return [d for d in self.deltas if d.inconclusive and not d.combined]

    @property
    def unchanged(self) -> list[Delta]:
        return [d for d in self.deltas if d.unchanged and d.threshold is not None and not d.combined]

    @property
    def failed(self) -> bool:
        return bool(self.regressions)

    @property
    def regressions(self) -> list[Delta]:
        """Cells that regressed, and rows over tasks with a behaviour loss (their statistics never fail)."""
        return [d for d in self.deltas if d.regressed]

    def render(self) -> str:
        """Deltas with intervals as a table, then missing cells and the verdicts."""
        def num(v: float | None, n: int) -> str:
            return "n/a" if v is None else f"{v:.2f} (n={n})"

        def test(d: Delta) -> str:
            if d.change.estimate is None:
                return ""
            if d.combined:
                return f"tasks: t; sign-flip Holm p={d.p_value:.3f}" if d.p_value is not None else "tasks: t"
            if d.metric == "consistency":
                if d.paired:
                    return "paired, exact" if d.n_baseline < NEWCOMBE_MIN_TRIALS["paired"] else "paired, ≈ 95 %"
                return "unpaired, ≈ 95 %"
            return "paired: median of differences" if d.paired else "unpaired: shift (Hodges-Lehmann)"
        rows = [[terminal_text(d.cell), d.metric, num(d.baseline, d.n_baseline), num(d.current, d.n_current),
                 d.change.format(2, signed=True),
                 test(d), "" if d.threshold is None else f"-{d.threshold:g}", d.verdict]
                for d in self.deltas]
        level = f"{self.level:.4g}".rstrip("0")
        lines = [f"Comparison with baseline (task|planner|model; change = current - baseline: consistency the "
                 f"difference of rates, medians the median of the paired per-trial differences; each cell's interval "
                 f"at level {level} = 1 - {1 - DEFAULT_LEVEL:.2g}/{max(1, self.family)} (Bonferroni over the "
                 f"{self.family} gated comparisons not unchanged, so all cover at once with >= "
                 f"{DEFAULT_LEVEL:.0%}); n = counted trials; 'all tasks' rows: mean over tasks of the per-task "
                 "change, n = tasks, 95% t interval per row, sign-flip p Holm-adjusted over those rows, informative "
                 "unless a behaviour loss; behaviour check: a synthetic-policy cell that kept none of its valid "
                 "submissions or median, or a planner that kept at most 1 - the lost share over the tasks, on the "
                 "paired seeds, is a regression at any n)",
                 tabulate(rows, headers=["cell", "metric", "baseline", "current", "change [CI]", "test",
                                         "max drop", "verdict"], disable_numparse=True)]
        if self.only_in_baseline:
            lines.append("not run now (in baseline only): " + ", ".join(map(terminal_text, self.only_in_baseline)))
        if self.only_in_current:
            lines.append("new (no baseline): " + ", ".join(map(terminal_text, self.only_in_current)))
        if self.failed:
            lines.append(f"FAILED: {len(self.regressions)} regression(s): "
                         + "; ".join(_regression_text(d) for d in self.regressions))
        gated = [d for d in self.deltas if d.threshold is not None and d.change.estimate is not None and not d.combined]
        if self.unchanged:
            trials = sorted({t for d in self.unchanged for t in d.trials})
            lines.append(f"unchanged: {len(self.unchanged)} of {len(gated)} gated comparisons gave the same figure "
                         f"on every paired trial (a fact for the trial seeds run: {_trial_text(trials)} under this "
                         "--seed; other seeds may differ)")
        if self.inconclusive:
            worst = max((d.trials_needed or 0) for d in self.inconclusive)
            lines.append(
                f"INCONCLUSIVE: {len(self.inconclusive)} of {len(gated)} gated comparisons neither show a regression "
                f"nor exclude a drop of the threshold (need up to ~{worst} trials per cell); for them there is no "
                f"evidence either way. Rule: 'ok' needs the lower bound above -d; trials needed: a true drop "
                f"of d flagged, and no change called ok, with power {POWER:g} at the interval's level (consistency: "
                f"computed exactly for Newcombe's interval at the least favourable rate in the baseline's 95% "
                f"interval; medians: the fewest pairs with an order-statistic interval and a half-width <= "
                f"{powered_half_width(1.0, self.level):.2f} * d).")
        if not self.failed:
            decided = sum(1 for d in gated if d.ok)
            lines.append(f"no regression shown; {decided} of {len(gated)} gated comparisons shown ok (non-inferior)"
                         + (" (see INCONCLUSIVE above)" if self.inconclusive else ""))
        return "\n".join(lines)


def _regression_text(d: Delta) -> str:
    if d.lost:
        return (f"{terminal_text(d.cell)} {d.metric} {d.behaviour}: a behaviour loss on the seeds run (synthetic "
                f"policy, deterministic per seed: a fact about this code for {_trial_text(d.trials)}, not an "
                f"estimate of the rate)")
    return (f"{terminal_text(d.cell)} {d.metric} {d.change.format(2, signed=True)}: a drop is shown and one beyond "
            f"-{d.threshold:g} is not excluded")


def _trial_text(trials: list[int]) -> str:
    if len(trials) > 2 and all(b - a == 1 for a, b in zip(trials, trials[1:])):
        return f"trials {trials[0]}..{trials[-1]}"
    return "trials " + ", ".join(map(str, trials))


def _combined_deltas(cells: list[Delta], thresholds: dict[str, float], seed: int) -> list[Delta]:
    """Per (planner, model) and metric, the mean over tasks of the per-task changes (tasks are the units);
    the sign-flip p-values Holm-adjusted over these rows (they are read together)."""
    groups: dict[tuple[str, str, str], list[Delta]] = {}
    for d in cells:
        if d.change.estimate is None or d.baseline is None or d.current is None:
            continue
        groups.setdefault(_planner_key(d), []).append(d)
    out = []
    for (planner, model, metric), deltas in sorted(groups.items()):
        if len(deltas) < 2:
            continue
        changes = [d.change.estimate for d in deltas]
        out.append(Delta(_cell_name("all tasks", planner, model), metric,
                         sum(d.baseline for d in deltas) / len(deltas), sum(d.current for d in deltas) / len(deltas),
                         t_interval(changes), thresholds.get(metric), len(deltas), len(deltas),
                         combined=True, p_value=cluster_sign_flip(changes, seed=seed)))
    adjusted = holm({i: d.p_value for i, d in enumerate(out) if d.p_value is not None})
    for i, p in adjusted.items():
        out[i].p_value = p
    return out


def _planner_key(d: Delta) -> tuple[str, str, str]:
    """(planner, model, metric): what a cell shares with its planner's row over tasks."""
    _, planner, model = d.cell.split("|", 2)
    return planner, model, d.metric


def _planner_behaviour(deltas: list[Delta], lost_share: float) -> None:
    """The behaviour rule at ``lost_share`` over each (planner, model)'s paired synthetic-policy trials of every
    task both runs hold: on its row over tasks, or on its one cell when it has a single task."""
    groups: dict[tuple[str, str, str], list[Delta]] = {}
    for d in deltas:
        if not d.combined and d.pairs and d.threshold is not None:
            groups.setdefault(_planner_key(d), []).append(d)
    rows = {_planner_key(d): d for d in deltas if d.combined}
    for key, cells in groups.items():
        target = rows.get(key) if len(cells) > 1 else cells[0]
        if target is None or all(d.unchanged for d in cells):
            continue
        pairs = [pair for d in cells for pair in d.pairs]
        behaviour, lost = _behaviour(key[2], pairs, cells[0].threshold, lost_share)
        if target.combined:
            target.pairs, target.trials = pairs, sorted({t for d in cells for t in d.trials})
            target.behaviour, target.lost = f"{behaviour} over {len(cells)} tasks", lost
        elif lost and not target.lost:
            target.behaviour, target.lost = behaviour, True


def _cell_deltas(base_cells: dict[str, list[TrialRecord]], current: dict[str, list[TrialRecord]],
                 thresholds: dict[str, float], level: float, deterministic: set[str]) -> list[Delta]:
    deltas = []
    for name in sorted(set(current) & set(base_cells)):
        base, cur = base_cells[name], current[name]
        if not base and not cur:
            continue
        fact = name in deterministic
        consistency = _consistency_delta(name, base, cur, thresholds.get("consistency"), level, fact)
        consistency.trials = sorted({r.trial for r in cur})
        deltas.append(consistency)
        for metric in ("normalized", "percentile"):
            delta = _median_delta(name, metric, base, cur, thresholds.get(metric), level, fact)
            delta.trials = consistency.trials
            if delta.baseline is not None or delta.current is not None or delta.threshold is not None:
                deltas.append(delta)
    return deltas


def compare_to_baseline(baseline: dict, records: Iterable[TrialRecord], thresholds: dict[str, float] | None = None,
                        seed: int = 0, lost_share: float = DEFAULT_LOST_SHARE) -> Comparison:
    """Compare ``records`` cell by cell with a loaded baseline; ``thresholds`` from :func:`parse_regression_spec`.

    The gated comparisons are read together (the run fails if any regresses), so every cell interval is at
    Bonferroni's level over them; a comparison whose paired trials are all identical, or a synthetic-policy
    cell's behaviour loss (:func:`_behaviour`), is a fact, not an inference, and takes no share of the error."""
    thresholds = thresholds or {}
    latest = group_by(latest_records(records), "task", "planner", "model")
    current = {_cell_name(*key): counted_records(cell) for key, cell in latest.items()}
    base_cells = {name: counted_records(_baseline_records(cell)) for name, cell in baseline["cells"].items()}
    # a synthetic policy is deterministic per seed on both sides: its paired trials are facts about the code
    deterministic = {_cell_name(*key) for key, cell in latest.items()
                     if cell and all(r.synthetic for r in cell)
                     and baseline["cells"].get(_cell_name(*key), {}).get("synthetic") is True}
    deltas = _cell_deltas(base_cells, current, thresholds, DEFAULT_LEVEL, deterministic)
    family = sum(1 for d in deltas if d.threshold is not None and d.change.estimate is not None and not d.unchanged
                 and not d.lost)
    level = family_level(family)
    if family > 1:
        deltas = _cell_deltas(base_cells, current, thresholds, level, deterministic)
    deltas += _combined_deltas(deltas, thresholds, seed)
    _planner_behaviour(deltas, lost_share)
    return Comparison(deltas, sorted(set(base_cells) - set(current)), sorted(set(current) - set(base_cells)),
                      level, family)
