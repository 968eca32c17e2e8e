"""Harness overhead: share of a trial's wall time that is neither tool execution nor model time.

Run: ``python benchmarks/harness_overhead.py [--trials 2]``. Synthetic policy (no LLM cache),
several planners on one task; overhead = (wall - tool_seconds - llm_seconds) / wall, summed over
trials so a 1-second trial does not weigh as much as a 10-second one. Target <= 5 %.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

from _bench import Figure, count, emit, parser, sim_trial

PLANNERS = ("react", "lats", "mcts_outcome", "mcts_shaped", "hierarchical_mcts")
TARGET = 0.05


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--trials", type=count, default=2)
    p.add_argument("--task", default="spaceship-titanic")
    args = p.parse_args()
    out = Path(tempfile.mkdtemp(prefix="mltb-overhead-"))
    sim_trial(args.task, "react", out)  # warm-up: split cached, imports done (not harness cost per trial)
    totals = {"wall": 0.0, "tool": 0.0, "llm": 0.0}
    figures = []
    for planner in PLANNERS:
        wall = tool = llm = 0.0
        for trial in range(args.trials):
            record = sim_trial(args.task, planner, out, trial=trial)
            wall, tool, llm = wall + record.wall_seconds, tool + record.tool_seconds, llm + record.llm_seconds
        share = (wall - tool - llm) / wall
        figures.append(Figure(f"overhead {planner}", f"{share:.1%}",
                              note=f"{wall - tool - llm:.2f} s of {wall:.2f} s over {args.trials} trials"))
        totals["wall"] += wall; totals["tool"] += tool; totals["llm"] += llm  # noqa: E702
    overall = (totals["wall"] - totals["tool"] - totals["llm"]) / totals["wall"]
    figures.insert(0, Figure("harness overhead (all planners)", f"{overall:.1%}", "<= 5 %", overall <= TARGET,
                             note=f"{args.task}, sim policy, {len(PLANNERS)} planners x {args.trials} trials"))
    emit("Harness overhead", figures, args.json)


if __name__ == "__main__":
    main()
