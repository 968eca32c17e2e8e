"""LATS: MCTS whose node values come from an evaluator LLM, with reflections on failures.

The evaluator grades the path 1–10 (mapped to 0.1–1.0); as in the paper there is no
self-consistency term. A failed terminal node (depth limit, or an invalid submission)
triggers a self-reflection that is shown in later expansion prompts.
"""
from __future__ import annotations

import re

from mltb_core.llm import prompts

from mltb_core.planners.mcts import TreeSearch
from mltb_core.planners.tree import Node

# The judge is asked to end with "Score: N"; models also write {"score": N}, "the score is N", "Grade: N"
# and "N/10".
_SCORE = re.compile(r"(?:score|grade|rating)[\"']?\s*(?:[:=]|\bis\b|\bof\b)?\s*[\"']?(\d+(?:\.\d+)?)"
                    r"|(\d+(?:\.\d+)?)\s*(?:/|out of)\s*10\b", re.I)
UNSCORED = 0.1   # a reply with no score counts as the lowest grade
MAX_REFLECTIONS = 3


def judge_score(text: str) -> float | None:
    """The grade in a judge's reply, mapped from 1-10 to 0.1-1.0 (the last one given, clipped to the range);
    None when it gives none."""
    matches = list(_SCORE.finditer(text or ""))
    if not matches:
        return None
    value = float(matches[-1].group(1) or matches[-1].group(2))
    return min(max(value, 1.0), 10.0) / 10.0


def parse_score(text: str) -> float:
    """'... Score: 7' → 0.7; a reply without a score → :data:`UNSCORED`."""
    score = judge_score(text)
    return UNSCORED if score is None else score


class LATS(TreeSearch):
    name = "lats"
    default_feedback = False

    def __init__(self, episode, config):
        super().__init__(episode, config)
        self.reflections: list[str] = []

    def evaluate(self, node: Node) -> float:
        if node.terminal:
            return 1.0
        text = self.ep.ask(node, prompts.LATS_EVALUATOR_SYSTEM, prompts.EVALUATOR_REQUEST, purpose="evaluate")
        score = judge_score(text)
        # said in the trajectory: a judge that gives no grade makes LATS's values the default, not the model's
        self.ep.trajectory.write("judge_score", node_id=node.id, score=score, scored=score is not None)
        return UNSCORED if score is None else score

    def extra_messages(self, node: Node):
        if not self.reflections:
            return ()
        return (prompts.REFLECTIONS_HEADER + "\n" + "\n".join(f"- {r}" for r in self.reflections),)

    def after_child(self, child: Node) -> None:
        wrote_invalid = child.log.submission is not None and not child.terminal
        if child.depth >= self.config.max_depth or wrote_invalid:
            text = self.ep.ask(child, prompts.LATS_REFLECTION_SYSTEM, prompts.REFLECTION_REQUEST, purpose="reflect")
            if text.strip():
                self.reflections = (self.reflections + [text.strip()[:600]])[-MAX_REFLECTIONS:]
