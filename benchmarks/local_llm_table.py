"""reports/local-llm.md: the paper's Tables 4-6 (consistency, percentiles, cost, stage funnel) on a real LLM.

Run (the long run: hours on 2 cores; interrupt it any time and continue with ``--resume``)::

    python benchmarks/local_llm_table.py --out mltb-runs/local-llm --resume

It drives the benchmark itself, ``pytest suites/ ... --mltb-out OUT --resume``, once per round: round t
asks for ``--trials t``, so mltb's own resume machinery runs exactly one more trial of every
(task, planner) cell per round and a partial report is always balanced across cells. After every round
(and with ``--report-only``) it rewrites the report from ``OUT/results.jsonl`` with mltb's own tables;
the report says PARTIAL until every planned trial is recorded. Without ``--resume`` the run directory
must not hold records yet (no silent mixing of two runs).

Defaults: the 5 paper planners × 3 tasks of different kinds (binary, regression, multiclass, each with a
Kaggle leaderboard) × 3 trials, the default local model, one matched budget of LLM calls per trial.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's mltb_core, as the pytest rounds (cwd ROOT) import it
PLANNERS = ("react", "lats", "mcts_outcome", "mcts_shaped", "hierarchical_mcts")
# binary (accuracy), regression (rmse), multiclass (prior-weighted accuracy): all with a leaderboard
TASKS = ("spaceship-titanic", "playground-series-s3e1", "forest-cover-type-kernels-only")
DEFAULT_BUDGET = 60          # LLM calls per trial, the same for every planner (see the report's notes)
# A safety net only: the budget is calls. Under load a call took up to ~60 s here (reports/benchmarks.md),
# and a wall-clock stop would cut slow planners short and break the matched budget.
DEFAULT_TRIAL_SECONDS = 7200.0
PARTIAL = "**PARTIAL**"


class RunError(RuntimeError):
    """The benchmark run could not go on (a usage error, an interrupted or crashed pytest)."""


def pytest_command(args: argparse.Namespace, trials: int, resume: bool) -> list[str]:
    """The benchmark command of one round: every cell up to ``trials`` trials. ``suites`` is relative: rounds
    run in this checkout (cwd ROOT), and the report names the command the same whichever checkout writes it."""
    command = [sys.executable, "-m", "pytest", "suites", "-p", "no:cacheprovider", "-q",
               "--planner", ",".join(args.planners), "--task", ",".join(args.tasks), "--model", args.model,
               "--trials", str(trials), "--max-llm-calls", str(args.max_llm_calls),
               # the step caps as high as the call budget, so the calls are what binds: ReAct's steps are
               # min(--max-iterations, --max-depth), 40 by default, which had capped it below 60 calls
               "--max-iterations", str(args.max_llm_calls), "--max-depth", str(args.max_llm_calls),
               "--max-seconds", f"{args.max_seconds:g}", "--no-llm-cache", "--mltb-out", str(args.out)]
    if resume:
        command.append("--resume")
    if args.workers > 1:
        command += ["-n", str(args.workers)]
    else:
        command += ["-p", "no:xdist"]
    return command + list(args.pytest_args)


def records(out: Path) -> list:
    """The run's records, one per (task, planner, model, trial, config) as the tables count them."""
    from mltb_core.analysis.results import RESULTS_FILE, latest_records, read_records

    path = out / RESULTS_FILE
    return latest_records(read_records(path)) if path.exists() else []


def run_round(command: list[str]) -> int:
    """One pytest round. Ctrl-C reaches pytest as well (one process group): wait while it ends its session
    (the running trial is left unrecorded, its llama.cpp server stopped) instead of killing it, as
    ``subprocess.call`` would, then pass the interrupt on."""
    with subprocess.Popen(command, cwd=ROOT) as process:
        try:
            return process.wait()
        except KeyboardInterrupt:
            process.wait()
            raise


