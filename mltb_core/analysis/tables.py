"""The summary tables, in the paper's shape, built from trial records.

Tables are data first (:class:`Table`: title, headers, rows) so the terminal summary, the
markdown leaderboard and the HTML report all render the same figures. Every function sorts
its input, so the output depends only on the set of records, never on completion order.

Definitions (the paper's, Section 5), and what every printed number is computed over:

- consistency of a (task, planner, model) cell = valid trials / counted trials, where infra
  errors are not counted at all; the cell shows ``valid/counted``, the rate and its exact 95 %
  Clopper-Pearson interval;
- normalized score of a cell = the median over counted trials of the normalized score (0 = the
  task's trivial baseline, 1 = perfect; a failed trial counts 0), on every task: the quality figure
  the whole benchmark shares;
- percentile of a cell = the median leaderboard percentile over counted trials, a trial
  without a valid submission counting as 0, on the tasks with a comparable board (the others are
  excluded, and the table names them and why);
- a median's 95 % interval is the exact order-statistic interval over trials, its ends taken over
  the held-out-row resamples (:func:`mltb_core.analysis.stats.median_interval`); below
  ``MIN_TRIALS_FOR_MEDIAN_CI`` values there is none (the cell prints n and "–");
- overall = the median over tasks of the per-task figures, over the k tasks that have one (the row
  says k), with the exact order-statistic interval over those k figures
  (:func:`mltb_core.analysis.stats.clustered_ci`).
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from tabulate import tabulate

from mltb_core.analysis.records import Outcome, TrialRecord
from mltb_core.analysis.results import (QUALITY_FLOOR_NOTE, PercentileCell, counted_records, group_by,
                                        latest_records, normalized_cell, percentile_cell)
from mltb_core.analysis.labels import SYNTHETIC_LABEL, model_label
from mltb_core.analysis.safety import markdown as markdown_text, one_line as display_text, terminal_text
from mltb_core.analysis.stats import (MIN_TRIALS_FOR_MEDIAN_CI, CI, RateSample, TrialSample, clustered_ci,
                                      pass_at_k, rate_interval, reachable_k)

__all__ = ["Table", "planner_rank", "build_tables", "render_tables", "render_summary",
           "consistency_table", "pass_at_k_table", "percentile_table", "normalized_table", "median_cell_text",
           "overall_text", "task_baselines", "cost_table", "funnel_table", "infra_table",
           "variant_labels", "entry_label", "entry_order", "markdown_label", "compute_rows", "COMPUTE_MEASURES", "COMPUTE_NOTE",
           "policy_assumptions", "NOTES_ABOVE", "notes_not_given", "note_key"]

MARKDOWN_FORMATS = ("github", "pipe")


@dataclass
class Table:
    """A titled table; ``key`` is a stable machine name (used for summary.json and HTML anchors).

    Title, headers and cells hold plain text; what a records file or a solver supplied is declared, and made
    safe when the table is rendered (Markdown escapes, a terminal loses control characters; HTML escapes
    everything): ``untrusted`` lists such columns, ``untrusted_text`` such strings inside the title and headers
    (model names).
    """
    key: str
    title: str
    headers: list[str]
    rows: list[list]
    notes: list[str] = field(default_factory=list)
    untrusted: tuple[int, ...] = ()
    untrusted_text: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {"key": self.key, "title": self.title, "headers": self.headers, "rows": self.rows,
                "notes": self.notes}

    def _within(self, text: str, tablefmt: str) -> str:
        # every occurrence of every part, overlaps included (a part may begin inside mltb's own words or inside
        # another part), merged into spans made safe once each: a span escaped twice would be harmed (a doubled
        # backslash frees the character after it), a span missed left raw
        parts = {p for p in self.untrusted_text if p}
        if not parts or tablefmt == "html":
            return text
        spans: list[list[int]] = []
        for start, end in sorted((i, i + len(p)) for p in parts for i in _occurrences(text, p)):
            if spans and start < spans[-1][1]:
                spans[-1][1] = max(spans[-1][1], end)
            else:
                spans.append([start, end])
        out, done = [], 0
        for start, end in spans:
            out += [text[done:start], _made_safe(text[start:end], tablefmt, keep_edges=True)]
            done = end
        return "".join(out) + text[done:]

    def notes_for(self, tablefmt: str) -> list[str]:
        """The notes as ``tablefmt`` shows them (Markdown or a terminal; HTML renders them itself)."""
        return [self._within(note, tablefmt) for note in self.notes]

    def title_for(self, tablefmt: str) -> str:
        """The title as ``tablefmt`` (a tabulate format) shows it, what came from records made safe."""
        return self._within(self.title, tablefmt)

    def render(self, tablefmt: str = "simple") -> str:
        rows, headers = self.rows, self.headers
        if tablefmt != "html":
            rows = [[_made_safe(str(c), tablefmt) if i in self.untrusted else c for i, c in enumerate(row)]
                    for row in rows]
            headers = [self._within(h, tablefmt) for h in headers]
        return tabulate(rows, headers=headers, tablefmt=tablefmt, floatfmt=".2f", disable_numparse=True)


def _made_safe(text: str, tablefmt: str, keep_edges: bool = False) -> str:
    """Untrusted text for a table in ``tablefmt``: escaped for Markdown, one line without control characters
    for a terminal (HTML is escaped by tabulate and Jinja2). ``keep_edges``: a part of a longer text keeps a
    space at each end where it had whitespace (making it safe strips its ends)."""
    core = text.strip() if keep_edges else text
    safe = markdown_label(core) if tablefmt in MARKDOWN_FORMATS else terminal_text(core)
    if keep_edges:
        safe = (" " if text[:1].isspace() else "") + safe + (" " if text[-1:].isspace() and core else "")
    return safe


def _occurrences(text: str, part: str):
    """Where ``part`` starts in ``text``, overlapping occurrences included."""
    at = text.find(part)
    while at >= 0:
        yield at
        at = text.find(part, at + 1)


def planner_rank(planner: str) -> tuple:
    """Sort key of a planner column: the registry's order (the built-ins in the paper's column order, then
    plug-ins), then planners no longer registered (records of an uninstalled plug-in) by name."""
    from mltb_core.planners import planner_names   # the registry (imports the planners)

    order = planner_names()
    return (order.index(planner), "") if planner in order else (len(order), planner)


def variant_labels(records: Iterable[TrialRecord]) -> dict[tuple[str, str, str], str]:
    """Column label per (model, planner, config_hash): the planner name, plus the hash when one
    planner ran under several configurations (ablations merged into one report)."""
    hashes: dict[tuple[str, str], set[str]] = {}
    for r in records:
        hashes.setdefault((r.model, r.planner), set()).add(r.config_hash)
    return {(model, planner, h): (planner if len(hs) == 1 else f"{planner}@{h[:_unique_prefix(hs)]}")
            for (model, planner), hs in hashes.items() for h in hs}


def _unique_prefix(hashes: set[str], shortest: int = 6) -> int:
    """The shortest prefix length (at least ``shortest``) that tells ``hashes`` apart: two labels alike would
    pool two configurations in every section that groups by label."""
    width = shortest
    while len({h[:width] for h in hashes}) < len(hashes) and width < max(map(len, hashes)):
        width += 1
    return width


def entry_label(records: Iterable[TrialRecord]) -> Callable[[TrialRecord], str]:
    """What a report compares, as the label of a record's entry: its column label (:func:`variant_labels`),
    with the model when the records hold several. Sections that pool trials per entry group by this, so a
    merged report (an ablation beside the main run) never pools two configurations or two models."""
    records = list(records)
    labels = variant_labels(records)
    several_models = len({r.model for r in records}) > 1

    def label(record: TrialRecord) -> str:
        text = labels[(record.model, record.planner, record.config_hash)]
        return f"{text} · {record.model}" if several_models else text
    return label


# no character here is active in Markdown on its own (parentheses make a link only after an escaped ']')
_PLAIN_LABEL = re.compile(r"[A-Za-z0-9_.@:·/ (),-]{1,200}")
_EMPHASIS = re.compile(r"__|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")    # '_' that can open or close emphasis


def markdown_label(label: str) -> str:
    """An entry label for Markdown: as it is when it holds only the characters planner names, hashes and plain
    model names use (no Markdown escapes to read in the common case), else escaped (a model name comes from a
    records file)."""
    return label if _PLAIN_LABEL.fullmatch(label) and not _EMPHASIS.search(label) else markdown_text(label)


def entry_order(records: Iterable[TrialRecord], label: Callable[[TrialRecord], str]) -> list[str]:
    """The entries' labels in the tables' order: planners in the registry's, then model and configuration."""
    keys = {label(r): (*planner_rank(r.planner), r.model, r.config_hash) for r in records}
    return sorted(keys, key=lambda name: keys[name])


