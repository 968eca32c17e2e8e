"""``mltb report RUN_DIR... [--out DIR]``: merge runs into a leaderboard a researcher can read.

Writes ``leaderboard.md`` (the summary tables), ``summary.json`` (tables, per-cell figures with their raw
values, provenance and the configuration legend), a self-contained ``index.html`` (provenance, the summary
with the stage funnel and consistency plots, the trial list, the other plots, the legend of configurations,
the sections, each table note once), ``tasks/<task>.html`` (one drill-down page per task: trials ×
planners) and ``trials/<id>.html`` (one page per trial: its record, prompt and the search-tree viewer of
:mod:`mltb_core.analysis.treeview`). Without ``--out`` the report goes to ``<first run>/report/``, never
into tracked files.

Plots and tables share one column label per (model, planner, config hash) (:func:`variant_labels`),
so they always agree; when several hashes exist the legend gives each hash's full configuration and
the settings that differ between them. Every page carries the provenance line (mltb version, git
commit, date, runs). Extra sections (e.g. pass@k or ratings) are passed to :func:`build_report` as
:class:`ReportSection` objects.
"""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

from mltb_core.analysis.compare import cell_figures
from mltb_core.analysis.plots import figure_svg, inline_svg, pyplot
from mltb_core.analysis.provenance import code_note, git_commit, trial_code
from mltb_core.analysis.runstore import RunStore, bounded_file_name
from mltb_core.analysis.records import TrialRecord
from mltb_core.analysis.results import (consistency_values, counted_records, group_by, latest_records,
                                        normalized_values, percentile_values)
from mltb_core.analysis.labels import SYNTHETIC_BANNER, model_label
from mltb_core.analysis.safety import markdown as markdown_text, one_line as display_text, terminal_text
from mltb_core.analysis.sections import Block, Section, SectionContext, pick_sections, read_steps
from mltb_core.analysis.tables import (Table, planner_rank, build_tables, markdown_label, notes_not_given,
                                      render_tables, variant_labels)
from mltb_core.analysis.templating import render
from mltb_core.analysis.treeview import embed_json, tree_from_steps
from mltb_core.stages.specs import REWARD_STAGES
from mltb_core.stages.events import EventKind

__all__ = ["build_report", "report_main", "load_runs", "trial_page_name", "task_page_name", "provenance",
           "config_legend", "ReportSection", "default_out_dir", "MIN_BOX_POINTS",
           "stage_names", "read_steps", "compare_main", "export_main"]

# Fewer points than this are drawn as dots: a box of one or two values pretends to a spread.
MIN_BOX_POINTS = 3

# ---- loading -----------------------------------------------------------------------------------------
def load_runs(run_dirs: Sequence[Path], planners: Sequence[str] | None = None) -> list[TrialRecord]:
    """Records of every run directory, deduplicated, with trajectory paths made absolute (:meth:`RunStore.load`);
    with ``planners``, only theirs (a ValueError names a planner the runs do not hold, and those they do)."""
    records = latest_records(record for run_dir in run_dirs for record in RunStore(run_dir).load())
    if planners is None:
        return records
    held = {r.planner for r in records}
    missing = [p for p in planners if p not in held]
    if missing:
        raise ValueError(f"planner(s) {', '.join(missing)} not in these runs; they hold: "
                         f"{', '.join(sorted(held, key=planner_rank)) or 'no records'}")
    return [r for r in records if r.planner in planners]


def default_out_dir(run_dirs: Sequence[Path | str]) -> Path:
    """Where a report goes without --out: inside the first run directory (never the checkout's reports/)."""
    return RunStore(run_dirs[0]).report_dir


def trial_page_name(record: TrialRecord) -> str:
    return bounded_file_name(f"{record.case_id}-{record.config_hash}", ".html")   # a model string may be long


def task_page_name(task: str) -> str:
    return f"{task}.html"   # task names are slugs (checked when records are read)


def stage_names() -> dict[int, str]:
    return {s.number: s.name for s in REWARD_STAGES}


# ---- provenance and the configuration legend ---------------------------------------------------------
def provenance(run_dirs: Sequence[Path | str], records: list[TrialRecord],
               planners: Sequence[str] | None = None) -> dict[str, Any]:
    """What produced this report: mltb version, git commit (None outside a checkout), date, runs, records, and
    the planners it keeps when it keeps only some (``mltb report --planner``)."""
    import mltb_core

    raw = sum(1 for d in run_dirs for r in RunStore(d).read() if planners is None or r.planner in planners)
    return {"mltb_version": mltb_core.__version__, "git_commit": git_commit(),
            "trial_code": trial_code(records),
            "generated_utc": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "runs": [str(Path(d).resolve()) for d in run_dirs], "records": len(records),
            # lines of results.jsonl replaced by a later record of the same trial (a rerun without --resume)
            "superseded": max(raw - len(records), 0), "planners": list(planners) if planners is not None else None}