def run_rounds(args: argparse.Namespace) -> None:
    """One pytest run per trial round; the report is rewritten after each."""
    if not args.resume and records(args.out):
        raise RunError(f"{args.out} already holds trial records: continue it with --resume, or pick a new --out")
    for trial in range(1, args.trials + 1):
        command = pytest_command(args, trial, resume=args.resume or trial > 1)
        print("$ " + shlex.join(command), flush=True)
        code = run_round(command)
        # 0: every item passed; 1: some trials failed (a planner failure is a finding, not an error)
        if code not in (0, 1):
            write_report(args)
            raise RunError(f"pytest exited {code} in round {trial} (4: usage error, 2: interrupted); "
                           f"records so far are in {args.out}; continue with --resume")
        write_report(args)


# ---------------------------------------------------------------------------- the report
def model_facts(model: str) -> str:
    """The model string, the file it names and that file's SHA-256 (pinned for named models)."""
    from mltb_core.llm.backends import parse_model
    from mltb_core.llm.models import get_model

    ref = parse_model(model)
    if ref.kind != "local":
        return f"`{model}`"
    kind, text = ref.value
    if kind == "name":
        named = get_model(text)
        return f"`{model}` = {named.note.split(';')[0]}, `{named.filename}`, {named.size:,} bytes, SHA-256 `{named.sha256}`"
    digest = hashlib.sha256(Path(text).read_bytes()).hexdigest() if Path(text).is_file() else "file missing"
    return f"`{model}`, SHA-256 `{digest}`"


def machine_facts() -> str:
    cpu = "unknown"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        ram = f", {pages / 2**30:.1f} GiB RAM"
    except (ValueError, OSError, AttributeError):
        ram = ""
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{cpu}, {os.cpu_count()} cores{ram}, {platform.system()} {platform.release()}, Python " \
           f"{platform.python_version()}; load average {load} when written"


def cells(recs: list) -> list:
    """The counted records grouped by (planner, task), planners in the paper's order, tasks by name."""
    from mltb_core.analysis.results import counted_records, group_by
    from mltb_core.analysis.tables import planner_rank

    return sorted(group_by(counted_records(recs), "planner", "task").items(),
                  key=lambda kv: (planner_rank(kv[0][0]), kv[0][1]))


def trial_seconds_table(recs: list) -> list[str]:
    """Seconds, LLM calls and stage per trial, by planner and task (median and range)."""
    import statistics

    lines = ["| planner | task | n | wall s per trial (median, min–max) | LLM s per trial | LLM calls | "
             "stage reached (median, max) |", "|---|---|---|---|---|---|---|"]
    for (planner, task), cell in cells(recs):
        wall = [r.wall_seconds for r in cell]
        lines.append(f"| {planner} | {task} | {len(cell)} | {statistics.median(wall):.0f} ({min(wall):.0f}–"
                     f"{max(wall):.0f}) | {statistics.median(r.llm_seconds for r in cell):.0f} | "
                     f"{statistics.median(r.llm_calls for r in cell):g} | "
                     f"{statistics.median(r.stage_reached for r in cell):g}, {max(r.stage_reached for r in cell)} |")
    return lines


def stop_table(recs: list) -> list[str]:
    """Why each counted trial ended, by planner and task: the stage it reached, the stage it did not pass,
    and its stop reason. Stop reasons come from the trial's worker (untrusted text), so they are escaped,
    and a trailing parenthesis (the server's error detail, with numbers that differ per trial) is cut so
    alike stops group together."""
    import re
    from collections import Counter

    from mltb_core.analysis.results import markdown_text
    from mltb_core.bench.stages import REWARD_STAGES

    names = {s.number: s.name for s in REWARD_STAGES}    # mltb's names, never the record's stage_name
    detail = re.compile(r"\s*\((?:[^()]|\([^()]*\))*\)\s*$")
    lines = ["| planner | task | trials | stage reached | not passed | why the trial ended |",
             "|---|---|---|---|---|---|"]
    for (planner, task), cell in cells(recs):
        stops = Counter((r.valid, r.stage_reached, detail.sub("", r.stop_reason or "") or "(none given)")
                        for r in cell)
        for (valid, stage, reason), n in sorted(stops.items(), key=lambda kv: (-kv[0][1], kv[0][2])):
            reached = f"{stage} {names[stage]}" if stage in names else str(stage)
            blocked = "– (valid submission)" if valid else \
                f"{stage + 1} {names[stage + 1]}" if stage + 1 in names else "–"
            lines.append(f"| {planner} | {task} | {n} | {reached} | {blocked} | {markdown_text(reason)} |")
    return lines


