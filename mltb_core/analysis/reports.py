"""``mltb report RUN_DIR... --out reports/``: merge runs into a leaderboard.

Writes ``leaderboard.md`` (the summary tables), ``summary.json`` (tables plus per-cell figures with
their raw values), a self-contained ``index.html`` (tables and inline-SVG plots: percentile and
consistency box plots per planner as in the paper's Figure 4, cost versus percentile, the stage
funnel) and ``trials/<id>.html``, one page per trial with its trajectory and the best path.
"""
from __future__ import annotations

import argparse
import html
import io
import json
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from mltb_core.analysis.compare import cell_figures
from mltb_core.analysis.results import (RESULTS_FILE, SYNTHETIC_LABEL, TrialRecord, consistency_values, group_by, latest_records,
                      model_label, percentile_values, read_records)
from mltb_core.analysis.ranking import ranking_html
from mltb_core.analysis.tables import PLANNER_ORDER, STAGES, Table, build_tables, render_tables

__all__ = ["build_report", "main", "load_runs", "trial_page_name"]

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1200px;color:#222}
h1{font-size:1.6em}h2{font-size:1.25em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:8px 0;font-size:13px}th,td{border:1px solid #ccc;padding:3px 8px;text-align:left}
th{background:#f3f3f3}.note{color:#8a5a00;font-size:13px}.plots svg{max-width:100%;height:auto}
.synthetic{background:#fff4d6;border:1px solid #e0b84a;padding:6px 10px;margin:8px 0}
.step{border-left:4px solid #ccc;padding:4px 10px;margin:6px 0;font-size:13px}
.best{border-left-color:#2a9d4a;background:#f1fbf3}.fail{border-left-color:#c0392b}
pre{white-space:pre-wrap;margin:2px 0;font-size:12px;background:#f8f8f8;padding:4px}
"""


def load_runs(run_dirs: Sequence[Path]) -> list[TrialRecord]:
    """Records of every run directory, deduplicated, with trajectory paths made absolute."""
    records = []
    for run_dir in map(Path, run_dirs):
        results = run_dir / RESULTS_FILE
        if not results.is_file():
            raise FileNotFoundError(f"{run_dir} is not an mltb run directory: {results} does not exist")
        for record in read_records(results):
            if record.trajectory and not Path(record.trajectory).is_absolute():
                record = replace(record, trajectory=str((run_dir / record.trajectory).resolve()))
            records.append(record)
    return latest_records(records)


def trial_page_name(record: TrialRecord) -> str:
    model = "".join(c if c.isalnum() or c in "._-" else "-" for c in record.model)
    return f"{record.task}-{record.planner}-{model}-t{record.trial:02d}-{record.config_hash}.html"


# ---- plots -------------------------------------------------------------------------------------------
def _svg(fig) -> str:
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg"):]  # drop the XML prolog so it embeds inline


def _planners(records: list[TrialRecord]) -> list[str]:
    names = {r.planner for r in records}
    return sorted(names, key=lambda p: (PLANNER_ORDER.index(p) if p in PLANNER_ORDER else 99, p))


def _per_task(records: list[TrialRecord], planner: str, values_of, stat) -> list[float]:
    """One figure per task for this planner (the paper's box plots span competitions)."""
    out = []
    for _, cell in group_by([r for r in records if r.planner == planner], "task").items():
        values = values_of(cell)
        if values:
            out.append(float(stat(values)))
    return out


def _box_plots(records: list[TrialRecord], model: str, synthetic: bool) -> str:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    planners = _planners(records)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    panels = [("Consistency", consistency_values, statistics.fmean, (0, 1.05)),
              ("Median leaderboard percentile", percentile_values, statistics.median, (0, 105))]
    for ax, (title, values_of, stat, ylim) in zip(axes, panels):
        data = [_per_task(records, p, values_of, stat) for p in planners]
        positions = [i + 1 for i, d in enumerate(data) if d]
        ax.boxplot([d for d in data if d], positions=positions, widths=0.5, showmeans=True)
        for i, d in enumerate(data, 1):
            if d:
                sd = statistics.pstdev(d) if len(d) > 1 else 0.0
                ax.text(i, ylim[1] * 0.97, f"μ={statistics.fmean(d):.2f}\nσ={sd:.2f}\nM={statistics.median(d):.2f}",
                        ha="center", va="top", fontsize=7)
        ax.set_xticks(range(1, len(planners) + 1), planners, rotation=20, fontsize=8)
        ax.set_ylim(*ylim)
        ax.set_title(f"{title} — {model_label(model, synthetic)}", fontsize=9)
    return _svg(fig)


def _cost_vs_percentile(records: list[TrialRecord]) -> str:
    import matplotlib.pyplot as plt

    use_dollars = any(r.cost_usd > 0 for r in records)
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for (model, planner), cell in group_by(records, "model", "planner").items():
        xs, ys = [], []
        for _, task_cell in group_by(cell, "task").items():
            percentiles = percentile_values(task_cell)
            if not percentiles:
                continue
            cost = [r.cost_usd if use_dollars else r.tokens_in + r.tokens_out for r in task_cell]
            xs.append(statistics.fmean(cost))
            ys.append(statistics.median(percentiles))
        if xs:
            ax.scatter(xs, ys, label=f"{planner} / {model}", s=28)
    ax.set_xlabel("mean cost per trial ($)" if use_dollars else "mean tokens per trial")
    ax.set_ylabel("median leaderboard percentile")
    ax.set_title("Cost versus percentile (one point per task)", fontsize=9)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    return _svg(fig)


def _funnel_plot(records: list[TrialRecord]) -> str:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    stages = list(range(1, STAGES + 1))
    for (model, planner), cell in group_by([r for r in records if r.outcome != "infra_error"],
                                           "model", "planner").items():
        share = [sum(r.stage_reached >= s for r in cell) / len(cell) for s in stages]
        ax.plot(stages, share, marker="o", label=f"{planner} / {model}")
    ax.set_xticks(stages)
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("stage")
    ax.set_ylabel("share of trials reaching it")
    ax.set_title("Stage funnel", fontsize=9)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    return _svg(fig)


# ---- pages -------------------------------------------------------------------------------------------
def _page(title: str, body: str) -> str:
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{CSS}</style></head><body>{body}</body></html>\n")


def _table_html(table: Table) -> str:
    notes = "".join(f"<p class='note'>{html.escape(n)}</p>" for n in table.notes)
    return f"<h3 id='{html.escape(table.key)}'>{html.escape(table.title)}</h3>{table.render('html')}{notes}"


def _trials_table(records: list[TrialRecord]) -> str:
    rows = []
    for r in records:
        link = f"<a href='trials/{html.escape(trial_page_name(r))}'>{html.escape(r.task)} · {html.escape(r.planner)}" \
               f" · {html.escape(r.model)} · t{r.trial:02d}</a>"
        pct = "n/a" if r.percentile is None else f"{r.percentile:.1f}"
        rows.append(f"<tr><td>{link}</td><td>{r.outcome}</td><td>{r.stage_reached}</td><td>{pct}</td>"
                    f"<td>{html.escape(r.stop_reason)}</td></tr>")
    return ("<table><tr><th>trial</th><th>outcome</th><th>stage</th><th>percentile</th><th>stopped</th></tr>"
            + "".join(rows) + "</table>")


def _json(value: Any) -> str:
    return html.escape(json.dumps(value, indent=1, default=str))


def _step_html(step: dict, best: set) -> str:
    kind = step.get("step_type", "")
    node = step.get("node_id")
    classes = "step best" if node in best else "step"
    head = f"<b>#{step.get('step_number', '')} {html.escape(kind)}</b>" + (f" node {node}" if node is not None else "")
    if kind == "tool_execution_initiation":
        calls = step.get("tools_to_execute", [])
        body = "".join(f"<div>call <code>{html.escape(c.get('tool_name', ''))}</code><pre>{_json(c.get('tool_args', {}))}"
                       f"</pre></div>" for c in calls)
    elif kind == "tool_execution_completion":
        results = step.get("tool_results", [])
        if any(not r.get("ok", True) for r in results):
            classes += " fail"
        body = "".join(f"<pre>{html.escape(str(r.get('content_preview', '')))}</pre>" for r in results)
    elif kind == "reward_feedback":
        body = f"stage {step.get('stage')}: {html.escape(str(step.get('feedback', '')))}"
    elif kind == "llm_call":
        texts = [c.get("text", "") for c in step.get("candidates", [])]
        body = f"{step.get('purpose', '')}: " + " | ".join(html.escape(t[:200]) for t in texts[:3])
    else:
        body = f"<pre>{_json({k: v for k, v in step.items() if k not in ('step_number', 'timestamp')})}</pre>"
    return f"<div class='{classes}'>{head}<div>{body}</div></div>"


def _trial_page(record: TrialRecord) -> str:
    steps: list[dict] = []
    problem = ""
    if record.trajectory and Path(record.trajectory).is_file():
        for line in Path(record.trajectory).read_text(encoding="utf-8").splitlines():
            try:
                steps.append(json.loads(line))
            except json.JSONDecodeError:
                problem = "(some trajectory lines were not JSON and are not shown)"
    else:
        problem = "(no trajectory file recorded for this trial)"
    summary = next((s for s in steps if s.get("step_type") == "search_summary"), {})
    best = set(summary.get("best_path") or [])
    tool_of = {s.get("node_id"): c.get("tool_name", "") for s in steps
               if s.get("step_type") == "tool_execution_initiation" for c in s.get("tools_to_execute", [])[:1]}
    best_path = " → ".join(f"{n} {tool_of.get(n, '')}".strip() for n in summary.get("best_path") or []) or "n/a"
    title = f"{record.task} · {record.planner} · {record.model} · trial {record.trial}"
    fields = {k: v for k, v in record.to_dict().items() if k not in ("extra",)}
    synthetic = f"<div class='synthetic'>{SYNTHETIC_LABEL}</div>" if record.synthetic else ""
    body = (f"<p><a href='../index.html'>← leaderboard</a></p><h1>{html.escape(title)}</h1>{synthetic}"
            f"<table>{''.join(f'<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>' for k, v in fields.items())}"
            f"</table><h2>Best path</h2><p>{html.escape(best_path)}</p>"
            f"<h2>Trajectory ({len(steps)} steps)</h2><p class='note'>{problem}</p>"
            + "".join(_step_html(s, best) for s in steps))
    return _page(title, body)


def build_report(run_dirs: Sequence[Path | str], out_dir: Path | str, seed: int = 0) -> dict[str, Path]:
    """Merge ``run_dirs`` and write the report into ``out_dir``; returns the written paths by name."""
    if not run_dirs:
        raise ValueError("build_report needs at least one run directory")
    out_dir = Path(out_dir)
    records = load_runs([Path(d) for d in run_dirs])
    tables = build_tables(records, seed)
    (out_dir / "trials").mkdir(parents=True, exist_ok=True)
    synthetic = any(r.synthetic for r in records)
    sources = ", ".join(str(d) for d in run_dirs)

    markdown = [f"# mltb leaderboard\n\nRuns: {sources} · {len(records)} trial record(s)\n"]
    if synthetic:
        markdown.append(f"> Rows for `sim` models are {SYNTHETIC_LABEL}.\n")
    markdown += [f"## {t.title}\n\n{t.render('github')}\n" + "".join(f"\n_{n}_\n" for n in t.notes) for t in tables]
    paths = {"leaderboard": out_dir / "leaderboard.md", "summary": out_dir / "summary.json",
             "index": out_dir / "index.html"}
    paths["leaderboard"].write_text("\n".join(markdown), encoding="utf-8")

    summary = {"runs": [str(d) for d in run_dirs], "records": len(records),
               "tables": [t.to_dict() for t in tables], "cells": cell_figures(records, seed)}
    paths["summary"].write_text(json.dumps(summary, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")

    plots = []
    for (model,), cell in group_by(records, "model").items():
        plots.append(_box_plots(cell, model, any(r.synthetic for r in cell)))
    if records:
        plots += [_cost_vs_percentile(records), _funnel_plot(records)]
    banner = f"<div class='synthetic'>Rows for sim models are {SYNTHETIC_LABEL}.</div>" if synthetic else ""
    body = (f"<h1>mltb leaderboard</h1><p>Runs: {html.escape(sources)} · {len(records)} trial record(s)</p>{banner}"
            f"<h2>Plots</h2><div class='plots'>{''.join(plots)}</div>"
            f"<h2>Tables</h2>{''.join(_table_html(t) for t in tables)}{ranking_html(records, seed)}"
            f"<h2>Trials</h2>{_trials_table(records)}")
    paths["index"].write_text(_page("mltb leaderboard", body), encoding="utf-8")

    for record in records:
        (out_dir / "trials" / trial_page_name(record)).write_text(_trial_page(record), encoding="utf-8")
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    """``mltb report RUN_DIR [RUN_DIR ...] --out DIR``; prints the tables and the written paths."""
    parser = argparse.ArgumentParser(prog="mltb report", description="merge mltb runs into a leaderboard")
    parser.add_argument("run_dirs", nargs="+", type=Path, help="run directories (each holds results.jsonl)")
    parser.add_argument("--out", type=Path, default=Path("reports"), help="output directory (default reports/)")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    args = parser.parse_args(argv)
    try:
        paths = build_report(args.run_dirs, args.out, args.seed)
    except (FileNotFoundError, ValueError) as exc:
        parser.error(str(exc))
    print(render_tables(build_tables(load_runs(args.run_dirs), args.seed)))
    for name, path in paths.items():
        print(f"{name}: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
