"""Baselines and regression gating for planner changes in CI.

A baseline (``--save-baseline FILE``) holds, per (task, planner, model) cell, the figures and
the raw per-trial values they came from: consistency, median leaderboard percentile and median
normalized score, each with a bootstrap 95 % CI, and n (counted trials; infra errors excluded).

``--compare FILE --fail-on-regression SPEC`` recomputes the same figures for the current run and,
cell by cell, bootstraps the change ``current - baseline`` (both samples resampled independently;
mean of 0/1 validity for consistency, median for percentile and normalized score).

Regression rule, precisely: SPEC is ``metric:threshold`` pairs, e.g. ``consistency:-0.05,percentile:-2``;
a threshold is the largest tolerated drop (the sign is ignored: ``-2`` and ``2`` both mean "a drop of
more than 2"). A cell regresses on a metric when the **upper** bound of the 95 % CI of the change is
below ``-|threshold|``: even the most favourable plausible reading of the noise shows a drop larger
than allowed. A drop within the noise passes, so small trial counts gate only on large, clear drops.
Cells present on one side only are reported, never failed.

Exit status under ``--compare`` (pytest plugin): 1 when a cell regresses; planner failures alone do
not fail the session (they are benchmark results, already in consistency); errors (infra included)
and failures of other tests still do.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from tabulate import tabulate

from .results import (TrialRecord, consistency_values, counted_records, group_by, latest_records,
                      normalized_values, percentile_values)
from .stats import CI, bootstrap_ci, bootstrap_diff_ci

__all__ = ["METRICS", "BASELINE_VERSION", "parse_regression_spec", "cell_figures", "save_baseline",
           "load_baseline", "compare_to_baseline", "Comparison", "Delta"]

BASELINE_VERSION = 1

# metric name -> (per-trial values, the statistic the figure uses)
METRICS: dict[str, tuple[Callable[[list[TrialRecord]], list[float]], str]] = {
    "consistency": (consistency_values, "mean"),
    "percentile": (percentile_values, "median"),
    "normalized": (normalized_values, "median"),
}


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
    if not thresholds:
        raise ValueError(f"empty regression spec {spec!r}")
    return thresholds


def cell_figures(records: Iterable[TrialRecord], seed: int = 0) -> dict[str, dict]:
    """Per (task, planner, model) cell: n, infra errors, and per metric its CI and raw values."""
    records = latest_records(records)
    cells: dict[str, dict] = {}
    for (task, planner, model), cell in group_by(records, "task", "planner", "model").items():
        figures: dict = {"task": task, "planner": planner, "model": model,
                         "n": len(counted_records(cell)),
                         "infra_errors": sum(1 for r in cell if r.outcome == "infra_error"),
                         "synthetic": any(r.synthetic for r in cell),
                         "config_hashes": sorted({r.config_hash for r in cell})}
        for metric, (values_of, stat) in METRICS.items():
            values = values_of(cell)
            figures[metric] = {**bootstrap_ci(values, stat, seed=seed).to_dict(), "values": values}
        cells[_cell_name(task, planner, model)] = figures
    return cells


def save_baseline(path: Path, records: Iterable[TrialRecord], seed: int = 0) -> dict:
    """Write the baseline JSON for ``records`` to ``path``; returns what was written."""
    data = {"version": BASELINE_VERSION, "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "cells": cell_figures(records, seed)}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
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
    if not isinstance(data, dict) or data.get("version") != BASELINE_VERSION or "cells" not in data:
        raise ValueError(f"baseline file {path} is not an mltb baseline (version {BASELINE_VERSION})")
    return data


@dataclass
class Delta:
    """The change of one metric in one cell."""
    cell: str
    metric: str
    baseline: float | None
    current: float | None
    change: CI
    threshold: float | None      # tolerated drop (positive), None when the metric is not gated

    @property
    def regressed(self) -> bool:
        return (self.threshold is not None and self.change.high is not None
                and self.change.high < -self.threshold)


@dataclass
class Comparison:
    deltas: list[Delta]
    only_in_baseline: list[str] = field(default_factory=list)
    only_in_current: list[str] = field(default_factory=list)

    @property
    def regressions(self) -> list[Delta]:
        return [d for d in self.deltas if d.regressed]

    @property
    def failed(self) -> bool:
        return bool(self.regressions)

    def render(self) -> str:
        """Deltas with CIs as a table, then missing cells and the verdict."""
        def num(v: float | None) -> str:
            return "n/a" if v is None else f"{v:.2f}"
        rows = [[d.cell, d.metric, num(d.baseline), num(d.current), num(d.change.estimate),
                 "n/a" if d.change.low is None else f"[{d.change.low:.2f}, {d.change.high:.2f}]",
                 "" if d.threshold is None else f"-{d.threshold:g}",
                 "REGRESSION" if d.regressed else ("ok" if d.threshold is not None else "")]
                for d in self.deltas]
        lines = ["Comparison with baseline (task|planner|model; change = current - baseline, 95% CI)",
                 tabulate(rows, headers=["cell", "metric", "baseline", "current", "change", "95% CI",
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
        else:
            lines.append("no regression beyond noise")
        return "\n".join(lines)


def compare_to_baseline(baseline: dict, records: Iterable[TrialRecord], thresholds: dict[str, float] | None = None,
                        seed: int = 0) -> Comparison:
    """Compare ``records`` cell by cell with a loaded baseline; ``thresholds`` from :func:`parse_regression_spec`."""
    thresholds = thresholds or {}
    current = cell_figures(records, seed)
    base_cells = baseline["cells"]
    deltas = []
    for name in sorted(set(current) & set(base_cells)):
        for metric, (_, stat) in METRICS.items():
            base_values = base_cells[name].get(metric, {}).get("values", [])
            cur_values = current[name][metric]["values"]
            if not base_values and not cur_values:
                continue
            change = bootstrap_diff_ci(cur_values, base_values, stat, seed=seed)
            deltas.append(Delta(name, metric, base_cells[name][metric].get("estimate"),
                                current[name][metric]["estimate"], change, thresholds.get(metric)))
    return Comparison(deltas, sorted(set(base_cells) - set(current)), sorted(set(current) - set(base_cells)))
