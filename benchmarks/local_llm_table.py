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
import json
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


def reply_limit(model: str) -> int | None:
    """Tokens a reply of ``model`` may run to, when mltb sets it (its named local models and GGUF files)."""
    from mltb_core.llm.backends import parse_model
    from mltb_core.llm.models import get_model, reply_tokens_for

    ref = parse_model(model)
    if ref.kind != "local":
        return None
    kind, text = ref.value
    return reply_tokens_for(get_model(text).filename if kind == "name" else text)


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


def stage_comparison(recs: list) -> list[str]:
    """Do the planners differ in the stage their trials reach? Consistency counts valid submissions only; the
    stage a trial reached (the paper's stage-wise reward) also separates planners whose trials all fail.
    Per planner: the median stage and the share that fitted a model, with its exact interval; then a
    Friedman test over blocks of one task and one trial seed, with its Holm-adjusted pairwise post-hoc."""
    import statistics

    from mltb_core.analysis.ranking import friedman_text, stage_blocks
    from mltb_core.analysis.results import counted_records
    from mltb_core.analysis.stats import friedman_test, rate_interval
    from mltb_core.analysis.tables import planner_rank
    from mltb_core.bench.stages import stage_index

    counted = counted_records(recs)
    modeling = stage_index("modeling")
    lines = ["| planner | trials | stage reached (median, min–max) | fitted a model (stage ≥ "
             f"{modeling}) [95 % CI] |", "|---|---|---|---|"]
    for planner in sorted({r.planner for r in counted}, key=planner_rank):
        stages = [r.stage_reached for r in counted if r.planner == planner]
        fitted = sum(stage >= modeling for stage in stages)
        ci = rate_interval(fitted, len(stages))
        lines.append(f"| {planner} | {len(stages)} | {statistics.median(stages):g} ({min(stages)}–{max(stages)}) | "
                     f"{fitted}/{len(stages)} [{ci.low:.2f}, {ci.high:.2f}] |")
    blocks = stage_blocks(counted, lambda r: r.planner)
    result = friedman_test(blocks)
    lines += ["", "- interval: exact Clopper-Pearson over the planner's trials on every task together", "",
              *friedman_text(result, {}, blocks="blocks (task, trial seed)",
                             measure="the stage each trial reached, ties sharing a rank"), "",
              f"- Blocks: {len(result.tasks)} of the {len(blocks)} (task, trial) pairs recorded have a trial of "
              f"every planner; only those enter the test. Every trial of a task uses the same data split, and a trial's "
              f"seed depends on its index alone, so the planners of a block also share the sampler's seed stream.",
              "- What it covers: these tasks and this model; with so few tasks it says nothing about tasks in "
              "general. The stage is ordinal (stage 9 is not 'three times' stage 3), so only ranks within a block "
              "count."]
    return lines


def _trajectory(out: Path, rec) -> list[dict] | None:
    """A recorded trial's steps, or None when its trajectory file is not in the run directory."""
    from mltb_core.planners.trajectory import read_trajectory

    path = out / rec.trajectory if rec.trajectory else None
    return list(read_trajectory(path)) if path is not None and path.is_file() else None


def _calls(steps: list[dict]) -> list[dict]:
    """The tool calls a trajectory started, in order."""
    return [call for step in steps if step.get("step_type") == "tool_execution_initiation"
            for call in step.get("tools_to_execute", [])]


