"""What the model proposes from a state that already holds test predictions (reports/local-llm-notes.md).

In the real-LLM table (pinned commit), 4 of the first 6 MCTS-Shaped trials predicted the test rows and never
saved them: below its predictions the model proposed ``predict_target`` again. Main's stage note since
lists ``save_dataframe_to_csv`` first once the path holds predictions. This probe measures that change at
the very states where it mattered, without rerunning whole trials: it replays the recorded path of a
trajectory up to a chosen node (the model's own calls), then asks the MCTS-Shaped expansion request from
there ``--requests`` times (k candidates each, as an expansion does) and counts the tools proposed.

Run it once per checkout, same states, and compare the counts::

    PYTHONPATH=<checkout> python benchmarks/probe_after_predictions.py --out /tmp/probe-main \\
        TRAJECTORY.jsonl:NODE [TRAJECTORY.jsonl:NODE ...]

Each (trajectory, node) is one trial of the registered probe planner on the trajectory's task, trial and
row seed, with the local model, feedback on (MCTS-Shaped's default); its own trajectory keeps every
candidate. Sampling is at the trial temperature (0.7), unseeded, as in the table.
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path
from typing import Any, ClassVar

from mltb_core.bench.stops import StopKind
from mltb_core.bench.tasks import get_task
from mltb_core.config import TrialConfig
from mltb_core.llm.base import Candidate
from mltb_core.planners.base import Planner, SearchResult, register
from mltb_core.planners.mcts import MCTSShaped
from mltb_core.runner.trial import run_trial
from mltb_core.stages.events import EventKind
from mltb_core.toolkit.registry import ToolCall


def recorded_path(trajectory: Path, node: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The trial's config and the recorded calls of the root→``node`` path, in order."""
    rows = [json.loads(line) for line in trajectory.read_text().splitlines() if line.strip()]
    start = next(r for r in rows if r["step_type"] == EventKind.TRIAL_START)
    started = {r["node_id"]: r for r in rows if r["step_type"] == EventKind.TOOL_STARTED}
    calls = []
    while node:
        row = started[node]
        calls.append(row["tools_to_execute"][0])
        node = row["parent_id"]
    return start["config"], [{"tool_name": c["tool_name"], "tool_args": c["tool_args"]} for c in reversed(calls)]


@register
class ProbeAfterPath(Planner):
    """Replays ``path`` (never asking the model), then asks MCTS-Shaped's expansion request ``requests`` times."""

    name = "probe_after_path"
    path: ClassVar[list[dict[str, Any]]] = []
    requests: ClassVar[int] = 8
    k: ClassVar[int] = 3
    default_shaping = MCTSShaped.default_shaping
    default_feedback = MCTSShaped.default_feedback

    def search(self) -> SearchResult:
        node = self.ep.root
        for call in self.path:
            node = self.ep.step(node, Candidate(text="", tool_calls=[ToolCall.from_dict(call)]))
            if not node.ok:
                raise SystemExit(f"replay failed at {call['tool_name']}: {node.observation[:300]}")
        for _ in range(self.requests):
            self.ep.propose(node, MCTSShaped.system_prompt, n=self.k)
        return SearchResult(node, "probe done", StopKind.ITERATION_BUDGET)


def proposed_tools(trajectory: Path) -> collections.Counter:
    counts: collections.Counter = collections.Counter()
    for line in trajectory.read_text().splitlines():
        row = json.loads(line)
        if row["step_type"] == EventKind.LLM_CALL:
            for cand in row["candidates"]:
                calls = cand["tool_calls"]
                counts[calls[0]["tool_name"] if calls else "(no call)"] += 1
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("states", nargs="+", help="TRAJECTORY.jsonl:NODE (the state after that node's call)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--requests", type=int, default=8, help="expansion requests per state (k candidates each)")
    parser.add_argument("--model", help="another model than the trajectory's (sim: a dry run of the replay)")
    args = parser.parse_args()
    ProbeAfterPath.requests = args.requests
    summary = {}
    for state in args.states:
        path_text, _, node_text = state.rpartition(":")
        recorded, calls = recorded_path(Path(path_text), int(node_text))
        ProbeAfterPath.path = calls
        ProbeAfterPath.k = k = recorded["knobs"]["expansion_k"]
        config = TrialConfig(planner=ProbeAfterPath.name, model=args.model or recorded["model"], seed=recorded["seed"],
                             trial=recorded["trial"], toolset=recorded["toolset"], temperature=recorded["temperature"],
                             max_llm_calls=args.requests * k, max_iterations=args.requests, llm_cache=False)
        task = get_task(Path(path_text).name.split(f"-{recorded['planner']}-")[0])
        out = args.out / f"{task.slug}-t{recorded['trial']:02d}-n{node_text}"
        record = run_trial(task, config, out)
        counts = proposed_tools(Path(record.trajectory))
        summary[state] = {"outcome": str(record.outcome), "error": record.error, "proposed": dict(counts.most_common())}
        print(state, json.dumps(summary[state]), flush=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