# Per-trial fields of a trial_start configuration: which trial it was, never how it was configured.
_TRIAL_IDENTITY = ("model", "trial", "seed")


def _config_of(record: TrialRecord) -> dict | None:
    """The configuration a trial ran under (its trajectory's trial_start line, the planner included; knobs
    flattened to their own names), or None when no trajectory has one."""
    steps, _ = read_steps(record)
    for step in steps[:3]:
        if step.get("step_type") == EventKind.TRIAL_START and isinstance(step.get("config"), dict):
            config = {k: v for k, v in step["config"].items() if k not in _TRIAL_IDENTITY and k != "knobs"}
            knobs = step["config"].get("knobs")
            config.update(knobs if isinstance(knobs, dict) else {})
            return config
    return None


def _differing(configs: Sequence[dict]) -> list[str]:
    """The settings whose values differ between ``configs`` (a setting one of them lacks differs too)."""
    keys = sorted({k for c in configs for k in c})
    return [k for k in keys if len({json.dumps(c.get(k), sort_keys=True) for c in configs}) > 1]


def run_differences(a: list[TrialRecord], b: list[TrialRecord]) -> str:
    """One line for ``mltb compare``: what differs between two runs' configurations and code, e.g.
    ``planner: react → mcts_shaped; max_llm_calls: 12 → 40`` (the model too, when it differs), with the
    code each ran on when that differs (:func:`~mltb_core.analysis.provenance.code_difference`)."""
    from mltb_core.analysis.provenance import code_difference, code_recorded

    code = code_difference(a, b)
    settings = _setting_differences(a, b)
    if code is None:
        return settings or ("nothing: both ran the same recorded configuration and code" if code_recorded(a + b)
                            else "nothing: both ran the same recorded configuration (their code is not recorded)")
    return f"{settings}; {code}" if settings else f"{code} (the same recorded configuration)"


def _setting_differences(a: list[TrialRecord], b: list[TrialRecord]) -> str:
    """The settings part of :func:`run_differences` ("" when the configurations are the same)."""
    def known(records: list[TrialRecord]) -> list[dict]:
        return [{**c, "model": r.model} for r in records if (c := _config_of(r)) is not None]

    configs_a, configs_b = known(a), known(b)
    if not configs_a or not configs_b:
        return "settings not recorded (a run has no trajectory with its configuration)"
    within = set(_differing(configs_a)) | set(_differing(configs_b))
    changes = []
    for key in _differing([*configs_a, *configs_b]):
        if key in within:
            changes.append(f"{key}: varies within a run")
        else:
            changes.append(f"{key}: {json.dumps(configs_a[0].get(key))} → {json.dumps(configs_b[0].get(key))}")
    return "; ".join(changes)


def config_legend(records: list[TrialRecord]) -> dict[str, Any]:
    """Per config hash: its full configuration (from a trial_start line; None when no trajectory has one),
    the column labels that use it, and the settings that differ between hashes."""
    labels = variant_labels(records)
    configs: dict[str, dict | None] = {}
    for (h,), cell in group_by(records, "config_hash").items():
        config = next((c for c in map(_config_of, cell) if c is not None), None)
        # a hash several planners share (each hashes its own knobs; theirs are alike) names them all, not
        # the planner of the trajectory it was read from
        planners = sorted({r.planner for r in cell})
        configs[h] = {**config, "planner": planners} if config is not None and len(planners) > 1 else config
    differing = _differing([c for c in configs.values() if c])
    return {"hashes": {h: {"config": c, "labels": sorted({lab for (m, p, hh), lab in labels.items() if hh == h})}
                       for h, c in configs.items()},
            "differing": differing, "code": code_note(records)}


def _legend_context(legend: dict[str, Any]) -> dict[str, Any]:
    """The configurations table of index.html: one row per hash (text only; the template escapes it)."""
    hashes, differing = legend["hashes"], legend["differing"]
    rows = []
    for h, entry in hashes.items():
        config = entry["config"]
        diff = ("; ".join(f"{k}={json.dumps(config.get(k))}" for k in differing) if config and differing
                else ("unknown (no trajectory with the configuration)" if not config else "—"))
        rows.append({"hash": h, "labels": ", ".join(entry["labels"]), "diff": diff,
                     "full": json.dumps(config, indent=1, sort_keys=True) if config else ""})
    lead = (f"{len(hashes)} configurations; they differ in: {', '.join(differing) or 'settings not recorded'}. "
            "Tables and plots label a planner run under several configurations planner@hash."
            if len(hashes) > 1 else "One configuration (every column uses it).")
    if legend.get("code"):   # the settings agree, the code may not (provenance.code_note)
        lead += " " + legend["code"]
    return {"legend_rows": rows, "legend_lead": lead}


