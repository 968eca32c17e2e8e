"""Baselines and regression gating for planner changes in CI.

A baseline (``--save-baseline FILE``) holds, per (task, planner, model) cell, the figures with
their 95 % intervals and n, and the trial records they came from (reduced to what the figures
need, row-resample percentiles included), so a comparison recomputes both sides the same way.

``--compare FILE --fail-on-regression SPEC`` compares the current run with it cell by cell.

The change ``current - baseline`` and its 95 % interval:

- **paired** when both runs hold the same trial seeds for the cell (same ``--seed`` and trial
  numbers): consistency by Newcombe's paired score interval (Wilson margins and the pairs'
  correlation); percentile / normalized by a bootstrap that draws the same trials on both sides
  and, when both were graded on the same split, the same held-out-row resample (that noise
  then cancels);
- **unpaired** otherwise: Newcombe's hybrid score interval for two independent rates, and a
  bootstrap resampling each side independently for medians.

Verdict per gated (cell, metric), SPEC being ``metric:threshold`` pairs such as
``consistency:-0.05,percentile:-2`` (a threshold d is the largest tolerated drop; its sign is ignored).
Three verdicts, from the 95 % interval of the change:

- ``REGRESSION``: a drop is shown (the interval's upper bound is below 0) and the interval reaches
  past -d (a drop larger than tolerated is not excluded). Exit status 1.
- ``ok``: non-inferiority is shown: the interval's lower bound is above -d (a drop of d or more is
  excluded at 95 %). A shown drop smaller than d is ok too.
- ``inconclusive``: neither; the verdict names the trials per cell with which a true drop of d is
  flagged, and a true zero change called ok, 80 % of the time, for the interval actually used:
  consistency exactly for Newcombe's interval (:func:`stats.trials_needed_for_rate_gate`, unpaired) at
  the baseline rate nearest 1/2 inside the baseline's exact 95 % interval (the least favourable rate the
  data allow, so 0 % and 100 % still need trials); medians need ``MIN_TRIALS_FOR_MEDIAN_CI`` trials per side and a
  95 % half-width of at most d * z_{alpha/2} / (z_{alpha/2} + z_beta) (the same 80 % rule for a
  normal-shaped bootstrap), about n * (half-width / that bound)^2 trials. Exit status 0, printed loudly.

A true zero change is called a regression at most 2.5 % of the time (the interval excludes 0 from
above); ``tests/test_gate_operating.py`` checks both rates by seeded simulation at the printed trials.

Exit status under ``--compare`` (pytest plugin): 1 when a cell regresses; ``inconclusive`` does
not fail (a loud line says the gate could not decide); planner failures alone do not fail
the session (they are benchmark results, already in consistency); errors (infra included) and
failures of other tests still do. Cells present on one side only are reported, never failed.

Beside the cells, one combined row per (planner, model) and metric over the tasks both runs hold:
the mean over tasks of the per-task change (tasks weigh equally; items are never pooled across
tasks), a t interval over the tasks (its spread includes each task's trial noise), and a
task-level sign-flip permutation p-value (:func:`mltb_core.analysis.stats.cluster_sign_flip`).
Combined rows inform; only cells decide the exit status.
"""
from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from scipy.stats import chi2 as _chi2
from tabulate import tabulate

from mltb_core.analysis.results import (TrialRecord, counted_records, group_by, latest_records, normalized_cell,
                                        percentile_cell)
from mltb_core.analysis.stats import (CI, MIN_TRIALS_FOR_MEDIAN_CI, POWER, TrialSample, cluster_sign_flip, diff_ci,
                                      median_standard_error, paired_proportion_diff_ci, powered_half_width,
                                      proportion_diff_ci, rate_interval, t_interval, trials_needed_for_rate_gate,
                                      z_value)
from mltb_core.bench.documents import read_document

__all__ = ["METRICS", "BASELINE_VERSION", "parse_regression_spec", "cell_figures", "save_baseline",
           "load_baseline", "compare_to_baseline", "Comparison", "Delta"]

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

    @property
    def measurable(self) -> bool:
        """An interval the rule may act on (a median needs MIN_TRIALS_FOR_MEDIAN_CI trials per side)."""
        return (self.change.has_interval and (self.metric == "consistency" or self.combined
                                              or min(self.n_baseline, self.n_current) >= MIN_TRIALS_FOR_MEDIAN_CI))

    @property
    def regressed(self) -> bool:
        """A drop is shown (upper bound below 0) and one beyond the tolerance is not excluded."""
        return (self.threshold is not None and self.measurable and self.change.high < 0
                and self.change.low <= -self.threshold)

    @property
    def ok(self) -> bool:
        """Non-inferiority is shown: the lower bound is above -threshold."""
        return self.threshold is not None and self.measurable and self.change.low > -self.threshold

    @property
    def inconclusive(self) -> bool:
        return (self.threshold is not None and self.change.estimate is not None and not self.regressed
                and not self.ok)

    @property
    def verdict(self) -> str:
        if self.threshold is None:
            return ""
        if self.change.estimate is None:
            return f"n/a ({self.note})" if self.note else "n/a"
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