def _variants(records: list[TrialRecord]) -> list[tuple[str, str]]:
    """Sorted (planner, config_hash) pairs present in ``records``."""
    return sorted({(r.planner, r.config_hash) for r in records}, key=lambda v: (planner_rank(v[0]), v[1]))


def _fmt(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _interval(ci: CI, digits: int) -> str:
    return ci.format(digits)


def median_cell_text(cell: PercentileCell, digits: int) -> str:
    """'61.0 [40.2, 80.1] n=8, 6 valid', or '61.0 [–] n=4 < 6' when n is too small for an interval."""
    ci = TrialSample(cell.values, cell.replicates).interval()
    extra = f", {cell.unscored} valid unscored" if cell.unscored else ""
    if not ci.has_interval:
        return f"{ci.format(digits)} n={ci.n} < {MIN_TRIALS_FOR_MEDIAN_CI}, {cell.scored} valid{extra}"
    return f"{ci.format(digits)} n={ci.n}, {cell.scored} valid{extra}"


def overall_text(ci: CI, tasks: int, digits: int) -> str:
    """The overall row's cell: 'est [low, high] (k=6 of 6)'; '–' and why below the tasks an interval needs."""
    if ci.estimate is None:
        return "n/a"
    short = f" < {MIN_TRIALS_FOR_MEDIAN_CI}" if not ci.has_interval else ""
    return f"{ci.format(digits)} (k={ci.n}{short} of {tasks})"


def _models(records: list[TrialRecord]) -> list[tuple[str, bool]]:
    synthetic = {r.model: r.synthetic for r in records}
    return sorted(synthetic.items())


def policy_assumptions(model: str) -> str | None:
    """For the synthetic policy ``sim[:skill]``, its rates that can order planners (printed beside every
    ordering it produces: they are assumptions, not findings); None for any other model or a bad skill."""
    name, _, arg = model.partition(":")
    if name != "sim":
        return None
    from mltb_core.llm.backends import SimSpec
    from mltb_core.llm.sim import ordering_assumptions

    try:
        settings = SimSpec().parse(arg)
        return ordering_assumptions(settings.skill, settings.neutral)
    except ValueError:
        return None


def _notes(model: str, synthetic: bool, *notes: str) -> list[str]:
    assumptions = policy_assumptions(model) if synthetic else None
    return list(notes) + ([f"{SYNTHETIC_LABEL.strip('()')}: figures measure the harness, not a language model"]
                          if synthetic else []) + ([assumptions] if assumptions else [])


_TITLE_SETTINGS = ("toolset", "board")


def _settings(records: list[TrialRecord]) -> str:
    """' · toolset paper · board public': the run-wide settings a reader needs next to the figures."""
    parts = [f"{name} {'/'.join(values)}" for name, values in _setting_values(records).items() if values]
    unconfined = sum(is_unconfined(r) for r in records)
    if unconfined:   # the user opted out of Landlock: the reader must see it next to every figure
        parts.append(f"UNCONFINED tool workers in {unconfined} of {len(records)} trials (no Landlock; opted in)")
    return "".join(f" · {part}" for part in parts)


def _setting_values(records: list[TrialRecord]) -> dict[str, list[str]]:
    """Each title setting's values in ``records``, sorted (text a records file wrote)."""
    return {name: sorted({str(getattr(r, name)) for r in records if getattr(r, name, None)})
            for name in _TITLE_SETTINGS}


def _title_text(model: str, records: list[TrialRecord]) -> tuple[str, ...]:
    """What a records file wrote into a per-model table's title: the model name and the settings' values."""
    return (model, *(value for values in _setting_values(records).values() for value in values))


def is_unconfined(record: TrialRecord) -> bool:
    """The trial's tool worker ran without Landlock (``--unconfined`` on a machine without it)."""
    return str(record.extra.get("confinement", "")).startswith("none")


def _per_model(records: list[TrialRecord]):
    """(model, synthetic, its records, task list, variants, column headers, cells) per model."""
    labels = variant_labels(records)
    for model, synthetic in _models(records):
        mine = [r for r in records if r.model == model]
        variants = _variants(mine)
        headers = [labels[(model, p, h)] for p, h in variants]
        yield (model, synthetic, sorted({r.task for r in mine}), variants, headers,
               group_by(mine, "task", "planner", "config_hash"))


def consistency_table(records: list[TrialRecord]) -> list[Table]:
    """Consistency (valid / counted trials) per task × planner, one table per model."""
    tables = []
    for model, synthetic, tasks, variants, headers, cells in _per_model(records):
        marks, mark_notes = _calls_marks(tasks, variants, cells)
        rows = []
        for task in tasks:
            row = [task]
            for planner, h in variants:
                counted = counted_records(cells.get((task, planner, h), []))
                valid = sum(1 for r in counted if r.valid)
                row.append(f"{valid}/{len(counted)} {_interval(rate_interval(valid, len(counted)), 2)}"
                           f"{marks.get((task, (planner, h)), '')}" if counted else "n/a (no trials)")
            rows.append(row)
        overall = ["overall: median over tasks"]
        for planner, h in variants:
            samples = []
            for task in tasks:
                counted = counted_records(cells.get((task, planner, h), []))
                if counted:
                    samples.append(RateSample(sum(1 for r in counted if r.valid), len(counted)))
            overall.append(overall_text(clustered_ci(samples), len(tasks), 2))
        rows += [overall, *_calls_row(variants, cells)]
        notes = _notes(model, synthetic,
                       "cells: valid/counted trials (infra errors not counted), consistency and its exact 95% "
                       "Clopper-Pearson interval",
                       _OVERALL_NOTE, COMPUTE_NOTE, *mark_notes)
        tables.append(Table(f"consistency:{model}",
                            f"Consistency (valid trials / trials) — model {model_label(model, synthetic)}"
                            f"{_settings([r for r in records if r.model == model])}",
                            ["task"] + headers, rows, notes,
                            untrusted_text=_title_text(model, [r for r in records if r.model == model])))
    return tables


_OVERALL_NOTE = (f"overall: median over the k tasks with a figure; 95% interval: exact order-statistic interval of "
                 f"a median over the k tasks' figures (each task's figure, its trials included, is one draw: the "
                 f"interval holds both which tasks and which trials were drawn; coverage 0.969 at k = 6, more for a "
                 f"rate over few trials, whose ties widen it); none ('–') below {MIN_TRIALS_FOR_MEDIAN_CI} tasks")
_MEDIAN_NOTE = (f"95% interval of a median: exact order-statistic interval over the trials, its ends taken over "
                f"the held-out-row resamples the grader scored (the split's own noise); none ('–') below "
                f"{MIN_TRIALS_FOR_MEDIAN_CI} trials, where no distribution-free 95% interval of a median exists; "
                "with an even n the median is the midpoint of the two middle trials (n = 2 with one trial scored "
                "and one failed: half the scored trial's figure, which no trial had)")


CALLS_TOLERANCE = 0.10     # a mean compute per trial differing from its row's median by more is flagged
CALLS_MARK = "‡"
# What a trial spent, per counted trial: every planner table prints each beside the figures, since a budget
# matched in LLM calls need not match in tool calls (whole-solution planners re-run steps without a call).
COMPUTE_MEASURES: tuple[tuple[str, Callable[[TrialRecord], float], str], ...] = (
    ("LLM calls", lambda r: r.llm_calls, ".1f"),
    ("tool calls", lambda r: r.tool_calls, ".1f"),
    ("tokens (in + out)", lambda r: r.tokens_in + r.tokens_out, ",.0f"),
    ("seconds", lambda r: r.wall_seconds, ".1f"),
)
_MATCHED = ("LLM calls", "tool calls")     # the measures a cell is flagged on
_CELL_MARK_NOTE = (f"{CALLS_MARK}: compute not matched (compare with care) — in a task's cell, its mean LLM calls or "
                   f"tool calls per trial differ by more than {CALLS_TOLERANCE:.0%} from the median over the row's "
                   "planners")
_MARK_MEANING = ("The budget is LLM calls; tool calls differ by design (ReAct makes one per LLM call, LATS spends "
                 "calls on its judge), and a trial that reaches a valid submission stops early, so a mark says the "
                 "compute differed, not that a budget was broken")
COMPUTE_NOTE = (f"{_CELL_MARK_NOTE}; in the per-trial rows at the table's foot (each planner's mean LLM calls, tool "
                "calls, tokens and wall seconds per counted trial), that planner's mean differs so from the row's "
                f"median. {_MARK_MEANING}")
CELL_COMPUTE_NOTE = f"{_CELL_MARK_NOTE} (the normalized-score table gives the per-trial means). {_MARK_MEANING}"


def _mean(records: list[TrialRecord], measure: Callable[[TrialRecord], float]) -> float | None:
    counted = counted_records(records)
    return sum(measure(r) for r in counted) / len(counted) if counted else None


def _off_median(means: dict) -> set:
    """Keys whose value differs from the median of the known values by more than CALLS_TOLERANCE."""
    known = sorted(m for m in means.values() if m is not None)
    if len(known) < 2:
        return set()
    middle = (known[(len(known) - 1) // 2] + known[len(known) // 2]) / 2.0
    return {k for k, m in means.items() if m is not None and abs(m - middle) > CALLS_TOLERANCE * max(middle, 1e-9)}


# Said instead of a mark on every cell (two planners that spent differently are both off their median).
EVERY_CELL_NOTE = (f"{CALLS_MARK} is left off the task cells: every one of them would carry it (on every task each "
                   "planner's compute differs so from the row's median; the per-trial rows give the means), so it would "
                   "single out none. Compare these planners with care")


def _calls_marks(tasks: list[str], variants: list, cells: dict) -> tuple[dict[tuple, str], list[str]]:
    """(task, variant) → CALLS_MARK where the cell's mean LLM or tool calls differ from its row's median by > 10 %,
    and the table's extra notes: none on the cells, and :data:`EVERY_CELL_NOTE`, when every cell would carry one."""
    marks: dict[tuple, str] = {}
    for task in tasks:
        for name, measure, _ in COMPUTE_MEASURES:
            if name in _MATCHED:
                for v in _off_median({v: _mean(cells.get((task, *v), []), measure) for v in variants}):
                    marks[(task, v)] = f" {CALLS_MARK}"
    filled = {(task, v) for task in tasks for v in variants if counted_records(cells.get((task, *v), []))}
    if marks and set(marks) == filled:
        return {}, [EVERY_CELL_NOTE]
    return marks, []


def compute_rows(groups: list[list[TrialRecord]]) -> list[list[str]]:
    """One row per compute measure: its mean per counted trial for each group of records (a planner's column),
    CALLS_MARK where it differs from the row's median by more than CALLS_TOLERANCE. Every planner table
    (the summary's, the benchmarks' reports) prints these rows."""
    rows = []
    for name, measure, fmt in COMPUTE_MEASURES:
        means = {i: _mean(group, measure) for i, group in enumerate(groups)}
        off = _off_median(means)
        rows.append([f"{name} per trial (mean)"] + ["n/a" if means[i] is None else
                                                    f"{format(means[i], fmt)}{' ' + CALLS_MARK if i in off else ''}"
                                                    for i in range(len(groups))])
    return rows


def _calls_row(variants: list, cells: dict) -> list[list[str]]:
    return compute_rows([[r for (task, *key), rs in cells.items() if tuple(key) == v for r in rs] for v in variants])


def _percentile_sample(cell) -> TrialSample:
    return TrialSample(cell.values, cell.replicates, "median")


def task_baselines(tasks: Iterable[str]) -> dict[str, str]:
    """Task → which trivial prediction its normalized score 0 stands for ('' for a task not in the specs)."""
    from mltb_core.bench.grading import baseline_description
    from mltb_core.bench.tasks import load_tasks

    try:
        specs = load_tasks()
    except Exception:  # noqa: BLE001 - a broken spec directory must not break a report of finished runs
        specs = {}
    return {t: (f"{baseline_description(specs[t])} ({specs[t].metric})" if t in specs else "") for t in tasks}


def normalized_table(records: list[TrialRecord]) -> list[Table]:
    """Median normalized score per task × planner on every task, one table per model: the quality figure
    the whole benchmark shares (the percentile exists on the tasks with a comparable board only)."""
    tables = []
    for model, synthetic, tasks, variants, headers, cells in _per_model(records):
        figures = {(task, v): normalized_cell(cells.get((task, *v), [])) for task in tasks for v in variants}
        marks, mark_notes = _calls_marks(tasks, variants, cells)
        rows = []
        for task in tasks:
            row = [task]
            for v in variants:
                cell = figures[(task, v)]
                if not cell.counted:
                    row.append("n/a (no trials)")
                elif not cell.values:
                    row.append(f"n/a (n={cell.counted}, none scored)")
                else:
                    row.append(median_cell_text(cell, 2) + marks.get((task, v), ""))
            rows.append(row)
        overall = ["overall: median over tasks"]
        for v in variants:
            samples = [_percentile_sample(figures[(t, v)]) for t in tasks if figures[(t, v)].values]
            overall.append(overall_text(clustered_ci(samples), len(tasks), 2))
        rows += [overall, *_calls_row(variants, cells)]
        baselines = task_baselines(tasks)
        notes = _notes(model, synthetic, QUALITY_FLOOR_NOTE + "; cells: median over n counted trials", _MEDIAN_NOTE,
                       _OVERALL_NOTE, COMPUTE_NOTE, *mark_notes,
                       "baseline (score 0) per task: " + "; ".join(f"{t}: {b or 'unknown task'}"
                                                                     for t, b in baselines.items()))
        title = (f"Median normalized score (0 = trivial baseline, 1 = perfect; failed trials count 0) — model "
                 f"{model_label(model, synthetic)}{_settings([r for r in records if r.model == model])}; overall = "
                 f"median over all {len(tasks)} tasks")
        tables.append(Table(f"normalized:{model}", title, ["task"] + headers, rows, notes,
                            untrusted_text=_title_text(model, [r for r in records if r.model == model])))
    return tables


def percentile_table(records: list[TrialRecord]) -> list[Table]:
    """Median leaderboard percentile per task × planner (failed trials count as 0), one table per model."""
    tables = []
    for model, synthetic, tasks, variants, headers, cells in _per_model(records):
        figures = {(task, v): percentile_cell(cells.get((task, *v), [])) for task in tasks for v in variants}
        marks, mark_notes = _calls_marks(tasks, variants, cells)
        # a task is excluded when no planner has a comparable percentile for it
        excluded = {}
        for task in tasks:
            reasons = {figures[(task, v)].excluded for v in variants if figures[(task, v)].counted}
            if reasons and None not in reasons:
                excluded[task] = "; ".join(sorted(reasons))
        rows = []
        for task in tasks:
            row = [task]
            for v in variants:
                cell = figures[(task, v)]
                if task in excluded or cell.excluded is not None:
                    row.append("excluded" if cell.counted else "n/a (no trials)")
                elif not cell.values:
                    row.append(f"n/a (n={cell.counted}, none scored)")
                else:
                    row.append(median_cell_text(cell, 1) + marks.get((task, v), ""))
            rows.append(row)
        included = [t for t in tasks if t not in excluded]
        overall = ["overall: median over tasks"]
        quality = [f"normalized score, median over all {len(tasks)} tasks (table above)"]
        for v in variants:
            samples = [_percentile_sample(figures[(t, v)]) for t in included
                       if figures[(t, v)].excluded is None and figures[(t, v)].values]
            overall.append(overall_text(clustered_ci(samples), len(tasks), 1))
            normalized = [_percentile_sample(c) for c in (normalized_cell(cells.get((t, *v), [])) for t in tasks)
                          if c.values]
            quality.append(overall_text(clustered_ci(normalized), len(tasks), 2))
        rows += [overall, quality]
        scope = f"overall: median over {len(included)} of {len(tasks)} tasks"
        scope += (" (excluded: " + "; ".join(f"{t}: {why}" for t, why in sorted(excluded.items())) + ")"
                  if excluded else "")
        notes = _notes(model, synthetic, scope,
                       "cells: median percentile over n counted trials, a trial without a valid submission "
                       "counting as 0 (as in the paper); a score tying board entries beats half of them (mid-rank)",
                       _MEDIAN_NOTE, _OVERALL_NOTE, CELL_COMPUTE_NOTE, *mark_notes,
                       "the last row is the normalized score's overall over every task, for comparison across the "
                       "whole benchmark",
                       "held-out rows: every trial of a task is graded on the same held-out split, so a percentile "
                       "carries that split's row noise, which more trials do not average out (on a few thousand "
                       "rows it can span tens of points: see each interval); planners ranked by percentile on one "
                       "task are ranked mostly by that noise unless their intervals separate")
        title = (f"Median leaderboard percentile (failed trials count as 0) — model "
                 f"{model_label(model, synthetic)}{_settings([r for r in records if r.model == model])}; overall = median over {len(included)} of "
                 f"{len(tasks)} tasks")
        tables.append(Table(f"percentile:{model}", title, ["task"] + headers, rows, notes,
                            untrusted_text=(*_title_text(model, [r for r in records if r.model == model]),
                                            *excluded.values())))
    return tables


# "cached in": the part of "tokens in" the server served from its prompt cache (cheaper; 0 where unreported)
_COST_HEADERS = ["model", "planner", "task", "trials", "tokens in", "cached in", "tokens out", "LLM calls",
                 "cost $", "wall s"]


def _cost_row(label: list[str], records: list[TrialRecord]) -> list:
    return label + [str(len(records)), str(sum(r.tokens_in for r in records)),
                    str(sum(r.tokens_in_cached for r in records)),
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
    return Table("cost", "Cost per planner and task", list(_COST_HEADERS), rows, untrusted=(0,))


def funnel_table(records: list[TrialRecord]) -> Table:
    """How many counted trials reached each of the ten stages, per model × planner (where trials die)."""
    labels = variant_labels(records)
    from mltb_core.stages.specs import REWARD_STAGES

    # stage names from mltb's own table, never from the records (a record's stage_name is solver-written text)
    stage_names = {s.number: s.name for s in REWARD_STAGES}
    headers = ["model", "planner", "trials"] + [f"≥{s}" for s in range(1, len(REWARD_STAGES) + 1)]
    rows = []
    for model, synthetic in _models(records):
        mine = counted_records(r for r in records if r.model == model)
        for planner, h in _variants(mine):
            cell = [r for r in mine if (r.planner, r.config_hash) == (planner, h)]
            reached = [sum(1 for r in cell if r.stage_reached >= s) for s in range(1, len(REWARD_STAGES) + 1)]
            rows.append([model_label(model, synthetic), labels[(model, planner, h)], str(len(cell))]
                        + [str(n) for n in reached])
    notes = ["stages: " + "; ".join(f"{s} {stage_names[s]}" for s in sorted(stage_names))]
    return Table("funnel", "Stage funnel: trials reaching each stage", headers, rows, notes, untrusted=(0,))


def infra_table(records: list[TrialRecord]) -> Table | None:
    """Infrastructure errors, counted apart (None when there were none)."""
    errors = [r for r in records if r.outcome == Outcome.INFRA_ERROR]
    if not errors:
        return None
    rows = []
    for (task, model, planner), cell in group_by(errors, "task", "model", "planner").items():
        first = (cell[0].error or cell[0].stop_reason or "").strip().splitlines()
        rows.append([task, display_text(model), planner, str(len(cell)), display_text(first[0] if first else "", 80)])
    return Table("infra", "Infrastructure errors (not counted against consistency)",
                 ["task", "model", "planner", "errors", "first error"], rows, untrusted=(1, 4))


def pass_at_k_cell(records: list[TrialRecord], ks: Sequence[int]) -> str:
    """'2/5: 0.40 / 0.70': a cell's valid/counted trials, then its unbiased pass@k for each of ``ks`` ('-' where
    k > n)."""
    counted = counted_records(records)
    valid = sum(1 for r in counted if r.valid)
    return f"{valid}/{len(counted)}: " + " / ".join(_fmt(pass_at_k(len(counted), valid, k)).replace("n/a", "-")
                                                      for k in ks)


def pass_at_k_table(records: list[TrialRecord]) -> list[Table]:
    """pass@k per task × planner, one table per model, for the k of PASS_AT_K that some cell's trial count reaches
    (k = 1 always)."""
    tables = []
    for model, synthetic, tasks, variants, headers, cells in _per_model(records):
        ks = reachable_k(max((len(counted_records(rs)) for rs in cells.values()), default=1))
        rows = [[task, *[pass_at_k_cell(cells.get((task, p, h), []), ks) if cells.get((task, p, h)) else "n/a"
                         for p, h in variants]] for task in tasks]
        tables.append(Table(f"pass_at_k:{model}", f"pass{'/'.join(f'@{k}' for k in ks)} per task — "
                            f"{model_label(model, synthetic)}{_settings(records)}", ["task", *headers], rows,
                            _notes(model, synthetic, "cells: c/n valid/counted trials, then pass@k = 1 - C(n-c, k)/C(n, k) "
                                                     "(unbiased) for each k; '-' where k > n; no interval: pass@1 is "
                                                     "the consistency, whose exact interval the consistency table "
                                                     "gives, and the larger k are functions of the same c and n"),
                            untrusted_text=_title_text(model, records)))
    return tables


def build_tables(records: Iterable[TrialRecord]) -> list[Table]:
    """All summary tables for a set of records (deduplicated and sorted first)."""
    records = latest_records(records)
    if not records:
        return []
    tables = (consistency_table(records) + pass_at_k_table(records) + normalized_table(records)
              + percentile_table(records))
    tables += [cost_table(records), funnel_table(records)]
    infra = infra_table(records)
    if infra is not None:
        tables.append(infra)
    return tables


# Said where a table's notes were already given under an earlier table of the same page (mltb's own words).
NOTES_ABOVE = "notes given under an earlier table on this page are not repeated here"


def note_key(note: str) -> str:
    """What a note says, for :func:`notes_not_given`: a mark's definition ('‡: ...', worded for its table) defines
    the mark, so the mark is defined once."""
    return CALLS_MARK if note.startswith(f"{CALLS_MARK}:") else note


def notes_not_given(table: Table, given: set[str]) -> Table:
    """``table`` with the notes already ``given`` on its page left out (:data:`NOTES_ABOVE` said instead); its
    notes join ``given``. Every page (terminal, Markdown, HTML) gives each note once this way."""
    notes = [n for n in table.notes if note_key(n) not in given]
    if len(notes) < len(table.notes):
        notes.append(NOTES_ABOVE)
    given.update(map(note_key, table.notes))
    return dataclasses.replace(table, notes=notes)


def render_tables(tables: list[Table], tablefmt: str = "simple", notes_once: bool = False) -> str:
    """Tables as text, each under its title, notes below (``notes_once``: a note already printed under an
    earlier table is not repeated, :func:`notes_not_given`)."""
    parts: list[str] = []
    given: set[str] = set()
    for table in tables:
        table = notes_not_given(table, given) if notes_once else table
        parts.append("\n".join([table.title_for(tablefmt), table.render(tablefmt)] + table.notes_for(tablefmt)))
    return "\n\n".join(parts)


# The compact terminal summary's tables (by key prefix): whether trials submit, and where the others stopped.
COMPACT_TABLES = ("consistency:", "funnel", "infra")
COMPACT_HINT = ("more: pytest -v prints every table (pass@k, normalized score, leaderboard percentile, cost); "
                "mltb report {run_dir} writes them with plots and the search trees")


def render_summary(records: Iterable[TrialRecord], compact: bool = False, run_dir: str = "RUN_DIR") -> str:
    """The terminal summary: every table (``compact``: consistency, the stage funnel and infrastructure
    errors, with a line naming the rest and the ``mltb report`` command for ``run_dir``), each note once; a
    one-line note when there are no records."""
    tables = build_tables(records)
    if not tables:
        return "no trial records"
    if not compact:
        return render_tables(tables, notes_once=True)
    shown = [t for t in tables if t.key.startswith(COMPACT_TABLES)]
    return render_tables(shown, notes_once=True) + "\n\n" + COMPACT_HINT.format(run_dir=run_dir)