# ---- plots -------------------------------------------------------------------------------------------
def _svg(fig) -> str:
    return inline_svg(figure_svg(fig))


def _variant_rank(variant: tuple[str, str]) -> tuple:
    planner, h = variant
    return (*planner_rank(planner), h)


def _columns(records: list[TrialRecord]) -> list[tuple[str, list[TrialRecord]]]:
    """(label, records) per planner column, in table order, labelled exactly as the tables label them."""
    labels = variant_labels(records)
    cells = group_by(records, "planner", "config_hash")
    return [(labels[(records[0].model, p, h)], cells[(p, h)]) for p, h in sorted(cells, key=_variant_rank)]


def _per_task(records: list[TrialRecord], values_of, stat) -> list[float]:
    """One figure per task (the paper's box plots span competitions)."""
    out = []
    for _, cell in group_by(records, "task").items():
        values = values_of(cell)
        if values:
            out.append(float(stat(values)))
    return out


SUMMARY_SECTION = "summary"   # index.html shows it first, above the plots and the trial list
OPEN_TRIAL_LIST = 40          # a trial list this long or shorter starts open on index.html
# Under the distribution plots, once (each panel says its n).
DISTRIBUTION_NOTE = (f"Per-task plots: n = tasks with a figure; a box needs ≥ {MIN_BOX_POINTS} tasks, fewer are drawn "
                     "as points. Infra errors not counted; failed trials count as percentile 0 and normalized score 0.")
# One panel's size in inches: two side by side fill the report's width, each readable on its own.
PANEL_SIZE = (6.0, 3.8)


def _distribution_plots(records: list[TrialRecord], model: str, synthetic: bool) -> list[str]:
    """Consistency, median normalized score and median percentile per task, per planner column, one figure
    each: a box with ≥ MIN_BOX_POINTS tasks, else the points themselves; each says n."""
    plt = pyplot()
    columns = _columns(records)
    panels = [("Consistency per task", consistency_values, statistics.fmean, (-0.03, 1.05)),
              ("Median normalized score per task", normalized_values, statistics.median, (-0.03, 1.05)),
              ("Median leaderboard percentile per task", percentile_values, statistics.median, (-3, 103))]
    figures = []
    for title, values_of, stat, ylim in panels:
        fig, ax = plt.subplots(figsize=PANEL_SIZE)
        for i, (_, cell) in enumerate(columns, 1):
            data = _per_task(cell, values_of, stat)
            if len(data) >= MIN_BOX_POINTS:
                ax.boxplot([data], positions=[i], widths=0.5, showmeans=True)
            elif data:
                ax.scatter([i] * len(data), data, s=36, zorder=3)
            ax.annotate(f"n={len(data)}", (i, 0), xycoords=("data", "axes fraction"), xytext=(0, -30),
                        textcoords="offset points", ha="center", fontsize=8, color="#555")
        ax.set_xticks(range(1, len(columns) + 1), [c[0] for c in columns], rotation=15, fontsize=9)
        ax.set_xlim(0.4, len(columns) + 0.6)
        ax.set_ylim(*ylim)
        ax.grid(axis="y", alpha=0.3)
        ax.set_title(f"{title}\n{model_label(model, synthetic)}", fontsize=10)
        figures.append(_svg(fig))
    return figures


def _cost_vs_score(records: list[TrialRecord]) -> str | None:
    """Mean cost per trial against median percentile, one point per (column, task); None without percentiles."""
    plt = pyplot()
    use_dollars = any(r.cost_usd > 0 for r in records)
    fig, ax = plt.subplots(figsize=PANEL_SIZE)
    xs_all = []
    for (model,), mine in group_by(records, "model").items():
        for label, cell in _columns(mine):
            xs, ys = [], []
            for _, task_cell in group_by(cell, "task").items():
                percentiles = percentile_values(task_cell)
                if not percentiles:
                    continue
                xs.append(statistics.fmean(r.cost_usd if use_dollars else r.tokens_in + r.tokens_out for r in task_cell))
                ys.append(statistics.median(percentiles))
            if xs:
                ax.scatter(xs, ys, label=f"{label} / {model}", s=32)
                xs_all += xs
    if not xs_all:
        plt.close(fig)
        return None
    ax.set_ylim(-3, 103)                  # percentiles always on their full scale
    ax.set_xlim(0, max(xs_all) * 1.15 or 1)   # cost from zero: a lone point is not blown up to fill the axis
    from matplotlib.ticker import EngFormatter

    ax.xaxis.set_major_formatter(EngFormatter(unit="$" if use_dollars else ""))   # 1.2M, not 1200000
    ax.set_xlabel("mean cost per trial ($)" if use_dollars else "mean tokens per trial (no prices known)")
    ax.set_ylabel("median leaderboard percentile")
    ax.grid(alpha=0.3)
    ax.set_title("Cost versus percentile\n(one point per planner column and task)", fontsize=10)
    ax.legend(fontsize=7)
    return _svg(fig)


