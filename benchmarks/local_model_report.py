"""reports/local-model.md: what the embedded SmolLM2 does on spaceship-titanic, with and without
state-aware constrained calls.

Run: ``python benchmarks/local_model_report.py [--trials 3] [--max-llm-calls 10] [--workers 2]``.
Runs ``trials`` trials of each planner (react, mcts_shaped, hierarchical_mcts) × constrained calls
on/off with ``--model local``, in ``workers`` processes with a llama.cpp server each (as ``pytest -n``
does), appending every record to ``<out>/records.jsonl`` as it finishes; then reads the records and
their trajectories and writes the report. ``--report-only`` rewrites the report from the records
already there (e.g. after an interrupted run).

"Without constrained calls" is the local backend's default before issue 9: the reply is still
grammar-constrained to a paper-format call naming one offered tool, but its bindings, columns and
files are free text. "With" adds the per-node schema of mltb_core/toolkit/constraints.py.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from _bench import ROOT, count

from mltb_core.stages.events import EventKind

PLANNERS = ("react", "mcts_shaped", "hierarchical_mcts")
TASK = "spaceship-titanic"


def jobs(trials: int) -> list[tuple[str, bool, int]]:
    """(planner, constrained, trial), interleaved so a short run still covers every cell."""
    return [(planner, constrained, trial) for trial in range(trials) for planner in PLANNERS
            for constrained in (True, False)]


def worker(index: int, workers: int, trials: int, budget: int, max_seconds: float, out: Path) -> None:
    """Run this worker's share of the jobs; one JSON line per finished trial."""
    from mltb_core.bench.tasks import get_task
    from mltb_core.config import TrialConfig
    from mltb_core.llm.local import LocalServer, resolve_model_path
    from mltb_core.runner.trial import run_trial

    task = get_task(TASK)
    done = {(r["record"]["planner"], r["constrained"], r["record"]["trial"]) for r in load_rows(out)}
    # Held here for the whole run: the trials' solver processes join it and find the prefix warm.
    server = LocalServer(resolve_model_path(("name", "smollm2")))
    server.acquire()
    try:
        for number, (planner, constrained, trial) in enumerate(jobs(trials)):
            if number % workers != index or (planner, constrained, trial) in done:
                continue  # another worker's, or already recorded by an earlier (interrupted) run
            config = TrialConfig(planner=planner, model="local:smollm2", trial=trial, max_llm_calls=budget,
                                 max_seconds=max_seconds, constrained_calls=constrained, llm_cache=False)
            start = time.monotonic()
            record = run_trial(task, config, out / f"{planner}-{'c' if constrained else 'u'}-{trial}")
            row = {"constrained": constrained, "elapsed": time.monotonic() - start, "record": record.to_dict()}
            with open(out / "records.jsonl", "a") as fh:
                fh.write(json.dumps(row, default=str) + "\n")
            print(f"[worker {index}] {planner} constrained={constrained} trial {trial}: {record.outcome}, "
                  f"stage {record.stage_reached}, {record.llm_calls} calls, {record.wall_seconds:.0f} s", flush=True)
    finally:
        server.release()


def run(trials: int, budget: int, max_seconds: float, workers: int, out: Path) -> None:
    procs = []
    for index in range(workers):
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYTEST_XDIST_WORKER_COUNT=str(workers))
        if workers > 1:
            env["PYTEST_XDIST_WORKER"] = f"gw{index}"
        procs.append(subprocess.Popen([sys.executable, __file__, "--worker", str(index), "--workers", str(workers),
                                       "--trials", str(trials), "--max-llm-calls", str(budget),
                                       "--max-seconds", str(max_seconds), "--out", str(out)], env=env))
    for proc in procs:
        proc.wait()


