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
``consistency:-0.05,percentile:-2`` (a threshold d is the largest tolerated drop; its sign is ignored):

- ``REGRESSION``: the interval's upper bound is below -d (even the most favourable reading of the
  noise shows a drop larger than allowed). For medians this needs at least
  ``MIN_TRIALS_FOR_MEDIAN_CI`` trials per side (below that no 95 % interval of a median exists).
- ``underpowered``: no regression shown, but these trial counts could not show one of size d:
  consistency when n < (z_{alpha/2} + z_beta)^2 * 2 p (1 - p) / d^2 (alpha = 0.05, power 1 - beta = 0.8,
  p = the baseline rate, Jeffreys-adjusted (valid + 1/2) / (n + 1) so 0 % and 100 % still need trials);
  medians when n < MIN_TRIALS_FOR_MEDIAN_CI or the interval's half-width exceeds
  d * z_{alpha/2} / (z_{alpha/2} + z_beta) (the same 80 % power rule), needing about
  n * (half-width / that bound)^2 trials. The verdict names the trials per cell needed.
- ``ok``: a drop of d would have been visible, and none is.

Exit status under ``--compare`` (pytest plugin): 1 when a cell regresses; ``underpowered`` does
not fail (a loud line says the gate could not measure it); planner failures alone do not fail
the session (they are benchmark results, already in consistency); errors (infra included) and
failures of other tests still do. Cells present on one side only are reported, never failed.
"""
from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from tabulate import tabulate

from mltb_core.analysis.results import (NO_LEADERBOARD, TrialRecord, counted_records, group_by, latest_records, normalized_values,
                      percentile_cell)
from mltb_core.analysis.stats import (CI, MIN_TRIALS_FOR_MEDIAN_CI, POWER, TrialSample, bootstrap_ci, diff_ci,
                    paired_proportion_diff_ci, powered_half_width, proportion_diff_ci, trials_needed_for_rate_drop,
                    wilson_interval)

__all__ = ["METRICS", "BASELINE_VERSION", "parse_regression_spec", "cell_figures", "save_baseline",
           "load_baseline", "compare_to_baseline", "Comparison", "Delta"]

BASELINE_VERSION = 2
METRICS = ("consistency", "percentile", "normalized")
# What a baseline keeps of each trial record: enough to recompute every figure the same way.
_RECORD_FIELDS = ("task", "planner", "model", "trial", "seed", "config_hash", "outcome", "valid", "percentile",
                  "normalized", "row_seed", "percentile_samples")
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
    if metric == "percentile":
        cell = percentile_cell(counted)
        return _Median(cell.seeds, TrialSample(cell.values, cell.replicates),
                       {s for s in cell.row_seeds if s is not None}, cell.excluded)
    if counted and not normalized_values(counted):
        return _Median([], TrialSample([]), set(), NO_LEADERBOARD)
    kept = [r for r in counted if not r.valid or r.normalized is not None]
    return _Median([r.seed for r in kept], TrialSample([float(r.normalized) if r.valid else 0.0 for r in kept]),
                   set())


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
                         "consistency": {**wilson_interval(valid, len(counted)).to_dict(), "valid": valid,
                                         "interval": "wilson"}}
        for metric in ("percentile", "normalized"):
            median = _median_sample(cell, metric)
            ci = bootstrap_ci(median.sample.values, replicates=median.sample.replicates.tolist(), seed=seed)
            figures[metric] = {**ci.to_dict(), "excluded": median.excluded,
                               "interval": "bootstrap over trials" + (" and held-out rows" if median.row_seeds else "")}
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
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"baseline file {path} does not exist") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"baseline file {path} is not JSON: {exc}") from None
    if not isinstance(data, dict) or "cells" not in data:
        raise ValueError(f"baseline file {path} is not an mltb baseline (version {BASELINE_VERSION})")
    if data.get("version") != BASELINE_VERSION:
        raise ValueError(f"baseline file {path} has format version {data.get('version')}, this mltb reads "
                         f"version {BASELINE_VERSION}: regenerate it with --save-baseline")
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
    trials_needed: int | None = None   # per cell, to detect a drop of ``threshold``; None when enough
    note: str = ""

    @property
    def measurable(self) -> bool:
        """Enough trials for an interval the rule may act on (a median needs MIN_TRIALS_FOR_MEDIAN_CI)."""
        return self.metric == "consistency" or min(self.n_baseline, self.n_current) >= MIN_TRIALS_FOR_MEDIAN_CI

    @property
    def regressed(self) -> bool:
        return (self.threshold is not None and self.change.high is not None and self.measurable
                and self.change.high < -self.threshold)

    @property
    def underpowered(self) -> bool:
        return (self.threshold is not None and self.change.estimate is not None and not self.regressed
                and self.trials_needed is not None)

    @property
    def verdict(self) -> str:
        if self.threshold is None:
            return ""
        if self.change.estimate is None:
            return f"n/a ({self.note})" if self.note else "n/a"
        if self.regressed:
            return "REGRESSION"
        if self.underpowered:
            return f"underpowered (need ~{self.trials_needed} trials/cell)"
        return "ok"


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
        rate = (base_valid + 0.5) / (len(base) + 1)
        required = trials_needed_for_rate_drop(rate, threshold)
        needed = required if min(len(base), len(cur)) < required else None
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
    needed = None
    n = min(b.sample.n, c.sample.n)
    if threshold is not None:
        bound = powered_half_width(threshold, change.level)
        required = max(MIN_TRIALS_FOR_MEDIAN_CI, math.ceil(n * (change.half_width / bound) ** 2))
        needed = required if n < MIN_TRIALS_FOR_MEDIAN_CI or change.half_width > bound else None
    return Delta(name, metric, b.sample.estimate(), c.sample.estimate(), change, threshold, b.sample.n,
                 c.sample.n, paired, needed)


@dataclass
class Comparison:
    deltas: list[Delta]
    only_in_baseline: list[str] = field(default_factory=list)
    only_in_current: list[str] = field(default_factory=list)

    @property
    def regressions(self) -> list[Delta]:
        return [d for d in self.deltas if d.regressed]

    @property
    def underpowered(self) -> list[Delta]:
        return [d for d in self.deltas if d.underpowered]

    @property
    def failed(self) -> bool:
        return bool(self.regressions)

    def render(self) -> str:
        """Deltas with intervals as a table, then missing cells and the verdicts."""
        def num(v: float | None, n: int) -> str:
            return "n/a" if v is None else f"{v:.2f} (n={n})"
        rows = [[d.cell, d.metric, num(d.baseline, d.n_baseline), num(d.current, d.n_current),
                 "n/a" if d.change.estimate is None else
                 f"{d.change.estimate:+.2f} [{d.change.low:+.2f}, {d.change.high:+.2f}]",
                 "" if d.change.estimate is None else ("paired" if d.paired else "unpaired"),
                 "" if d.threshold is None else f"-{d.threshold:g}", d.verdict]
                for d in self.deltas]
        lines = ["Comparison with baseline (task|planner|model; change = current - baseline with its 95% interval; "
                 "n = counted trials)",
                 tabulate(rows, headers=["cell", "metric", "baseline", "current", "change [95% CI]", "test",
                                         "max drop", "verdict"], disable_numparse=True)]
        if self.only_in_baseline:
            lines.append("not run now (in baseline only): " + ", ".join(self.only_in_baseline))
        if self.only_in_current:
            lines.append("new (no baseline): " + ", ".join(self.only_in_current))
        if self.failed:
            lines.append(f"FAILED: {len(self.regressions)} regression(s) beyond noise: "
                         + "; ".join(f"{d.cell} {d.metric} {d.change.estimate:+.2f} "
                                     f"(CI upper {d.change.high:+.2f} < -{d.threshold:g})"
                                     for d in self.regressions))
        gated = [d for d in self.deltas if d.threshold is not None and d.change.estimate is not None]
        if self.underpowered:
            worst = max(d.trials_needed for d in self.underpowered)
            lines.append(
                f"UNDERPOWERED: {len(self.underpowered)} of {len(gated)} gated comparisons cannot detect the allowed "
                f"drop with these trial counts (need up to ~{worst} trials per cell); for them 'no regression' "
                f"means 'not measurable', not 'ok'. Rule: consistency n >= (z_a/2 + z_b)^2 * 2p(1-p) / d^2 "
                f"(alpha 0.05, power {POWER:g}, p = baseline rate (valid+1/2)/(n+1)); medians need "
                f">= {MIN_TRIALS_FOR_MEDIAN_CI} trials and a 95% half-width <= {powered_half_width(1.0):.2f} * d.")
        if not self.failed:
            lines.append("no regression beyond noise" + (" (see UNDERPOWERED above)" if self.underpowered else ""))
        return "\n".join(lines)


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
        for metric in ("percentile", "normalized"):
            delta = _median_delta(name, metric, base, cur, thresholds.get(metric), seed)
            if delta.baseline is not None or delta.current is not None or delta.threshold is not None:
                deltas.append(delta)
    return Comparison(deltas, sorted(set(base_cells) - set(current)), sorted(set(current) - set(base_cells)))