def _funnel_plot(records: list[TrialRecord]) -> str | None:
    plt = pyplot()
    counted = counted_records(records)
    if not counted:
        return None
    names = stage_names()
    fig, ax = plt.subplots(figsize=PANEL_SIZE)
    stages = list(range(1, len(REWARD_STAGES) + 1))
    for (model,), mine in group_by(counted, "model").items():
        for label, cell in _columns(mine):
            share = [sum(r.stage_reached >= s for r in cell) / len(cell) for s in stages]
            ax.plot(stages, share, marker="o", label=f"{label} / {model} (n={len(cell)})")
    ax.set_xticks(stages, [f"{s} {names.get(s, '')}" for s in stages], rotation=35, ha="right", fontsize=7)
    ax.set_ylim(-0.03, 1.05)
    ax.grid(alpha=0.3)
    ax.set_ylabel("share of counted trials reaching it")
    ax.set_title("Stage funnel (infra errors not counted)", fontsize=10)
    ax.legend(fontsize=7)
    return _svg(fig)


# ---- extra sections ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ReportSection:
    """An extra section of index.html and leaderboard.md; ``build(records, seed)`` returns its tables
    (an empty list leaves the section out)."""
    title: str
    build: Callable[[list[TrialRecord], int], list[Table]]


def _section_tables(records: list[TrialRecord], seed: int,
                    extra: Sequence[ReportSection]) -> list[tuple[str, list[Table]]]:
    out = []
    for section in extra:
        tables = section.build(records, seed)
        if tables:
            out.append((section.title, tables))
    return out


# ---- pages -------------------------------------------------------------------------------------------
def _num(value: Any, digits: int = 2) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return str(value) if isinstance(value, int) else f"{value:,.{digits}f}"


def _trial_rows(records: list[TrialRecord], labels: dict) -> list[dict[str, Any]]:
    return [{"page": trial_page_name(r), "task": r.task, "label": labels[(r.model, r.planner, r.config_hash)],
             "model": r.model, "trial": r.trial, "outcome": str(r.outcome), "stage": r.stage_reached,
             "percentile": _num(r.percentile, 1), "score": _num(r.score, 4), "nodes": r.tree_nodes,
             "tokens": f"{r.tokens_in + r.tokens_out:,}", "cost": _num(r.cost_usd, 4),
             "stopped": display_text(r.stop_reason, 90)} for r in records]


def _task_page(task: str, records: list[TrialRecord], all_records: list[TrialRecord], prov: dict) -> str:
    """Trials × planner columns of one task: outcome, stage and percentile of every trial."""
    labels = variant_labels(all_records)
    columns = sorted({(r.model, r.planner, r.config_hash) for r in records}, key=lambda k: (k[0], *_variant_rank(k[1:])))
    cell = {(r.model, r.planner, r.config_hash, r.trial): r for r in records}
    rows = [{"trial": t, "cells": [None if (r := cell.get((*c, t))) is None else
                                   {"outcome": str(r.outcome), "page": trial_page_name(r), "stage": r.stage_reached,
                                    "percentile": r.percentile, "nodes": r.tree_nodes} for c in columns]}
            for t in sorted({r.trial for r in records})]
    figures = [t for t in build_tables(records) if t.key.split(":")[0] in ("consistency", "normalized", "percentile")]
    return render("task.html", title=f"{task} — mltb", task=task, prov=prov, synthetic=any(r.synthetic for r in records),
                  synthetic_banner=SYNTHETIC_BANNER, columns=[{"label": labels[c], "model": c[0]} for c in columns],
                  rows=rows, tables=[t for _, shown in once_per_page([(task, figures)]) for t in shown])


_RECORD_FIELDS = ("outcome", "valid", "score", "percentile", "medal", "normalized", "stage_reached", "stage_name",
                  "stop_reason", "stop_kind", "tree_nodes", "tool_calls", "llm_calls", "llm_retries", "tokens_in",
                  "tokens_out", "cost_usd", "wall_seconds", "tool_seconds", "llm_seconds", "seed", "config_hash",
                  "toolset", "board", "percentile_note", "error", "feedback")