# ---------------------------------------------------------------- the report
def trajectory_counts(path: str | None) -> dict[str, object]:
    """Replies, parsed calls, executed-ok calls and the first line of each tool error."""
    counts: dict[str, object] = {"replies": 0, "invalid": 0, "executed": 0, "ok": 0, "errors": collections.Counter(),
                                 "tools": collections.Counter()}
    if not path or not Path(path).exists():
        return counts
    for line in Path(path).read_text().splitlines():
        try:
            step = json.loads(line)
        except json.JSONDecodeError:
            continue
        kind = step.get("step_type")
        if kind == EventKind.INVALID_REPLY:
            counts["invalid"] += 1
        elif kind == EventKind.TOOL_STARTED:
            for call in step.get("tools_to_execute", []):
                counts["tools"][call.get("tool_name")] += 1
        elif kind == EventKind.TOOL_COMPLETED:
            counts["executed"] += 1
            for result in step.get("tool_results", []):
                if result.get("ok"):
                    counts["ok"] += 1
                else:
                    first = (result.get("content_preview") or "").splitlines()[0][:110] if result.get("content_preview") else ""
                    counts["errors"][first] += 1
    counts["replies"] = counts["executed"] + counts["invalid"]
    return counts


def load_rows(out: Path) -> list[dict]:
    path = out / "records.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _pct(num: int, den: int, interval: bool = False) -> str:
    """``75 % (3/4)``; with ``interval`` (trial-level shares only: calls of one trial are not independent)
    the 95 % Clopper-Pearson interval too (the interval every table gives a rate)."""
    if not den:
        return "–"
    text = f"{100 * num / den:.0f} % ({num}/{den}"
    if interval:
        import math

        from mltb_core.analysis.stats import outward, rate_interval

        ci = rate_interval(num, den)   # ends rounded outward, as every interval mltb prints
        text += f"; 95 % CI {outward(100 * ci.low, 0, math.floor)}–{outward(100 * ci.high, 0, math.ceil)} %"
    return text + ")"


