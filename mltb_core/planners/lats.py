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

_SCORE = re.compile(r"score\s*[:=]?\s*(\d+(?:\.\d+)?)", re.I)
MAX_REFLECTIONS = 3


def parse_score(text: str) -> float:
    """'... Score: 7' → 0.7; unparseable or out of range → the lowest score, 0.1."""
    matches = _SCORE.findall(text or "")
    if not matches:
        return 0.1
    value = float(matches[-1])
    return min(max(value, 1.0), 10.0) / 10.0


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
        return parse_score(text)

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