def run_argv(argv: list[str]) -> list[str]:
    """The arguments that run (and continue) the measurement: ``argv`` without --report-only, --report and --notes,
    so a report rewritten from the records names the command that makes more of them."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--report-only" or arg.startswith(("--report=", "--notes=")):
            continue
        elif arg in ("--report", "--notes"):
            skip = True
        else:
            out.append(arg)
    if "--resume" not in out:
        out.append("--resume")
    return out


def write_report(args: argparse.Namespace) -> str:
    from mltb_core.analysis.provenance import git_commit, trial_code
    from mltb_core.analysis.results import counted_records
    from mltb_core.analysis.tables import build_tables

    recs = records(args.out)
    planned = len(args.planners) * len(args.tasks) * args.trials
    done = len(counted_records(recs))
    partial = done < planned
    command = shlex.join(["python", "benchmarks/local_llm_table.py", *run_argv(args.argv)])
    cached = sum(r.tokens_in_cached for r in recs)
    tokens_in = sum(r.tokens_in for r in recs)
    lines = ["# The planners on a real LLM" + (f" — {PARTIAL}" if partial else ""), ""]
    if partial:
        lines += [f"{PARTIAL}: {done} of {planned} planned trials recorded; the run goes on "
                  f"(`{command}` continues it). Figures below cover only the recorded trials.", ""]
    lines += [f"- command: `{command}` (each round runs `{shlex.join(pytest_command(args, args.trials, True)[1:])}` "
              f"with `--trials` 1, 2, … {args.trials})",
              f"- code commit: `{git_commit() or 'not a git checkout'}` (this checkout, which wrote the report); "
              f"trials run by: "
              f"{trial_code(recs) or 'none yet'} (each record's `code`; older records did not record it)",
              f"- model: {model_facts(args.model)}",
              f"- machine: {machine_facts()}",
              f"- written: {_dt.datetime.now(_dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
              f"- design: planners {', '.join(args.planners)} × tasks {', '.join(args.tasks)} × {args.trials} "
              f"trials; every trial at most {args.max_llm_calls} LLM calls (one matched budget for every planner) "
              f"and {args.max_seconds:g} s; no LLM response cache (tables count real calls)",
              f"- records: {len(recs)} ({done} counted, infra errors apart); prompt tokens {tokens_in:,}, of which "
              f"{cached:,} served from the server's prompt cache "
              f"({(cached / tokens_in if tokens_in else 0):.0%})", ""]
    for table in build_tables(recs):
        lines += [f"## {table.title}", "", table.render("github"), ""]
        lines += [f"- {note}" for note in table.notes] + ([""] if table.notes else [])
    if recs:
        lines += ["## Seconds per trial", ""] + trial_seconds_table(recs) + [""]
        lines += ["## Where trials ended", ""] + stop_table(recs) + [""]
    if args.notes and Path(args.notes).is_file():
        lines += ["## Notes", "", Path(args.notes).read_text().strip(), ""]
    text = "\n".join(lines)
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(text)
    return text


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
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--max-llm-calls", type=int, default=DEFAULT_BUDGET)
    parser.add_argument("--max-seconds", type=float, default=DEFAULT_TRIAL_SECONDS, help="wall seconds per trial")
    parser.add_argument("--workers", type=int, default=1, help="pytest-xdist workers (one llama.cpp server each)")
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
            run_rounds(args)
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
