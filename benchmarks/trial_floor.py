"""How far a real-LLM trial's wall time is from its floor: issue 62's time model on the trial's own calls.

    python benchmarks/trial_floor.py [--runs reports/local-llm] [--planners react,mcts_shaped]
                                     [--a 22.0] [--a2 4.3] [--b 70] [--b2 14] [--json]

For every trial of the run's records (``results.jsonl``) whose trajectory is there, each LLM call's figures
come from the trajectory (``usage``: prompt, cached and completion tokens, seconds). The time model is

    seconds = a·uncached + a2·uncached·depth + b·completion + b2·completion·context

with ``uncached = prompt - cached`` (what the server evaluated), ``depth`` the mean position of those tokens
in the context (cached + uncached / 2, per call of a request) and ``context`` the mean context a decoded token
sees (prompt + completion / 2). The floor is the model at the idle single-thread rates measured for the
issue on a 2-core box (ms per token; a2 and b2 per 1k tokens of depth; the options change them) plus the
trial's recorded tool seconds; ``ratio = wall / floor`` per trial, and the mean per planner. The rates the
trial's own calls imply (a least-squares fit of the four terms, non-negative, over the planner's calls) are
printed next to them: they say which term binds. Reads records only; no LLM is called.
"""
from __future__ import annotations

import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tabulate import tabulate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import ROOT, Figure, emit, parser as bench_parser  # noqa: E402

# The floor's rates (issue 62: measured on an idle 2-core box, 1 thread): ms per token, and ms per token per
# 1k tokens of depth (prompt) or of context (decode).
FLOOR_RATES = {"a": 22.0, "a2": 4.3, "b": 70.0, "b2": 14.0}


@dataclass
class Call:
    uncached: float
    depth: float       # thousands of tokens
    completion: float
    context: float     # thousands of tokens
    seconds: float

    def terms(self) -> np.ndarray:
        """The model's four terms in seconds per ms-rate: a, a2, b, b2."""
        return np.array([self.uncached, self.uncached * self.depth, self.completion,
                         self.completion * self.context]) / 1000.0


def calls_of(trajectory: Path) -> list[Call]:
    calls = []
    for line in trajectory.read_text().splitlines():
        event = json.loads(line)
        if event.get("step_type") != "llm_call":
            continue
        usage = event.get("usage") or {}
        n = max(int(usage.get("calls", 1)), 1)
        prompt, cached = float(usage.get("prompt_tokens", 0)), float(usage.get("cached_input_tokens", 0))
        completion = float(usage.get("completion_tokens", 0))
        uncached = max(prompt - cached, 0.0)
        # one request of n calls: per call, the same prompt; its uncached tokens sit at its end
        per_prompt = prompt / n
        depth = (per_prompt - uncached / (2 * n)) / 1000.0
        context = (per_prompt + completion / (2 * n)) / 1000.0
        calls.append(Call(uncached, max(depth, 0.0), completion, context, float(usage.get("seconds", 0.0))))
    return calls


def floor_seconds(calls: list[Call], rates: dict[str, float]) -> float:
    vector = np.array([rates["a"], rates["a2"], rates["b"], rates["b2"]])
    return float(sum(call.terms() @ vector for call in calls))


def fitted_rates(calls: list[Call]) -> tuple[dict[str, float], float]:
    """Non-negative least squares of the call seconds on the four terms (ms rates) and its R²."""
    from scipy.optimize import nnls

    x = np.array([c.terms() for c in calls])
    y = np.array([c.seconds for c in calls])
    coefficients, _residual = nnls(x, y)
    predicted = x @ coefficients
    total = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float(((y - predicted) ** 2).sum()) / total if total else float("nan")
    return dict(zip(("a", "a2", "b", "b2"), map(float, coefficients))), r2


def main(argv=None) -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--runs", default="reports/local-llm", help="run directories, comma-separated")
    parser.add_argument("--planners", default="react,mcts_shaped")
    for name, value in FLOOR_RATES.items():
        parser.add_argument(f"--{name}", type=float, default=value, help=f"floor rate {name} (default {value})")
    args = parser.parse_args(argv)
    rates = {name: getattr(args, name) for name in FLOOR_RATES}
    planners = [p for p in args.planners.split(",") if p]
    rows: dict[str, list[tuple[float, float, float, list[Call]]]] = {p: [] for p in planners}
    for run in args.runs.split(","):
        directory = Path(run) if Path(run).is_absolute() else ROOT / run
        for line in (directory / "results.jsonl").read_text().splitlines():
            record = json.loads(line)
            trajectory = directory / str(record.get("trajectory") or "")
            if record.get("planner") not in rows or not trajectory.is_file():
                continue
            calls = calls_of(trajectory)
            floor = floor_seconds(calls, rates) + float(record.get("tool_seconds") or 0.0)
            rows[record["planner"]].append((float(record["wall_seconds"]), floor,
                                            float(record.get("llm_seconds") or 0.0), calls))
    table, figures = [], []
    for planner, trials in rows.items():
        if not trials:
            continue
        every = [call for *_rest, calls in trials for call in calls]
        fit, r2 = fitted_rates(every)
        wall = statistics.fmean(t[0] for t in trials)
        floor = statistics.fmean(t[1] for t in trials)
        ratio = statistics.fmean(t[0] / t[1] for t in trials)
        uncached = statistics.fmean(sum(c.uncached for c in t[3]) for t in trials)
        fitted_parts = np.array([c.terms() for c in every]).sum(axis=0) * np.array(list(fit.values()))
        binds = ("a", "a2", "b", "b2")[int(np.argmax(fitted_parts))]
        table.append([planner, len(trials), f"{wall:,.0f}", f"{floor:,.0f}", f"{ratio:.2f}", f"{uncached:,.0f}",
                      " / ".join(f"{fit[k]:.1f}" for k in ("a", "a2", "b", "b2")), f"{r2:.2f}", binds])
        figures.append(Figure(f"{planner}: ratio = wall / floor (mean of {len(trials)} trials)", f"{ratio:.2f}",
                              "<= 1.5", ratio <= 1.5,
                              f"wall {wall:,.0f} s, floor {floor:,.0f} s; fitted a/a2/b/b2 "
                              + "/".join(f"{fit[k]:.1f}" for k in ("a", "a2", "b", "b2")) + f" (R² {r2:.2f})"))
    print("seconds = a·uncached + a2·uncached·depth + b·completion + b2·completion·context (ms; depth and "
          "context in 1k tokens); floor rates " + ", ".join(f"{k} {v:g}" for k, v in rates.items()))
    print(tabulate(table, headers=["planner", "trials", "wall s", "floor s", "ratio", "uncached tok",
                                   "fitted a / a2 / b / b2", "R²", "largest term"]))
    emit("Real-LLM trials against their floor (issue 62's time model)", figures, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