def _trial_page(record: TrialRecord, label: str, prov: dict) -> str:
    steps, problem = read_steps(record)
    start = next((s for s in steps if s.get("step_type") == EventKind.TRIAL_START), {})
    fields = [(k, str(getattr(record, k) or "—") if k in ("error", "feedback") else _num(getattr(record, k), 4),
               k in ("error", "feedback"))
              for k in _RECORD_FIELDS if getattr(record, k) not in (None, "") or k in ("percentile", "score")]
    tree = tree_from_steps(steps)
    return render("trial.html", title=f"{record.task} · {label} · {record.model} · trial {record.trial}", prov=prov,
                  synthetic=record.synthetic, synthetic_banner=SYNTHETIC_BANNER, task=record.task,
                  task_page=task_page_name(record.task), fields=fields, prompt=start.get("prompt"), note=problem,
                  tree=tree, tree_json=embed_json(tree))


def build_report(run_dirs: Sequence[Path | str], out_dir: Path | str | None = None, seed: int = 0,
                 sections: Sequence[ReportSection] = (),
                 report_sections: Sequence[Section] | None = None,
                 planners: Sequence[str] | None = None) -> dict[str, Path]:
    """Merge ``run_dirs`` and write the report into ``out_dir`` (default: :func:`default_out_dir`);
    returns the written paths by name. ``report_sections`` (default: every registered one,
    :mod:`mltb_core.analysis.sections`) make the body; ``sections`` (tables only) follow them (each
    leaves itself out when it builds no table)."""
    if not run_dirs:
        raise ValueError("build_report needs at least one run directory")
    out_dir = Path(out_dir) if out_dir is not None else default_out_dir(run_dirs)
    records = load_runs([Path(d) for d in run_dirs], planners)
    ctx = SectionContext(records=records, seed=seed, run_dirs=[Path(d) for d in run_dirs])
    built = section_blocks(pick_sections(None) if report_sections is None else report_sections, ctx) if records else []
    extra = _section_tables(records, seed, sections) if records else []
    for sub in ("trials", "tasks"):
        (out_dir / sub).mkdir(parents=True, exist_ok=True)
    prov = provenance(run_dirs, records, planners)
    legend = config_legend(records)
    page_blocks = once_per_page([*built, *extra])   # each note once on the page (the tables keep theirs)
    shown = [(s, blocks) for s, blocks in page_blocks if isinstance(s, Section)]
    shown_extra = [(title, tables) for title, tables in page_blocks if isinstance(title, str)]
    paths = {"leaderboard": out_dir / "leaderboard.md", "summary": out_dir / "summary.json",
             "index": out_dir / "index.html"}
    paths["leaderboard"].write_text(_leaderboard_markdown(records, prov, legend, shown, shown_extra), encoding="utf-8")
    paths["summary"].write_text(_summary_json(records, seed, run_dirs, prov, legend, built, extra), encoding="utf-8")
    paths["index"].write_text(_index_page(records, prov, legend, ctx, shown, shown_extra), encoding="utf-8")
    _write_pages(out_dir, records, prov)
    return paths


def _leaderboard_header(records: list[TrialRecord], prov: dict) -> str:
    """The first lines of leaderboard.md: the code, the runs, who ran the trials, what was left out."""
    commit = prov["git_commit"] or "no git checkout"
    return (f"# mltb leaderboard\n\nmltb {prov['mltb_version']} · commit {commit} · {prov['generated_utc']} · "
            f"runs: {', '.join(prov['runs'])} · {len(records)} trial record(s)"
            + (f", run by {trial_code(records, markdown_label)}" if records else "")
            + (f", planners {', '.join(prov['planners'])} only" if prov["planners"] else "")
            + (f" ({prov['superseded']} earlier record(s) of rerun trials superseded: the latest counts)"
               if prov["superseded"] else "") + "\n")


def _leaderboard_configurations(legend: dict) -> str:
    """Each configuration's hash, its labels and the settings in which the configurations differ."""
    def settings(entry: dict) -> str:
        config = entry["config"] or {}
        return "; ".join(f"{markdown_text(k)}={markdown_text(json.dumps(config.get(k)))}" for k in legend["differing"])

    return "## Configurations\n\n" + "\n".join(
        f"- `{h}` ({', '.join(e['labels'])}): " + (settings(e) or "configuration unknown")
        for h, e in legend["hashes"].items()) + "\n"


