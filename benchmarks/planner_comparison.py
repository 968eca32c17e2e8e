"""Does search over whole solutions beat search over single steps, at equal cost? (issue 12)

    python benchmarks/planner_comparison.py [--skill 0.5] [--seeds 4] [--tasks a,b,c,d,e] [--max-llm-calls 30]
                                            [--jobs 2] [--out reports/planner-comparison]
    python benchmarks/planner_comparison.py --report-only      # rewrite the report from the run's records
    python benchmarks/planner_comparison.py --seeds 2 --jobs 1 --out reports/planner-comparison-neutral
    python benchmarks/planner_comparison.py --neutral --seeds 2 --jobs 1 --out reports/planner-comparison-neutral
        # the sensitivity run: sim:<skill> and sim:<skill>:neutral (mltb_core/llm/sim.py, assumption 8) at one
        # commit in <out>-neutral; each invocation rewrites <out>.md, whose sensitivity section sets them side by side

All eight planners, the same ``--max-llm-calls`` budget, the synthetic policy ``sim:<skill>`` (NOT an LLM),
``--seeds`` trials per task and planner. ``--max-iterations`` is set high so that the LLM-call budget ends
every unfinished search (the report counts what actually ended each trial). The trials go to the run
directory ``<out>/`` (records and trajectories, :mod:`mltb_core.analysis.runstore`); the report
``<out>.md`` (with its critical-difference diagram ``<out>-cd.svg``) is written by ``mltb report --markdown``,
whose header gives the command. This script only drives the trials.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import shlex
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from _bench import ROOT, count, mltb_at_root

sys.path.insert(0, str(ROOT))

from mltb_core.config import TrialConfig  # noqa: E402
from mltb_core.llm.backends import SIM_NEUTRAL  # noqa: E402
from mltb_core.planners import planner_names  # noqa: E402
from mltb_core.toolkit.registry import DEFAULT_TOOLSET, TOOLSETS  # noqa: E402

DEFAULT_TASKS = ("spaceship-titanic,playground-series-s4e1,playground-series-s3e1,nyc-taxi-trip-duration,"
                 "new-york-city-taxi-fare-prediction")
DEFAULT_BUDGET = 30
DEFAULT_ITERATIONS = 1000
TITLE = "Whole-solution versus single-step planners at a matched LLM-call budget"
SECTIONS = "synthetic_policy,run,tables,ranking,stop_kinds,seconds,machine"
SENSITIVITY_SECTIONS = "synthetic_policy,run,tables,ranking,sensitivity,stop_kinds,seconds,machine"
NEUTRAL_SUFFIX = "-neutral"    # the neutral run's directory: <out>-neutral, read by <out>.md's sensitivity section


def _one(job: tuple[str, TrialConfig, str]) -> tuple[dict, str | None]:
    """One trial in its own work directory; its record and trajectory text."""
    from mltb_core.bench.tasks import get_task
    from mltb_core.runner.trial import run_trial

    task, config, work = job
    record = run_trial(get_task(task), config, Path(work))
    path = Path(record.trajectory) if record.trajectory else None
    return record.to_dict(), path.read_text(encoding="utf-8") if path is not None and path.is_file() else None


def run_grid(out: Path, tasks: Sequence[str], planners: Sequence[str], model: str, seeds: int, max_llm_calls: int,
             max_iterations: int, toolset: str, jobs: int) -> None:
    """Every (task, planner, seed) trial, recorded in the run store at ``out`` (work directories are scratch)."""
    from mltb_core.analysis.records import TrialRecord
    from mltb_core.analysis.runstore import RunStore
    from mltb_core.config import case_id

    store = RunStore(out)
    with tempfile.TemporaryDirectory(prefix="mltb-comparison-") as work:
        grid = [(t, TrialConfig(planner=p, model=model, trial=s, llm_cache=False, max_llm_calls=max_llm_calls,
                                max_iterations=max_iterations, toolset=toolset),
                 str(Path(work) / case_id(t, p, model, s)))
                for t in tasks for p in planners for s in range(seeds)]
        if jobs <= 1:
            results = map(_one, grid)
        else:
            pool = mp.get_context("fork").Pool(jobs)
            results = pool.imap_unordered(_one, grid)
        for data, trajectory in results:
            store.write(TrialRecord.from_dict(data), trajectory)
        if jobs > 1:
            pool.close()


def report_command(out: Path, notes: Path | None) -> list[str]:
    """The report of a run; it reads the run's sensitivity run (``<out>-neutral``) when there is one."""
    def shown(path: Path) -> str:
        path = path.resolve()
        return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)

    sensitivity = out.with_name(out.name + NEUTRAL_SUFFIX)
    paired = sensitivity.is_dir()
    command = ["report", shown(out), "--markdown", shown(out.with_suffix(".md")), "--title", TITLE,
               "--sections", SENSITIVITY_SECTIONS if paired else SECTIONS]
    command += ["--sensitivity", shown(sensitivity)] if paired else []
    return command + (["--notes", shown(notes)] if notes is not None and notes.is_file() else [])


def write_report(out: Path, notes: Path | None) -> int:
    """``mltb report --markdown`` from the checkout root, as the report's header names it."""
    command = report_command(out, notes)
    code = mltb_at_root(command)
    print(f"$ mltb {shlex.join(command)} → exit {code}")
    return code


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--skill", type=float, default=0.5)
    ap.add_argument("--neutral", action="store_true",
                    help="the sim's planner-input effects neutral (model sim:<skill>:neutral): the sensitivity run")
    ap.add_argument("--seeds", type=count, default=4)
    ap.add_argument("--tasks", default=DEFAULT_TASKS)
    ap.add_argument("--planners", default=",".join(planner_names()))
    ap.add_argument("--max-llm-calls", type=int, default=DEFAULT_BUDGET)
    ap.add_argument("--max-iterations", type=int, default=DEFAULT_ITERATIONS)
    ap.add_argument("--toolset", choices=TOOLSETS, default=DEFAULT_TOOLSET)
    ap.add_argument("--jobs", type=count, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "reports" / "planner-comparison",
                    help="run directory; the report is <out>.md")
    ap.add_argument("--notes", type=Path, default=None, help="Markdown appended under 'Notes' (default: <out>-notes.md)")
    ap.add_argument("--report-only", action="store_true", help="rewrite the report from the run's records")
    args = ap.parse_args(argv)
    notes = args.notes or args.out.with_name(f"{args.out.name}-notes.md")
    from mltb_core.analysis.runstore import RunStore

    if not args.report_only:
        model = f"sim:{args.skill:g}" + (f":{SIM_NEUTRAL}" if args.neutral else "")
        store = RunStore(args.out)
        if store.results_path.exists() and any(r.model == model for r in store.read()):
            print(f"planner_comparison: error: {args.out} already holds trial records of {model}: pick a new --out",
                  file=sys.stderr)
            return 2
        start = time.time()
        run_grid(args.out, args.tasks.split(","), args.planners.split(","), model, args.seeds,
                 args.max_llm_calls, args.max_iterations, args.toolset, args.jobs)
        print(f"{time.time() - start:.0f} s on {args.jobs} worker(s)")
    if args.out.name.endswith(NEUTRAL_SUFFIX):      # a sensitivity run: the default run's report reads it
        default_run = args.out.with_name(args.out.name.removesuffix(NEUTRAL_SUFFIX))
        return write_report(default_run, default_run.with_name(f"{default_run.name}-notes.md"))
    return write_report(args.out, notes)


if __name__ == "__main__":
    sys.exit(main())
