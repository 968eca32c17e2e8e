"""reports/local-llm.md: the paper's Tables 4-6 (consistency, percentiles, cost, stage funnel) on a real LLM.

Run (the long run: hours on 2 cores; interrupt it any time and continue with ``--resume``)::

    python benchmarks/local_llm_table.py --out mltb-runs/local-llm --resume

It drives the benchmark itself, one ``pytest suites/ ... --trials N --mltb-out OUT [--resume]`` session:
mltb starts every cell's trial t before any cell's trial t+1, so a run stopped part-way is nearly balanced
across cells (xdist's queued items can leave a cell a trial or two behind), and ``--resume`` runs what is not
recorded. (One session, not one per round of trials: 3 tasks on 2 workers ended each round with a worker
idle.) When the session ends or is interrupted (and with ``--report-only``, for a report mid-run) it rewrites
the report from ``OUT``'s records with ``mltb report --markdown`` (the report's header gives that command);
the report says PARTIAL until every planned trial is recorded.
Without ``--resume`` the run directory must not hold records yet (no silent mixing of two runs).

Defaults: the 5 paper planners × 3 tasks of different kinds (binary, regression, multiclass, each with a
Kaggle leaderboard) × 3 trials, the default local model, one matched budget of LLM calls per trial.
"""
from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path
from _bench import ROOT, count, mltb_at_root

sys.path.insert(0, str(ROOT))  # this checkout's mltb_core, as the pytest session (cwd ROOT) imports it
PLANNERS = ("react", "lats", "mcts_outcome", "mcts_shaped", "hierarchical_mcts")
# binary (accuracy), regression (rmse), multiclass (prior-weighted accuracy): all with a leaderboard
TASKS = ("spaceship-titanic", "playground-series-s3e1", "forest-cover-type-kernels-only")
DEFAULT_BUDGET = 60          # LLM calls per trial, the same for every planner (see the report's notes)
# A safety net only: the budget is calls. Under load a call took up to ~60 s here (reports/benchmarks.md),
# and a wall-clock stop would cut slow planners short and break the matched budget.
DEFAULT_TRIAL_SECONDS = 7200.0


class RunError(RuntimeError):
    """The benchmark run could not go on (a usage error, an interrupted or crashed pytest)."""


def pytest_command(args: argparse.Namespace) -> list[str]:
    """The benchmark command: every cell up to ``--trials`` trials. ``suites`` is relative: the run is in
    this checkout (cwd ROOT), and the report names the command the same whichever checkout writes it."""
    command = [sys.executable, "-m", "pytest", "suites", "-p", "no:cacheprovider", "-q",
               "--planner", ",".join(args.planners), "--task", ",".join(args.tasks), "--model", args.model,
               "--trials", str(args.trials), "--max-llm-calls", str(args.max_llm_calls),
               # the step caps as high as the call budget, so the calls are what binds: ReAct's steps are
               # min(--max-iterations, --max-depth), 40 by default, which had capped it below 60 calls
               "--max-iterations", str(args.max_llm_calls), "--max-depth", str(args.max_llm_calls),
               "--max-seconds", f"{args.max_seconds:g}", "--no-llm-cache", "--mltb-out", str(args.out)]
    if args.resume:
        command.append("--resume")
    if args.workers > 1:
        command += ["-n", str(args.workers)]
    else:
        command += ["-p", "no:xdist"]
    return command + list(args.pytest_args)


def records(out: Path) -> list:
    """The run's records, one per (task, planner, model, trial, config) as the tables count them."""
    from mltb_core.analysis.results import latest_records
    from mltb_core.analysis.runstore import RunStore

    return latest_records(RunStore(out).read())


def run_session(command: list[str]) -> int:
    """The pytest session. Ctrl-C reaches pytest as well (one process group): wait while it ends its session
    (the running trials are left unrecorded, their llama.cpp servers stopped) instead of killing it, as
    ``subprocess.call`` would, then pass the interrupt on."""
    with subprocess.Popen(command, cwd=ROOT) as process:
        try:
            return process.wait()
        except KeyboardInterrupt:
            process.wait()
            raise


def run_trials(args: argparse.Namespace) -> None:
    """The benchmark session (the caller rewrites the report after it; so does a failed session)."""
    if not args.resume and records(args.out):
        raise RunError(f"{args.out} already holds trial records: continue it with --resume, or pick a new --out")
    command = pytest_command(args)
    print("$ " + shlex.join(command), flush=True)
    code = run_session(command)
    # 0: every item passed; 1: some trials failed (a planner failure is a finding, not an error)
    if code not in (0, 1):
        write_report(args)
        raise RunError(f"pytest exited {code} (4: usage error, 2: interrupted); records so far are in "
                       f"{args.out}; continue with --resume")


# ---------------------------------------------------------------------------- the report
TITLE = "The planners on a real LLM"
SECTIONS = "run,models,tables,seconds,stop_kinds,stage_comparison,trajectories,machine"


def _shown(path: Path) -> str:
    """A path as the report's command names it: relative to the checkout when inside it (the command then
    runs from the checkout root on any machine)."""
    path = path.resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def report_command(args: argparse.Namespace) -> list[str]:
    """The ``mltb report`` command that writes the report from the run directory's records (the product's
    report: this script only drives the session)."""
    command = ["report", _shown(args.out), "--markdown", _shown(args.report), "--title", TITLE,
               "--sections", SECTIONS]
    if args.notes and Path(args.notes).is_file():
        command += ["--notes", _shown(args.notes)]
    return command + ["--expect-trials", str(len(args.planners) * len(args.tasks) * args.trials)]


def write_report(args: argparse.Namespace) -> str:
    """Rewrite the report with ``mltb report`` (run from the checkout root, as its header names it)."""
    from mltb_core.analysis.runstore import RunStore

    if not RunStore(args.out).results_path.is_file():
        return ""
    command = report_command(args)
    code = mltb_at_root(command)
    if code != 0:
        raise RunError(f"mltb {shlex.join(command)} exited {code}")
    return args.report.read_text(encoding="utf-8")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "mltb-runs" / "local-llm",
                        help="run directory (pytest's --mltb-out)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out")
    parser.add_argument("--report-only", action="store_true", help="rewrite the report from --out's records")
    parser.add_argument("--report", type=Path, default=ROOT / "reports" / "local-llm.md")
    parser.add_argument("--model", default="local", help="a model string (default: the default local model)")
    parser.add_argument("--planners", type=lambda s: tuple(s.split(",")), default=PLANNERS)
    parser.add_argument("--tasks", type=lambda s: tuple(s.split(",")), default=TASKS)
    parser.add_argument("--trials", type=count, default=3)
    parser.add_argument("--max-llm-calls", type=int, default=DEFAULT_BUDGET)
    parser.add_argument("--max-seconds", type=float, default=DEFAULT_TRIAL_SECONDS, help="wall seconds per trial")
    parser.add_argument("--workers", type=count, default=1, help="pytest-xdist workers (one llama.cpp server each)")
    parser.add_argument("--notes", type=Path, default=None, help="markdown appended under 'Notes'")
    parser.add_argument("pytest_args", nargs="*", help="after --: passed to pytest as is")
    args = parser.parse_args(argv)
    args.argv = argv
    args.out = args.out.resolve()
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        if not args.report_only:
            run_trials(args)
        text = write_report(args)
    except RunError as exc:
        print(f"local_llm_table: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        write_report(args)
        print(f"local_llm_table: interrupted; the report covers the trials recorded in {args.out}; continue "
              f"with --resume", file=sys.stderr)
        return 130
    print(text.split("\n## ", 1)[0])
    print(f"report: {args.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