def _leaderboard_markdown(records: list[TrialRecord], prov: dict, legend: dict, shown: list, shown_extra: list) -> str:
    """leaderboard.md: the header, the configurations when there are several, then the sections shown."""
    markdown = [_leaderboard_header(records, prov)]
    if not records:
        markdown.append("No trial records in these runs.\n")
    if any(r.synthetic for r in records):
        markdown.append(f"> {SYNTHETIC_BANNER}\n")
    if len(legend["hashes"]) > 1:
        markdown.append(_leaderboard_configurations(legend))
    for section, blocks in shown:
        markdown += [f"## {section.title}\n", *(block_markdown(b, section.title) for b in blocks)]
    markdown += [f"## {title}\n\n" + "\n".join(block_markdown(t) for t in ts) for title, ts in shown_extra]
    return "\n".join(markdown)


def _summary_json(records: list[TrialRecord], seed: int, run_dirs: Sequence[Path | str], prov: dict, legend: dict,
                  built: list, extra: list) -> str:
    """summary.json: provenance, configurations, every table with all its notes, and the cells' figures."""
    all_tables = [b for _, blocks in built for b in blocks if isinstance(b, Table)] + [t for _, ts in extra for t in ts]
    summary = {"provenance": prov, "configurations": legend, "runs": [str(d) for d in run_dirs],
               "records": len(records), "tables": [t.to_dict() for t in all_tables],
               "cells": cell_figures(records, seed) if records else {}}
    return json.dumps(summary, indent=2, sort_keys=True, default=str) + "\n"


def _plots(records: list[TrialRecord], ctx: SectionContext) -> tuple[list, list]:
    """(the summary's figures: how far trials got and how often they were valid, per model; the other plots)."""
    key_plots, plots = [p for p in [_funnel_plot(records)] if p], []
    for (model,), cell in group_by(counted_records(records), "model").items():   # infra errors alone: nothing to draw
        consistency, *others = _distribution_plots(cell, model, any(r.synthetic for r in cell))
        key_plots.append(consistency)
        plots += others
    plots += [p for p in [_cost_vs_score(records)] if p]
    plots += list(ctx.figures.values())     # figures sections drew (the critical-difference diagram)
    return key_plots, plots


def _index_page(records: list[TrialRecord], prov: dict, legend: dict, ctx: SectionContext, shown: list,
                shown_extra: list) -> str:
    """index.html: the summary first, then the trial list and the plots; the other sections after them."""
    synthetic = any(r.synthetic for r in records)
    key_plots, plots = _plots(records, ctx)
    return render("index.html", title="mltb leaderboard", prov=prov, synthetic=synthetic, synthetic_banner=SYNTHETIC_BANNER,
                  records=bool(records), tasks=[{"name": t, "page": task_page_name(t)} for t in sorted({r.task for r in records})],
                  **_legend_context(legend), key_plots=key_plots, plots=plots, distribution_note=DISTRIBUTION_NOTE,
                  summary=[(s, b) for s, b in shown if s.name == SUMMARY_SECTION],
                  sections=[(s, b) for s, b in shown if s.name != SUMMARY_SECTION], extra=shown_extra,
                  trial_rows=_trial_rows(records, variant_labels(records)), trials_open=len(records) <= OPEN_TRIAL_LIST,
                  prefix="")


def _write_pages(out_dir: Path, records: list[TrialRecord], prov: dict) -> None:
    """One page per task (tasks/) and per trial (trials/)."""
    labels = variant_labels(records)
    for (task,), cell in group_by(records, "task").items():
        (out_dir / "tasks" / task_page_name(task)).write_text(_task_page(task, cell, records, prov), encoding="utf-8")
    for record in records:
        label = labels[(record.model, record.planner, record.config_hash)]
        (out_dir / "trials" / trial_page_name(record)).write_text(_trial_page(record, label, prov), encoding="utf-8")


# ---- the published Markdown report ----------------------------------------------------------------------
PARTIAL = "**PARTIAL**"


def section_blocks(sections: Sequence[Section], ctx: SectionContext) -> list[tuple[Section, list[Block]]]:
    """Each section with the blocks it built (sections that built none are left out)."""
    out = []
    for section in sections:
        blocks = section.build(ctx)
        if blocks:
            out.append((section, blocks))
    return out


def once_per_page(sections: Sequence[tuple[Any, Sequence[Block]]]) -> list[tuple[Any, list[Block]]]:
    """The blocks as one page shows them: each table note in full the first time only (:func:`notes_not_given`);
    a prose paragraph that restates a note already given (the policy's assumptions under the ranking) is left
    out. The tables themselves (summary.json) keep all their notes."""
    given: set[str] = set()
    out: list[tuple[Any, list[Block]]] = []
    for section, blocks in sections:
        shown: list[Block] = []
        for block in blocks:
            if isinstance(block, Table):
                shown.append(notes_not_given(block, given))
            else:
                paragraphs = [p for p in block.split("\n\n") if not {p.strip(), p.strip().rstrip(".")} & given]
                if any(p.strip() for p in paragraphs):
                    shown.append("\n\n".join(paragraphs))
        if shown:
            out.append((section, shown))
    return out