def _consistency_delta(name: str, base: list[TrialRecord], cur: list[TrialRecord], threshold: float | None) -> Delta:
    base_by_seed = {r.seed: r.valid for r in base}
    cur_by_seed = {r.seed: r.valid for r in cur}
    paired = (len(base_by_seed) == len(base) and len(cur_by_seed) == len(cur) and bool(base)
              and base_by_seed.keys() == cur_by_seed.keys())
    base_valid, cur_valid = sum(base_by_seed.values()), sum(cur_by_seed.values())
    if paired:
        change = paired_proportion_diff_ci([(base_by_seed[s], cur_by_seed[s]) for s in sorted(base_by_seed)])
    else:
        change = proportion_diff_ci(cur_valid, len(cur), base_valid, len(base))
    needed = None
    if threshold is not None and base:
        needed = trials_needed_for_rate_gate(_planning_rate(base_valid, len(base)), threshold)
    return Delta(name, "consistency", base_valid / len(base) if base else None,
                 cur_valid / len(cur) if cur else None, change, threshold, len(base), len(cur), paired, needed)


def _median_delta(name: str, metric: str, base: list[TrialRecord], cur: list[TrialRecord],
                  threshold: float | None, seed: int) -> Delta:
    b, c = _median_sample(base, metric), _median_sample(cur, metric)
    estimate = lambda m: m.sample.estimate() if m.sample.n else None  # noqa: E731
    if b.excluded or c.excluded or not b.sample.n or not c.sample.n:
        why = b.excluded or c.excluded or "no values"
        return Delta(name, metric, estimate(b), estimate(c), CI(None, None, None, 0), threshold,
                     b.sample.n, c.sample.n, note=why)
    paired = b.seeds == c.seeds and len(set(b.seeds)) == len(b.seeds)
    shared_rows = len(b.row_seeds | c.row_seeds) == 1
    change = diff_ci(c.sample, b.sample, paired=paired, shared_rows=shared_rows, seed=seed)
    if min(b.sample.n, c.sample.n) < MIN_TRIALS_FOR_MEDIAN_CI:    # too few for a 95 % interval of a median
        change = CI(change.estimate, None, None, change.n, change.level)
    needed = None
    if threshold is not None:
        needed = _median_trials_needed(b.sample, c.sample, change, threshold)
    return Delta(name, metric, b.sample.estimate(), c.sample.estimate(), change, threshold, b.sample.n,
                 c.sample.n, paired, needed)


def _median_trials_needed(base: TrialSample, cur: TrialSample, change: CI, threshold: float) -> int:
    """Trials per side for a drop of ``threshold`` to be flagged (and no change called ok) with power
    POWER: n * (spread / bound)^2 * inflation, bound = threshold * z / (z + z_beta) on the half-width. The
    spread is the larger of the bootstrap half-width and z times Price-Bonett's standard error of the
    difference (a bootstrap of a median is too narrow at small n). The spread comes from these few trials,
    so it is taken at its 80 % upper confidence bound (Browne 1995: inflation (n - 1) / chi2_{0.2, n-1}),
    lest a lucky small sample print too few trials."""
    n = min(base.n, cur.n)
    inflation = (n - 1) / float(_chi2.ppf(1.0 - POWER, n - 1)) if n > 1 else 1.0
    bound = powered_half_width(threshold, change.level)
    spreads = [change.half_width or 0.0]   # none below MIN_TRIALS_FOR_MEDIAN_CI: Price-Bonett's alone
    errors = [median_standard_error(s.values) for s in (base, cur)]
    if all(e is not None for e in errors):
        spreads.append(z_value(change.level) * math.hypot(*errors))
    if max(spreads) == 0.0:
        return MIN_TRIALS_FOR_MEDIAN_CI
    return max(MIN_TRIALS_FOR_MEDIAN_CI, math.ceil(n * (max(spreads) / bound) ** 2 * inflation))


