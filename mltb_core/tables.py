"""The summary tables, in the paper's shape, built from trial records.

Tables are data first (:class:`Table`: title, headers, rows) so the terminal summary, the
markdown leaderboard and the HTML report all render the same figures. Every function sorts
its input, so the output depends only on the set of records, never on completion order.

Definitions (the paper's, Section 5):

- consistency of a (task, planner, model) cell = valid trials / counted trials, where infra
  errors are not counted at all;
- percentile of a cell = the median leaderboard percentile over counted trials, a trial
  without a valid submission counting as 0; tasks without a leaderboard (replicas) show n/a;
- overall = the median over tasks of the cell figures; its 95 % CI comes from a bootstrap
  that resamples trials within each task (:func:`mltb_core.stats.grouped_bootstrap_ci`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

from tabulate import tabulate

from .results import (SYNTHETIC_LABEL, TrialRecord, consistency_values, counted_records, group_by,
                      latest_records, model_label, percentile_values)
from .stats import bootstrap_ci, grouped_bootstrap_ci

__all__ = ["Table", "PLANNER_ORDER", "STAGES", "build_tables", "render_tables", "render_summary",
           "consistency_table", "percentile_table", "cost_table", "funnel_table", "infra_table", "variant_labels"]

# The paper's column order; planners not listed follow alphabetically.
PLANNER_ORDER = ("react", "lats", "mcts_outcome", "mcts_shaped", "hierarchical_mcts")
STAGES = 10


@dataclass
class Table:
    """A titled table; ``key`` is a stable machine name (used for summary.json and HTML anchors)."""
    key: str
    title: str
    headers: list[str]
    rows: list[list]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"key": self.key, "title": self.title, "headers": self.headers, "rows": self.rows,
                "notes": self.notes}

    def render(self, tablefmt: str = "simple") -> str:
        return tabulate(self.rows, headers=self.headers, tablefmt=tablefmt, floatfmt=".2f",
                        disable_numparse=True)


def _planner_rank(planner: str) -> tuple:
    return (PLANNER_ORDER.index(planner), "") if planner in PLANNER_ORDER else (len(PLANNER_ORDER), planner)


def variant_labels(records: Iterable[TrialRecord]) -> dict[tuple[str, str, str], str]:
    """Column label per (model, planner, config_hash): the planner name, plus the hash when one
    planner ran under several configurations (ablations merged into one report)."""
    hashes: dict[tuple[str, str], set[str]] = {}
    for r in records:
        hashes.setdefault((r.model, r.planner), set()).add(r.config_hash)
    return {(model, planner, h): (planner if len(hs) == 1 else f"{planner}@{h[:6]}")
            for (model, planner), hs in hashes.items() for h in hs}


def _variants(records: list[TrialRecord]) -> list[tuple[str, str]]:
    """Sorted (planner, config_hash) pairs present in ``records``."""
    return sorted({(r.planner, r.config_hash) for r in records}, key=lambda v: (_planner_rank(v[0]), v[1]))


def _fmt(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _models(records: list[TrialRecord]) -> list[tuple[str, bool]]:
    synthetic = {r.model: r.synthetic for r in records}
    return sorted(synthetic.items())


def _task_by_planner_table(records: list[TrialRecord], key: str, what: str,
                           values_of: Callable[[list[TrialRecord]], list[float]], within: str,
                           seed: int) -> list[Table]:
    """One table per model: rows are tasks, columns planner variants, cells ``within`` of values_of."""
    tables = []
    labels = variant_labels(records)
    for model, synthetic in _models(records):
        mine = [r for r in records if r.model == model]
        variants = _variants(mine)
        tasks = sorted({r.task for r in mine})
        cells = group_by(mine, "task", "planner", "config_hash")
        headers = ["task"] + [labels[(model, p, h)] for p, h in variants]
        rows = []
        for task in tasks:
            row = [task]
            for planner, h in variants:
                ci = bootstrap_ci(values_of(cells.get((task, planner, h), [])), within, seed=seed)
                row.append(_fmt(ci.estimate))
            rows.append(row)
        overall = ["overall median"]
        interval = ["95% CI"]
        for i, (planner, h) in enumerate(variants):
            groups = [values_of(cells.get((task, planner, h), [])) for task in tasks]
            ci = grouped_bootstrap_ci(groups, within, "median", seed=seed + i)
            overall.append(_fmt(ci.estimate))
            interval.append("n/a" if ci.estimate is None else f"[{ci.low:.2f}, {ci.high:.2f}]")
        rows += [overall, interval]
        title = f"{what} — model {model_label(model, synthetic)}"
        notes = [f"{SYNTHETIC_LABEL}: figures measure the harness, not a language model"] if synthetic else []
        tables.append(Table(f"{key}:{model}", title, headers, rows, notes))
    return tables


def consistency_table(records: list[TrialRecord], seed: int = 0) -> list[Table]:
    """Consistency (valid / counted trials) per task × planner, one table per model."""
    return _task_by_planner_table(records, "consistency", "Consistency (valid trials / trials)",
                                  consistency_values, "mean", seed)


def percentile_table(records: list[TrialRecord], seed: int = 0) -> list[Table]:
    """Median leaderboard percentile per task × planner, one table per model."""
    return _task_by_planner_table(records, "percentile", "Median leaderboard percentile",
                                  percentile_values, "median", seed)


_COST_HEADERS = ["model", "planner", "task", "trials", "tokens in", "tokens out", "LLM calls", "cost $",
                 "wall s"]


def _cost_row(label: list[str], records: list[TrialRecord]) -> list:
    return label + [str(len(records)), str(sum(r.tokens_in for r in records)),
                    str(sum(r.tokens_out for r in records)), str(sum(r.llm_calls for r in records)),
                    f"{sum(r.cost_usd for r in records):.4f}", f"{sum(r.wall_seconds for r in records):.1f}"]


def cost_table(records: list[TrialRecord]) -> Table:
    """Tokens, dollars, LLM calls and wall time per model × planner × task, planner subtotals and a total.

    Infra errors are included: they cost money and time even though they never count as trials.
    """
    labels = variant_labels(records)
    rows = []
    for model, synthetic in _models(records):
        mine = [r for r in records if r.model == model]
        name = model_label(model, synthetic)
        for planner, h in _variants(mine):
            cell = [r for r in mine if (r.planner, r.config_hash) == (planner, h)]
            label = labels[(model, planner, h)]
            for (task,), task_records in group_by(cell, "task").items():
                rows.append(_cost_row([name, label, task], task_records))
            rows.append(_cost_row([name, label, "(all tasks)"], cell))
    rows.append(_cost_row(["total", "", ""], records))
    return Table("cost", "Cost per planner and task", list(_COST_HEADERS), rows)


def funnel_table(records: list[TrialRecord]) -> Table:
    """How many counted trials reached each of the ten stages, per model × planner (where trials die)."""
    labels = variant_labels(records)
    stage_names: dict[int, str] = {}
    for r in records:
        if r.stage_name and r.stage_reached:
            stage_names.setdefault(r.stage_reached, r.stage_name)
    headers = ["model", "planner", "trials"] + [f"≥{s}" for s in range(1, STAGES + 1)]
    rows = []
    for model, synthetic in _models(records):
        mine = counted_records(r for r in records if r.model == model)
        for planner, h in _variants(mine):
            cell = [r for r in mine if (r.planner, r.config_hash) == (planner, h)]
            reached = [sum(1 for r in cell if r.stage_reached >= s) for s in range(1, STAGES + 1)]
            rows.append([model_label(model, synthetic), labels[(model, planner, h)], str(len(cell))]
                        + [str(n) for n in reached])
    notes = ["stages: " + "; ".join(f"{s} {stage_names[s]}" for s in sorted(stage_names))] if stage_names else []
    return Table("funnel", "Stage funnel: trials reaching each stage", headers, rows, notes)


def infra_table(records: list[TrialRecord]) -> Table | None:
    """Infrastructure errors, counted apart (None when there were none)."""
    errors = [r for r in records if r.outcome == "infra_error"]
    if not errors:
        return None
    rows = []
    for (task, model, planner), cell in group_by(errors, "task", "model", "planner").items():
        first = (cell[0].error or cell[0].stop_reason or "").strip().splitlines()
        rows.append([task, model, planner, str(len(cell)), (first[0] if first else "")[:80]])
    return Table("infra", "Infrastructure errors (not counted against consistency)",
                 ["task", "model", "planner", "errors", "first error"], rows)


def build_tables(records: Iterable[TrialRecord], seed: int = 0) -> list[Table]:
    """All summary tables for a set of records (deduplicated and sorted first)."""
    records = latest_records(records)
    if not records:
        return []
    tables = consistency_table(records, seed) + percentile_table(records, seed)
    tables += [cost_table(records), funnel_table(records)]
    infra = infra_table(records)
    if infra is not None:
        tables.append(infra)
    return tables


def render_tables(tables: list[Table], tablefmt: str = "simple") -> str:
    """Tables as text, each under its title, notes below."""
    parts = []
    for table in tables:
        block = [table.title, table.render(tablefmt)] + table.notes
        parts.append("\n".join(block))
    return "\n\n".join(parts)


def render_summary(records: Iterable[TrialRecord], seed: int = 0) -> str:
    """The terminal summary: every table, or a one-line note when there are no records."""
    tables = build_tables(records, seed)
    return render_tables(tables) if tables else "no trial records"