def block_markdown(block: Block, section_title: str = "") -> str:
    if isinstance(block, Table):
        heading = "" if block.title == section_title else f"### {block.title_for('github')}\n\n"
        return f"{heading}{block.render('github')}\n" + "".join(f"\n- {n}" for n in block.notes_for("github")) + \
            ("\n" if block.notes else "")
    return block + "\n"


def markdown_report(run_dirs: Sequence[Path | str], *, command: str, title: str = "mltb report",
                    sections: Sequence[Section] | None = None, notes: Path | None = None,
                    expect_trials: int | None = None, seed: int = 0,
                    markdown_path: Path | None = None,
                    sensitivity: Path | str | None = None,
                    planners: Sequence[str] | None = None) -> tuple[str, dict[str, str]]:
    """A report as one Markdown document and the figures to write beside it (file name -> SVG text).

    The text depends on the records (and ``notes``) alone, never on when or where it is written: no date, no
    path of this machine; which code ran the trials and on which machine come from the records. So
    regenerating a committed report from its committed records gives the same file. ``command`` (the
    exact command line that writes it) goes into its header. ``sensitivity``: a sensitivity run's directory,
    read by the ``sensitivity`` section alone (every other section reads ``run_dirs``)."""
    records = load_runs([Path(d) for d in run_dirs], planners)
    sections = pick_sections(None) if sections is None else sections
    counted = len(counted_records(records))
    partial = expect_trials is not None and counted < expect_trials
    ctx = SectionContext(records=records, seed=seed, run_dirs=[Path(d) for d in run_dirs],
                         markdown_path=markdown_path,
                         sensitivity=_sensitivity_run(Path(sensitivity), planners) if sensitivity is not None else [],
                         partial=partial)
    lines = [f"# {title}" + (f" — {PARTIAL}" if partial else ""), "",
             f"Written by `{command}` from the trial records in {', '.join(f'`{d}`' for d in run_dirs)}; the same "
             "command rewrites it (every figure below comes from those records).", ""]
    if partial:
        lines += [f"{PARTIAL}: {counted} of {expect_trials} planned trials recorded; figures cover only those.", ""]
    if not records:
        lines += ["No trial records in these runs.", ""]
    lines += _configuration_markdown(config_legend(records)) if records else []
    for section, blocks in once_per_page(section_blocks(sections, ctx)):
        lines += [f"## {section.title}", ""] + [block_markdown(b, section.title) for b in blocks]
    if notes is not None:
        lines += ["## Notes", "", f"Written by hand (`{notes}`); the sections above are generated from the records.",
                  "", Path(notes).read_text(encoding="utf-8").strip(), ""]
    return "\n".join(lines).rstrip() + "\n", ctx.figures


def _sensitivity_run(run: Path, planners: Sequence[str] | None) -> list[TrialRecord]:
    try:
        return load_runs([run], planners)
    except ValueError as exc:
        raise ValueError(f"the --sensitivity run {run}: {exc}") from None


def _configuration_markdown(legend: dict[str, Any]) -> list[str]:
    """The settings the trials ran with (from their trajectories' trial_start lines): those every configuration
    shares once, then each config hash with its columns and the settings it differs in."""
    configs = [e["config"] for e in legend["hashes"].values() if e["config"]]
    if not configs:
        return []   # no trajectory holds them (a run that kept none): a notes file may say them
    shared = {k: v for k, v in (configs[0] if configs else {}).items()
              if k not in legend["differing"] and all(c.get(k) == v for c in configs)}
    def text(config: dict, keys: list[str]) -> str:
        return ", ".join(f"{markdown_text(k)}={markdown_text(json.dumps(config.get(k)))}" for k in keys)
    lines = ["## Configuration", ""]
    lines.append(f"Settings every trial shares: {text(shared, sorted(shared))}.")
    lines.append("")
    for h, entry in legend["hashes"].items():
        differing = text(entry["config"], legend["differing"]) if entry["config"] and legend["differing"] else ""
        lines.append(f"- config `{h}` ({', '.join(entry['labels'])})" + (f": {differing}" if differing else
                     "" if entry["config"] else ": settings not recorded"))
    if len(legend["hashes"]) > 1 and not legend["differing"]:
        lines += ["", "The configurations differ only in their planners' own knobs (each planner's hash takes its "
                      "knobs alone)."]
    return lines + [""]


