"""ReAct: one trajectory of reason → act → observe until a valid submission or the step budget."""
from __future__ import annotations

from mltb_core.llm import prompts
from mltb_core.planners.base import Planner, SearchResult
from mltb_core.bench.stops import StopKind


class ReAct(Planner):
    name = "react"
    default_feedback = False   # the paper's stage feedback belongs to the MCTS variants

    def search(self) -> SearchResult:
        node = self.ep.root
        steps = min(self.config.max_iterations, self.config.max_depth)  # one step = one LLM call + tool call
        for _ in range(steps):
            candidates = self.ep.propose(node, prompts.REACT_SYSTEM, n=1)
            if not candidates:
                return SearchResult(node, "model returned no reply", StopKind.NO_REPLY)
            if not candidates[0].tool_calls and not candidates[0].error:
                return SearchResult(node, "the model ended its turn without a valid submission",
                                    StopKind.MODEL_ENDED_TURN)
            node = self.ep.step(node, candidates[0])
            if node.terminal:
                return SearchResult(node, "valid submission", StopKind.VALID_SUBMISSION)
        return SearchResult(node, f"step budget ({steps}) used up", StopKind.ITERATION_BUDGET)
