"""How do the five planners order with the synthetic policy, at the same LLM-call budget?

    python benchmarks/planner_ordering.py [--skill 0.5] [--seeds 10] [--tasks a,b,c] [--max-llm-calls 30]
                                          [--max-iterations 1000] [--toolset paper] [--jobs 2]
                                          [--out reports/planner-ordering]

Every (task, planner, seed) trial runs with ``sim:<skill>`` (a synthetic policy, NOT an LLM) and the same
``--max-llm-calls`` budget; ``--max-iterations`` is set high so that, for the tree planners, the LLM-call
budget rather than the iteration count ends an unfinished search (the report counts what actually ended
each trial). Writes ``<out>.md`` (the report: the sim's assumptions, consistency per task x planner, the
median over tasks with a 95 % interval, LLM calls used and stop reasons) and ``<out>.jsonl`` (one record per
trial).
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from tabulate import tabulate

from mltb_core.config import TrialConfig
from mltb_core.llm import sim
from mltb_core.planners import PLANNERS
from mltb_core.toolkit.registry import DEFAULT_TOOLSET, TOOLSETS
from mltb_core.analysis.results import TrialRecord, append_records
from mltb_core.analysis.stats import CI, RateSample, clustered_ci, rate_interval
from mltb_core.bench.tasks import get_task
from mltb_core.runner.trial import run_trial

DEFAULT_TASKS = "spaceship-titanic,playground-series-s4e1,playground-series-s3e1"
DEFAULT_BUDGET = 30
DEFAULT_ITERATIONS = 1000
TITLES = {"react": "ReAct", "lats": "LATS", "mcts_outcome": "MCTS-Outcome", "mcts_shaped": "MCTS-Shaped",
          "hierarchical_mcts": "Hierarchical MCTS", "automind": "AutoMind", "mle_star": "MLE-STAR",
          "agent_k": "Agent K"}

# What ended a trial, from its stop_reason (planners/*.py and planners/episode.py word them).
STOP_KINDS = (
    ("valid submission", "valid"),
    ("LLM-call budget", "LLM-call budget"),
    ("iteration budget", "iteration budget"),
    ("step budget", "ReAct step cap (min of max_iterations, max_depth)"),
    ("No Solution Found", "hierarchical: a subtask found no solution within subtask_iterations"),
    ("tree exhausted", "tree exhausted"),
    ("ended its turn", "the model stopped calling tools"),
    ("no reply", "the model stopped calling tools"),
)


def stop_kind(reason: str) -> str:
    for marker, kind in STOP_KINDS:
        if marker in (reason or ""):
            return kind
    return reason or "unknown"


def consistency_over_tasks(valid_by_task: dict[str, Sequence[float]], seed: int = 0) -> CI:
    """The headline figure: the median over tasks of per-task consistency, with a 95 % interval.

    The same aggregation as the pytest summary's "overall" row (mltb_core.analysis.stats.clustered_ci): the
    order-statistic interval over tasks, its ends over draws of each task's trials (none below 6 tasks).
    """
    samples = [RateSample(int(sum(v)), len(v)) for v in valid_by_task.values() if len(v)]
    return clustered_ci(samples, seed=seed)


def _one(args: tuple[str, TrialConfig, str]) -> dict:
    task, config, out = args
    return run_trial(get_task(task), config, Path(out)).to_dict()


def run_grid(tasks: Sequence[str], planners: Sequence[str], model: str, seeds: int, max_llm_calls: int,
             max_iterations: int, toolset: str, jobs: int) -> list[TrialRecord]:
    # The trials' sandboxes are scratch: only the records are kept, so nothing is left in /tmp.
    with tempfile.TemporaryDirectory(prefix="mltb-ordering-") as work:
        grid = [(t, TrialConfig(planner=p, model=model, trial=s, llm_cache=False, max_llm_calls=max_llm_calls,
                                max_iterations=max_iterations, toolset=toolset), work)
                for t in tasks for p in planners for s in range(seeds)]
        if jobs <= 1:
            rows = [_one(job) for job in grid]
        else:
            with mp.get_context("fork").Pool(jobs) as pool:
                rows = list(pool.imap_unordered(_one, grid))
    return sorted((TrialRecord.from_dict(r) for r in rows), key=lambda r: (r.task, r.planner, r.trial))


def sim_assumptions() -> str:
    """The numbered assumptions of the synthetic policy, verbatim from its module docstring."""
    doc = sim.__doc__ or ""
    match = re.search(r"Assumptions[^\n]*\n\n(.*)", doc, re.S)
    if not match:
        raise ValueError("mltb_core/llm/sim.py's docstring has no 'Assumptions' section")
    return match.group(1).strip()


def _median(values: Iterable[float]) -> float | None:
    ordered = sorted(values)
    if not ordered:
        return None
    mid = len(ordered) // 2
    return float(ordered[mid]) if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def ordering_text(estimates: dict[str, float]) -> str:
    """'A = B 0.50 > C 0.12': planners from best to worst, equal (to two decimals) figures tied."""
    levels: dict[str, list[str]] = {}
    for planner, value in sorted(estimates.items(), key=lambda kv: -kv[1]):
        levels.setdefault(f"{value:.2f}", []).append(TITLES.get(planner, planner))
    return " > ".join(f"{' = '.join(names)} {value}" for value, names in levels.items())


def render(records: Sequence[TrialRecord], tasks: Sequence[str], planners: Sequence[str], meta: dict) -> str:
    counted = [r for r in records if r.outcome != "infra_error"]
    infra = len(records) - len(counted)
    head = [f"task ({meta['seeds']} seeds each)", *[TITLES.get(p, p) for p in planners]]
    rows, overall = [], {}
    for task in tasks:
        row = [task]
        for p in planners:
            rs = [r for r in counted if r.task == task and r.planner == p]
            valid = sum(r.valid for r in rs)
            row.append(f"{valid}/{len(rs)} {rate_interval(valid, len(rs)).format()}" if rs else "n/a")
        rows.append(row)
    for p in planners:
        overall[p] = consistency_over_tasks(
            {t: [float(r.valid) for r in counted if r.task == t and r.planner == p] for t in tasks})
    rows.append(["**median over tasks [95 % CI]**", *[overall[p].format() for p in planners]])
    rows.append(["LLM calls per trial: median (max)",
                 *[f"{_median(r.llm_calls for r in counted if r.planner == p) or 0:g} "
                   f"({max((r.llm_calls for r in counted if r.planner == p), default=0)})" for p in planners]])
    stops = {p: Counter(stop_kind(r.stop_reason) for r in counted if r.planner == p) for p in planners}
    kinds = sorted({k for c in stops.values() for k in c}, key=lambda k: (k != "valid", k))
    stop_rows = [[k, *[stops[p].get(k, 0) for p in planners]] for k in kinds]
    ordering = ordering_text({p: overall[p].estimate for p in planners if overall[p].estimate is not None})
    lines = [
        "# Planner ordering with the synthetic policy at a matched LLM-call budget",
        "",
        f"Generated by `{meta['command']}` ({meta['wall_seconds']:.0f} s on {meta['jobs']} worker(s)).",
        "",
        f"**`{meta['model']}` is a synthetic policy, not an LLM.** These figures show how the planners use a "
        "fixed, planner-agnostic policy under the assumptions below; they say nothing about how they use a real "
        "model, and they are not the paper's results.",
        "",
        "## What the synthetic policy assumes",
        "",
        "Verbatim from `mltb_core/llm/sim.py`:",
        "",
        sim_assumptions(),
        "",
        "## Setup",
        "",
        f"- Tasks: {', '.join(tasks)} ({len(tasks)}); seeds 0..{meta['seeds'] - 1} per task and planner; "
        f"{len(records)} trials, {infra} infrastructure error(s) (excluded).",
        f"- Toolset: `{meta['toolset']}`. Every planner: `max_llm_calls={meta['max_llm_calls']}`, "
        f"`max_iterations={meta['max_iterations']}` (set high so the LLM-call budget binds first for the tree "
        "planners); other knobs at TrialConfig defaults (max_depth 40, expansion_k 3, hierarchical: "
        "subtask_iterations 8, subtask_depth 6). ReAct takes at most min(max_iterations, max_depth) steps.",
        "- Consistency = share of trials ending with a valid submission; cells: valid/trials and the 95 % "
        "exact Clopper-Pearson interval. Headline: the **median over tasks** of per-task consistency; its 95 % "
        "interval is the order-statistic interval over tasks, its ends over draws of each task's trials "
        "(`mltb_core.analysis.stats.clustered_ci`, the pytest summary's 'overall' row; none, '[–]', below 6 "
        f"tasks). With {len(tasks)} tasks the median is the middle task's figure.",
        "",
        "## Consistency",
        "",
        tabulate(rows, headers=head, tablefmt="github"),
        "",
        f"Ordering as measured (median over tasks): {ordering}. Intervals that overlap do not separate planners.",
        "",
        "## What ended each trial",
        "",
        "Trials per planner by stop reason (which budget bound):",
        "",
        tabulate(stop_rows, headers=["stop reason", *[TITLES.get(p, p) for p in planners]], tablefmt="github"),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--skill", type=float, default=0.5)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--tasks", default=DEFAULT_TASKS)
    ap.add_argument("--planners", default=",".join(PLANNERS))
    ap.add_argument("--max-llm-calls", type=int, default=DEFAULT_BUDGET)
    ap.add_argument("--max-iterations", type=int, default=DEFAULT_ITERATIONS)
    ap.add_argument("--toolset", choices=TOOLSETS, default=DEFAULT_TOOLSET)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default="reports/planner-ordering", help="path without suffix: writes .md and .jsonl")
    args = ap.parse_args(argv)
    model = f"sim:{args.skill:g}"
    tasks, planners = args.tasks.split(","), args.planners.split(",")
    start = time.time()
    records = run_grid(tasks, planners, model, args.seeds, args.max_llm_calls, args.max_iterations, args.toolset,
                       args.jobs)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    jsonl = out.with_suffix(".jsonl")
    jsonl.unlink(missing_ok=True)
    append_records(jsonl, records)
    command = "python benchmarks/planner_ordering.py " + " ".join(argv if argv is not None else sys.argv[1:])
    meta = {"command": command.strip(), "wall_seconds": time.time() - start, "jobs": args.jobs, "model": model,
            "seeds": args.seeds, "toolset": args.toolset, "max_llm_calls": args.max_llm_calls,
            "max_iterations": args.max_iterations}
    report = render(records, tasks, planners, meta)
    out.with_suffix(".md").write_text(report)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