def write_markdown_report(run_dirs: Sequence[Path | str], path: Path, **options: Any) -> list[Path]:
    """Write :func:`markdown_report` to ``path`` and its figures beside it; returns the written paths."""
    path = Path(path)
    text, figures = markdown_report(run_dirs, markdown_path=path, **options)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    written = [path]
    for name, svg in figures.items():
        (path.parent / name).write_text(svg, encoding="utf-8")
        written.append(path.parent / name)
    return written


def report_main(run_dirs: Sequence[Path], out: Path | None = None,
                planners: Sequence[str] | None = None) -> dict[str, Path]:
    """``mltb report RUN... [--out DIR]``: write the report, print the tables and the written paths."""
    paths = build_report(run_dirs, out, planners=planners)
    print(render_tables(build_tables(load_runs(run_dirs, planners)), notes_once=True))   # as the pages: each note once
    for name, path in paths.items():
        print(f"{name}: {path}")
    return paths


def compare_main(run_a: Path, run_b: Path, out: Path | None = None, seed: int = 0,
                 markdown: Path | None = None, command: str = "") -> Path:
    """``mltb compare A B``: print the paired comparison and write ``compare.html`` (default: under A's
    report directory), or with ``markdown`` that Markdown document instead (the published form: it depends on
    the records alone, and names ``command``, which rewrites it); returns the written path."""
    from mltb_core.analysis.compare_runs import compare_runs, comparison_html, outcome_change, render_comparison

    a, b = load_runs([run_a]), load_runs([run_b])
    comparisons = compare_runs(a, b, seed)
    differences, outcomes = run_differences(a, b), outcome_change(comparisons)
    print(f"{Path(run_a).name} → {Path(run_b).name}: they differ in {terminal_text(differences)}")
    print(f"outcomes: {terminal_text(outcomes)}")
    print(render_comparison(comparisons))
    warnings = _machine_warnings(a, b)
    for warning in warnings:
        print(f"warning: {terminal_text(warning)}")
    if markdown is not None:
        runs = [f"- {side} = `{run}`: {len(records)} record(s), run by "
                f"{markdown_text(trial_code(records) or 'no trial yet')}"
                for side, run, records in (("A", run_a, a), ("B", run_b, b))]
        lines = [f"# Run comparison: {markdown_text(Path(run_a).name)} → {markdown_text(Path(run_b).name)}", "",
                 f"Written by `{command}` from the trial records in `{run_a}` and `{run_b}`; the same command "
                 "rewrites it.", "", *runs, f"- They differ in: {markdown_text(differences)}",
                 f"- Outcomes: {markdown_text(outcomes)}",
                 *[f"- WARNING: {markdown_text(w)}" for w in warnings], "", render_comparison(comparisons, fmt="github"),
                 ""]
        markdown = Path(markdown)
        markdown.parent.mkdir(parents=True, exist_ok=True)
        markdown.write_text("\n".join(lines), encoding="utf-8")
        print(f"comparison: {markdown}")
        return markdown
    out = Path(out) if out is not None else default_out_dir([run_a]) / f"compare-{Path(run_b).resolve().name}.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    prov = provenance([run_a, run_b], a + b)
    out.write_text(render("compare.html", title="mltb run comparison", prov=prov, warnings=warnings,
                          differences=differences, outcomes=outcomes,
                          comparison=comparison_html(comparisons, Path(run_a), Path(run_b))), encoding="utf-8")
    print(f"comparison: {out}")
    return out


def _machine_warnings(a: list[TrialRecord], b: list[TrialRecord]) -> list[str]:
    """Why a comparison of two runs may mix machines (seconds and time budgets then differ by machine)."""
    from mltb_core.analysis.provenance import NOT_RECORDED, machine_counts

    machines_a, machines_b = machine_counts(a), machine_counts(b)
    if set(machines_a) == set(machines_b) and len(machines_a) == 1 and NOT_RECORDED not in machines_a:
        return []
    if NOT_RECORDED in machines_a or NOT_RECORDED in machines_b:
        return ["some trials do not record their machine (records before schema 2): the comparison may mix machines"]
    return [f"the runs mix machines (A: {', '.join(machines_a)}; B: {', '.join(machines_b)}): wall seconds and any "
            "time budget's effect are not comparable"]


def export_main(run_dirs: Sequence[Path], fmt: str, out: Path | None = None) -> Path:
    """``mltb export RUN... --format F``: one row per trial, deduplicated as the tables are; returns the path."""
    from mltb_core.analysis.export import write_export

    records = load_runs(run_dirs)
    out = Path(out) if out is not None else Path(run_dirs[0]) / f"trials.{fmt}"
    path = write_export(records, out, fmt)
    print(f"{len(records)} trial(s) → {path}")
    return path