@dataclass
class Comparison:
    deltas: list[Delta]
    only_in_baseline: list[str] = field(default_factory=list)
    only_in_current: list[str] = field(default_factory=list)

    @property
    def inconclusive(self) -> list[Delta]:
        return [d for d in self.deltas if d.inconclusive and not d.combined]

    @property
    def failed(self) -> bool:
        return bool(self.regressions)

    @property
    def regressions(self) -> list[Delta]:
        return [d for d in self.deltas if d.regressed and not d.combined]

    def render(self) -> str:
        """Deltas with intervals as a table, then missing cells and the verdicts."""
        def num(v: float | None, n: int) -> str:
            return "n/a" if v is None else f"{v:.2f} (n={n})"

        def test(d: Delta) -> str:
            if d.change.estimate is None:
                return ""
            if d.combined:
                return f"tasks: t; sign-flip p={d.p_value:.3f}" if d.p_value is not None else "tasks: t"
            return "paired" if d.paired else "unpaired"
        rows = [[d.cell, d.metric, num(d.baseline, d.n_baseline), num(d.current, d.n_current),
                 "n/a" if d.change.estimate is None else ("{:+.2f} [–]".format(d.change.estimate)
                                                          if not d.change.has_interval else
                                                          f"{d.change.estimate:+.2f} [{d.change.low:+.2f}, "
                                                          f"{d.change.high:+.2f}]"),
                 test(d), "" if d.threshold is None else f"-{d.threshold:g}", d.verdict]
                for d in self.deltas]
        lines = ["Comparison with baseline (task|planner|model; change = current - baseline with its 95% interval; "
                 "n = counted trials; 'all tasks' rows: mean over tasks of the per-task change, n = tasks, "
                 "informative only)",
                 tabulate(rows, headers=["cell", "metric", "baseline", "current", "change [95% CI]", "test",
                                         "max drop", "verdict"], disable_numparse=True)]
        if self.only_in_baseline:
            lines.append("not run now (in baseline only): " + ", ".join(self.only_in_baseline))
        if self.only_in_current:
            lines.append("new (no baseline): " + ", ".join(self.only_in_current))
        if self.failed:
            lines.append(f"FAILED: {len(self.regressions)} regression(s) beyond noise: "
                         + "; ".join(f"{d.cell} {d.metric} {d.change.estimate:+.2f} "
                                     f"[{d.change.low:+.2f}, {d.change.high:+.2f}]: a drop is shown and one beyond "
                                     f"-{d.threshold:g} is not excluded" for d in self.regressions))
        gated = [d for d in self.deltas if d.threshold is not None and d.change.estimate is not None and not d.combined]
        if self.inconclusive:
            worst = max((d.trials_needed or 0) for d in self.inconclusive)
            lines.append(
                f"INCONCLUSIVE: {len(self.inconclusive)} of {len(gated)} gated comparisons neither show a regression "
                f"nor exclude a drop of the threshold (need up to ~{worst} trials per cell); for them there is no "
                f"evidence either way. Rule: 'ok' needs the 95% lower bound above -d; trials needed: a true drop "
                f"of d flagged, and no change called ok, with power {POWER:g} (consistency: computed exactly for "
                f"Newcombe's interval at the least favourable rate in the baseline's 95% interval; medians: >= "
                f"{MIN_TRIALS_FOR_MEDIAN_CI} trials and a 95% half-width <= {powered_half_width(1.0):.2f} * d).")
        if not self.failed:
            decided = sum(1 for d in gated if d.ok)
            lines.append(f"no regression shown; {decided} of {len(gated)} gated comparisons shown ok (non-inferior)"
                         + (" (see INCONCLUSIVE above)" if self.inconclusive else ""))
        return "\n".join(lines)


def _combined_deltas(cells: dict[str, Delta], thresholds: dict[str, float], seed: int) -> list[Delta]:
    """Per (planner, model) and metric, the mean over tasks of the per-task changes (tasks are the units)."""
    groups: dict[tuple[str, str, str], list[Delta]] = {}
    for d in cells.values():
        if d.change.estimate is None or d.baseline is None or d.current is None:
            continue
        _, planner, model = d.cell.split("|", 2)
        groups.setdefault((planner, model, d.metric), []).append(d)
    out = []
    for (planner, model, metric), deltas in sorted(groups.items()):
        if len(deltas) < 2:
            continue
        changes = [d.current - d.baseline for d in deltas]
        out.append(Delta(_cell_name("all tasks", planner, model), metric,
                         sum(d.baseline for d in deltas) / len(deltas), sum(d.current for d in deltas) / len(deltas),
                         t_interval(changes), thresholds.get(metric), len(deltas), len(deltas),
                         combined=True, p_value=cluster_sign_flip(changes, seed=seed)))
    return out


def compare_to_baseline(baseline: dict, records: Iterable[TrialRecord], thresholds: dict[str, float] | None = None,
                        seed: int = 0) -> Comparison:
    """Compare ``records`` cell by cell with a loaded baseline; ``thresholds`` from :func:`parse_regression_spec`."""
    thresholds = thresholds or {}
    current = {_cell_name(*key): counted_records(cell)
               for key, cell in group_by(latest_records(records), "task", "planner", "model").items()}
    base_cells = {name: counted_records(_baseline_records(cell)) for name, cell in baseline["cells"].items()}
    deltas = []
    for name in sorted(set(current) & set(base_cells)):
        base, cur = base_cells[name], current[name]
        if not base and not cur:
            continue
        deltas.append(_consistency_delta(name, base, cur, thresholds.get("consistency")))
        for metric in ("normalized", "percentile"):
            delta = _median_delta(name, metric, base, cur, thresholds.get(metric), seed)
            if delta.baseline is not None or delta.current is not None or delta.threshold is not None:
                deltas.append(delta)
    deltas += _combined_deltas({f"{d.cell}#{d.metric}": d for d in deltas}, thresholds, seed)
    return Comparison(deltas, sorted(set(base_cells) - set(current)), sorted(set(current) - set(base_cells)))
