"""Do the planners rank as in the paper? Consistency per planner with the synthetic policy.

    python benchmarks/planner_ordering.py [--skill 0.5] [--seeds 20] [--tasks a,b,c] [--planners ...] [--jobs 2]

Runs every (task, planner, seed) trial with ``sim:<skill>`` (a synthetic policy, not an LLM),
prints the summary's consistency table (per task × planner with 95 % Wilson intervals; overall =
median over tasks with a task-clustered interval), and writes the records to --out (default
reports/planner-ordering.jsonl).
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import tempfile
import time
from pathlib import Path

from mltb_core.config import TrialConfig
from mltb_core.results import TrialRecord, append_records
from mltb_core.tables import consistency_table, render_tables
from mltb_core.tasks import get_task
from mltb_core.trial import run_trial

DEFAULT_TASKS = "spaceship-titanic,playground-series-s4e1,playground-series-s3e1"
DEFAULT_PLANNERS = "react,lats,mcts_outcome,mcts_shaped,hierarchical_mcts"


def _one(args: tuple[str, str, str, int, str]) -> dict:
    task, planner, model, trial, out = args
    cfg = TrialConfig(planner=planner, model=model, trial=trial, llm_cache=False)
    return run_trial(get_task(task), cfg, Path(out)).to_dict()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--skill", type=float, default=0.5)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--tasks", default=DEFAULT_TASKS)
    ap.add_argument("--planners", default=DEFAULT_PLANNERS)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default="reports/planner-ordering.jsonl")
    args = ap.parse_args(argv)
    model = f"sim:{args.skill:g}"
    tasks, planners = args.tasks.split(","), args.planners.split(",")
    work = tempfile.mkdtemp(prefix="mltb-ordering-")
    jobs = [(t, p, model, s, work) for t in tasks for p in planners for s in range(args.seeds)]
    start = time.time()
    with mp.get_context("fork").Pool(args.jobs) as pool:
        records = [TrialRecord.from_dict(r) for r in pool.imap_unordered(_one, jobs)]
    out = Path(args.out)
    out.unlink(missing_ok=True)
    append_records(out, sorted(records, key=lambda r: (r.task, r.planner, r.trial)))
    infra = sum(r.outcome == "infra_error" for r in records)
    print(f"Consistency with {model} (synthetic policy, not an LLM): {args.seeds} seeds x {len(tasks)} tasks, "
          f"{len(records)} trials, {infra} infrastructure errors, {time.time() - start:.0f} s")
    # the summary's own table: Wilson interval per cell, overall = median over tasks (task-clustered interval)
    print(render_tables(consistency_table(records), tablefmt="github"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