def write_report(out: Path, report: Path, args: argparse.Namespace) -> str:
    from mltb_core.stages.rewards import REWARD_STAGES

    rows = load_rows(out)
    cells: dict[tuple[str, bool], list[dict]] = collections.defaultdict(list)
    for row in rows:
        cells[(row["record"]["planner"], row["constrained"])].append(row)
    lines = ["# The embedded model (SmolLM2-135M-Instruct) on spaceship-titanic", "",
             f"Generated by `python benchmarks/local_model_report.py --trials {args.trials} --max-llm-calls "
             f"{args.max_llm_calls} --max-seconds {args.max_seconds:g} --workers {args.workers}` on "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {os.cpu_count()} cores shared with other jobs "
             f"(load average {', '.join(f'{x:.1f}' for x in os.getloadavg())} when written).", "",
             f"**n = {len(rows)} trials in all** ({args.trials} per cell asked). Each trial: "
             f"`--model local`, at most {args.max_llm_calls} LLM calls and {args.max_seconds:g} s, no LLM cache, "
             f"{args.workers} worker processes with one llama.cpp server each. Shares come with a 95 % exact "
             "(Clopper-Pearson) interval where the unit is a trial (consistency); call-level shares are counts "
             "only, since the calls of one trial are not independent. One task and one model: the figures "
             "describe SmolLM2 on spaceship-titanic under these budgets, nothing wider.", "",
             "*Constrained* = state-aware constrained calls (`constrained_calls=True`, the default for local "
             "models): per node a JSON schema with only the offered tools whose inputs exist, bindings to "
             "existing objects of the right kind, columns of the bound frame, readable files "
             "(mltb_core/toolkit/constraints.py), enforced by llama.cpp as a grammar. *Unconstrained* "
             "(`--no-constrained-calls`) = the previous local default: the reply is still forced into a "
             "paper-format call naming an offered tool, but its arguments are free.", "",
             "## Summary", "",
             "| planner | constrained | n | valid (consistency) | median stage | calls that parse | "
             "tool calls that execute | replies that execute | median wall s | LLM calls/s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    details = []
    for planner in PLANNERS:
        for constrained in (True, False):
            group = cells.get((planner, constrained), [])
            if not group:
                lines.append(f"| {planner} | {'yes' if constrained else 'no'} | 0 | – | – | – | – | – | – | – |")
                continue
            records = [g["record"] for g in group]
            counts = [trajectory_counts(r.get("trajectory")) for r in records]
            replies = sum(c["replies"] for c in counts)
            invalid = sum(c["invalid"] for c in counts)
            executed = sum(c["executed"] for c in counts)
            ok = sum(c["ok"] for c in counts)
            counted = [r for r in records if r["outcome"] != "infra_error"]
            valid = sum(1 for r in counted if r["valid"])
            calls = sum(r["llm_calls"] for r in records)
            wall = sum(r["wall_seconds"] for r in records)
            lines.append(f"| {planner} | {'yes' if constrained else 'no'} | {len(records)} | "
                         f"{_pct(valid, len(counted), interval=True)} | {statistics.median(r['stage_reached'] for r in records):g} | "
                         f"{_pct(replies - invalid, replies)} | {_pct(ok, executed)} | {_pct(ok, replies)} | "
                         f"{statistics.median(r['wall_seconds'] for r in records):.0f} | "
                         f"{calls / wall if wall else 0:.2f} |")
            funnel = ", ".join(f"≥{s.number} {sum(1 for r in records if r['stage_reached'] >= s.number)}"
                               for s in REWARD_STAGES)
            errors = collections.Counter()
            tools = collections.Counter()
            for c in counts:
                errors.update(c["errors"])
                tools.update(c["tools"])
            outcomes = collections.Counter(r["outcome"] for r in records)
            stops = collections.Counter((r.get("stop_reason") or "")[:60] for r in records)
            details += [f"### {planner}, constrained calls {'on' if constrained else 'off'} (n = {len(records)})", "",
                        f"- stage funnel (trials reaching at least stage s): {funnel}",
                        f"- outcomes: {dict(outcomes)}; stop reasons: {dict(stops)}",
                        f"- stages reached: {sorted(r['stage_reached'] for r in records)}",
                        f"- most called tools: {', '.join(f'{t} ×{n}' for t, n in tools.most_common(6)) or 'none'}",
                        "- commonest tool errors: " + ("; ".join(f"`{e}` ×{n}" for e, n in errors.most_common(3))
                                                       or "none"),
                        f"- LLM calls {calls}, tokens in {sum(r['tokens_in'] for r in records)}, "
                        f"LLM seconds {sum(r['llm_seconds'] for r in records):.0f}, tool seconds "
                        f"{sum(r['tool_seconds'] for r in records):.0f}", ""]
    lines += ["", "Columns: *valid* = trials with a valid submission (infra errors excluded); *calls that "
              "parse* = replies that gave a tool call; *tool calls that execute* = executed calls that "
              "returned without error; *replies that execute* = the same over every reply; *LLM calls/s* = LLM "
              "calls over summed trial wall time.", "", "## Per cell: where the trials stop", ""] + details
    if args.notes:
        lines += ["## Notes", "", Path(args.notes).read_text().strip(), ""]
    text = "\n".join(lines) + "\n"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(text)
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=count, default=3, help="trials per planner and constrained on/off")
    parser.add_argument("--max-llm-calls", type=int, default=10)
    parser.add_argument("--max-seconds", type=float, default=600.0, help="wall-time budget per trial")
    parser.add_argument("--workers", type=count, default=2)
    parser.add_argument("--out", type=Path, default=Path("/tmp/mltb-local-model-report"))
    parser.add_argument("--report", type=Path, default=ROOT / "reports" / "local-model.md")
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--notes", type=Path, help="markdown appended under 'Notes' (figures measured by hand)")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.worker is not None:
        worker(args.worker, args.workers, args.trials, args.max_llm_calls, args.max_seconds, args.out)
        return
    if not args.report_only:
        run(args.trials, args.max_llm_calls, args.max_seconds, args.workers, args.out)
    print(write_report(args.out, args.report, args))


if __name__ == "__main__":
    main()