def trajectory_findings(recs: list, out: Path, budget: int, reply_tokens: int | None) -> list[str]:
    """What the trials' trajectories show about where they ended, counted from ``OUT/<record's trajectory>``:
    LATS's judge (graded or not), how trials that fitted a model failed to write a submission, ReAct's repeated
    calls, why trials stayed at stage 1, and replies cut off at the reply limit. Each count says over how many
    trials it runs; a trial whose trajectory file is missing is named, never silently left out."""
    from collections import Counter

    from mltb_core.analysis.results import counted_records, markdown_text
    from mltb_core.analysis.tables import planner_rank
    from mltb_core.bench.stages import stage_index
    from mltb_core.llm.base import CUT_OFF

    have, missing = [], []
    for rec in counted_records(recs):
        steps = _trajectory(out, rec)
        if steps is None:
            missing.append(f"{rec.planner} on {rec.task}, trial {rec.trial}")
        else:
            have.append((rec, steps))
    lines = [f"Counted from the trajectories of {len(have)} of the {len(have) + len(missing)} counted trials"
             + (f" (no trajectory file in the run directory: {'; '.join(missing)})" if missing else "") + ".", ""]
    if not have:
        return lines

    judged = [steps for rec, steps in have if any(s.get("step_type") == "judge_score" for s in steps)]
    if judged:
        grades = [s for steps in judged for s in steps if s.get("step_type") == "judge_score"]
        per_trial = sorted(sum(s.get("n", 1) for s in steps if s.get("step_type") == "llm_call"
                               and s.get("purpose") == "evaluate") for steps in judged)
        spread = f"{per_trial[0]}" if per_trial[0] == per_trial[-1] else f"{per_trial[0]}–{per_trial[-1]}"
        lines.append(f"- LATS's judge gave a grade the parser read in {sum(bool(s.get('scored')) for s in grades)} "
                     f"of {len(grades)} evaluations ({len(judged)} trials); the others counted as the lowest grade. "
                     f"The judge's evaluations are LLM calls within the same {budget}-call budget: {spread} of each "
                     f"LATS trial's calls, the rest proposals.")

    modeling = stage_index("modeling")
    fitted = [(rec, _calls(steps)) for rec, steps in have if rec.stage_reached >= modeling and not rec.valid]
    if fitted:
        names = [{c["tool_name"] for c in calls} for _, calls in fitted]
        saved = sorted({c.get("tool_args", {}).get("bindings", {}).get("df", "?") for _, calls in fitted
                        for c in calls if c["tool_name"] == "save_dataframe_to_csv"})
        lines.append(f"- {len(fitted)} trial(s) fitted a model (stage {modeling}) without a valid submission; "
                     f"{sum('predict_target' in n for n in names)} of them predicted with `predict_target`, "
                     f"{sum('convert_to_dataframe' in n for n in names)} turned predictions into a frame with "
                     f"`convert_to_dataframe`, and the frames they saved as the submission were "
                     f"{', '.join(markdown_text(s) for s in saved) or 'none'} (names the model chose). The paper's "
                     "toolset has no `create_submission` (the extended toolset's attaches the ids in one call), so "
                     "the file is assembled by hand: `get_features` for the ids, `convert_to_dataframe` for the "
                     "predictions, `concatenate_dataframes` with `axis=1`, then `save_dataframe_to_csv`.")

    react = []
    for rec, steps in have:
        if rec.planner == "react":
            keys = [json.dumps([c["tool_name"], c.get("tool_args")], sort_keys=True) for c in _calls(steps)]
            prompts = [(s.get("usage") or {}).get("prompt_tokens", 0) for s in steps
                       if s.get("step_type") == "llm_call"]
            growth = (f", prompt +{(prompts[-1] - prompts[0]) / (len(prompts) - 1):,.0f} tokens per call"
                      if len(prompts) > 1 else "")
            react.append(f"{rec.task} trial {rec.trial}: {len(keys) - len(set(keys))} of {len(keys)}{growth}")
    if react:
        lines.append("- ReAct's tool calls that repeated an earlier call of the same trial (same tool, same "
                     f"arguments): {'; '.join(sorted(react))}. Every reply and observation, repeats included, stays "
                     "in the conversation ReAct sends back, until the context is full.")

    stuck = [_calls(steps) for rec, steps in have if rec.stage_reached == 1]
    if stuck:
        never_test = sum(not any(c["tool_name"] == "read_data" and "test" in str(
            c.get("tool_args", {}).get("func_kwargs", {}).get("filepath", "")) for c in calls) for calls in stuck)
        self_concat = sum(any(c["tool_name"] == "concatenate_train_test"
                              and (b := c.get("tool_args", {}).get("bindings", {})).get("train_df")
                              and b.get("train_df") == b.get("test_df") for c in calls) for calls in stuck)
        lines.append(f"- {len(stuck)} trial(s) ended at stage 1 (train data loaded); {never_test} of them never "
                     f"called `read_data` on the test file, and {self_concat} bound the same frame to both "
                     "arguments of `concatenate_train_test`.")

    shown = Counter()
    for rec, steps in have:
        for step in steps:
            if step.get("step_type") == "reward_feedback":
                shown[rec.planner, "all"] += 1
                shown[rec.planner, "shown"] += step.get("shown_to_model") is True
    if shown:
        told = sorted({p for p, _ in shown}, key=planner_rank)
        lines.append("- Stage feedback (the stage a node reached and what to do next, e.g. \"read the test CSV\") "
                     "shown to the model after its tool calls, per planner: "
                     + "; ".join(f"{p}: {shown[p, 'shown']} of {shown[p, 'all']}" for p in told)
                     + ". mltb follows the paper (its section 5.1 gives this feedback to the MCTS variants), so "
                     "ReAct and LATS see only each tool's own result.")

    cut = Counter()
    for rec, steps in have:
        for step in steps:
            if step.get("step_type") != "llm_call":
                continue
            if step.get("purpose") == "evaluate":    # LATS's judge replies in text: cut off when it used every token
                cut[rec.planner, "all"] += 1
                cut[rec.planner, "cut"] += bool(reply_tokens) and \
                    (step.get("usage") or {}).get("completion_tokens", 0) >= reply_tokens
            else:
                for cand in step.get("candidates") or []:
                    cut[rec.planner, "all"] += 1
                    cut[rec.planner, "cut"] += str(cand.get("error") or "").startswith(CUT_OFF)
    planners = sorted({p for p, _ in cut}, key=planner_rank)
    limit = f"the {reply_tokens}-token reply limit" if reply_tokens else "the reply limit"
    lines.append(f"- Replies cut off at {limit} (proposals reported to the model as cut off, and LATS judge "
                 "replies that used every token), per planner: "
                 + "; ".join(f"{p}: {cut[p, 'cut']} of {cut[p, 'all']}" for p in planners) + ".")
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
        lines += ["## Do the planners differ in the stage they reach?", ""] + stage_comparison(recs) + [""]
        lines += ["## What the trajectories show", ""] + trajectory_findings(
            recs, args.out, args.max_llm_calls, reply_limit(args.model)) + [""]
    if args.notes and Path(args.notes).is_file():
        source = args.notes.resolve()
        source = source.relative_to(ROOT) if source.is_relative_to(ROOT) else source
        lines += ["## Notes", "", f"Written by hand (`{source}`); the sections above are generated from the records.",
                  "", Path(args.notes).read_text().strip(), ""]
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
