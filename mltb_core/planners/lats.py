"""LATS: MCTS whose node values come from an evaluator LLM, with reflections on failures.

The evaluator grades the path 1–10 (mapped to 0.1–1.0); as in the paper there is no
self-consistency term. A path that wrote an invalid submission, or grew to the reflection depth
(:func:`reflection_depth`, from the budget) without a valid one, triggers a self-reflection that
is shown in later expansion prompts.
"""
from __future__ import annotations

import re

from mltb_core.llm import prompts

from mltb_core.planners.mcts import TreeSearch
from mltb_core.planners.tree import Node
from mltb_core.stages.events import EventKind

# The judge is asked to end with "Score: N"; models also write {"score": N}, "the score is N", "Grade: N"
# and "N/10". Read from the reply's tokens (words, numbers, single marks) in one pass: the reply is model
# text, and a backtracking pattern over it ("score" and 40,000 spaces) took minutes.
_TOKEN = re.compile(r"[a-z]+|\d+(?:\.\d+)?|\S")
_KEYWORDS = frozenset({"score", "grade", "rating"})
_QUOTES = frozenset({'"', "'"})
_SEPARATORS = frozenset({":", "=", "is", "of"})
UNSCORED = 0.1   # a reply with no score counts as the lowest grade
MAX_REFLECTIONS = 3


def judge_score(text: str) -> float | None:
    """The grade in a judge's reply, mapped from 1-10 to 0.1-1.0 (the last one given, clipped to the range);
    None when it gives none. Linear in the reply's length."""
    lowered = (text or "").lower()
    tokens = [(m.group(), m.end()) for m in _TOKEN.finditer(lowered)]
    found: str | None = None
    i = 0
    while i < len(tokens):
        word = tokens[i][0]
        end = _keyword_grade(tokens, i) if word in _KEYWORDS else _out_of_ten(tokens, i, lowered)
        if end is None:
            i += 1
            continue
        found = tokens[end][0] if word in _KEYWORDS else word
        i = end + 1
    if found is None:
        return None
    return min(max(float(found), 1.0), 10.0) / 10.0


def _is_number(token: str) -> bool:
    return token[:1].isdigit()


def _keyword_grade(tokens: list[tuple[str, int]], i: int) -> int | None:
    """Index of the number in 'score["']? (:|=|is|of)? ["']? N' starting at token ``i``, or None."""
    j = i + 1
    for optional in (_QUOTES, _SEPARATORS, _QUOTES):
        if j < len(tokens) and tokens[j][0] in optional:
            j += 1
    return j if j < len(tokens) and _is_number(tokens[j][0]) else None


def _out_of_ten(tokens: list[tuple[str, int]], i: int, text: str) -> int | None:
    """Index of the closing 10 in 'N/10' or 'N out of 10' starting at token ``i``, or None."""
    if not _is_number(tokens[i][0]):
        return None
    j = i + 1
    if j < len(tokens) and tokens[j][0] == "/":
        j += 1
    elif j + 1 < len(tokens) and tokens[j][0] == "out" and tokens[j + 1][0] == "of":
        j += 2
    else:
        return None
    if j < len(tokens) and tokens[j][0] == "10":
        after = tokens[j][1]
        if after == len(text) or not (text[after].isalnum() or text[after] == "_"):
            return j
    return None


def reflection_depth(config, calls_per_candidate: bool) -> int:
    """How deep a LATS path grows before it is reflected on as a failed attempt (and again at every multiple).

    LATS reflects on failed terminal states; here a path ends only at ``max_depth``, which a call budget
    need not reach (60 calls against max_depth 60: no reflection ever fired). The budget bounds how deep
    one path can grow: an expansion costs its proposals (``expansion_k`` calls when each candidate is a
    request of its own, else one) plus one judge call per child, so a single path reaches at most
    E = min(max_iterations, max_llm_calls // that) levels (60 calls, k=3, one call per candidate: 10).
    The reflection comes at half of E, the deepest point that leaves half the budget to act on it (5),
    never past ``max_depth``.
    """
    k = config.knob("expansion_k")
    expansions = config.max_iterations
    if config.max_llm_calls is not None:
        expansions = min(expansions, config.max_llm_calls // ((k if calls_per_candidate else 1) + k))
    return max(1, min(config.max_depth, expansions // 2))


class LATS(TreeSearch):
    name = "lats"
    default_feedback = False

    def __init__(self, episode, config):
        super().__init__(episode, config)
        self.reflections: list[str] = []
        self.reflect_every = reflection_depth(config, episode.llm.calls_per_candidate)
        self._reflected_below: set[int] = set()   # parents one of whose children was reflected on at a checkpoint

    def evaluate(self, node: Node) -> float:
        if node.terminal:
            return 1.0
        text = self.ep.ask(node, prompts.LATS_EVALUATOR_SYSTEM, prompts.EVALUATOR_REQUEST, purpose="evaluate")
        score = judge_score(text)
        # said in the trajectory: a judge that gives no grade makes LATS's values the default, not the model's
        self.ep.trajectory.write(EventKind.JUDGE_SCORE, node_id=node.id, score=score, scored=score is not None)
        return UNSCORED if score is None else score

    def extra_messages(self, node: Node):
        if not self.reflections:
            return ()
        return (prompts.REFLECTIONS_HEADER + "\n" + "\n".join(f"- {r}" for r in self.reflections),)

    def after_child(self, child: Node) -> None:
        if child.terminal:
            return
        wrote_invalid = child.log.submission is not None
        # one reflection per expansion at a checkpoint depth: the siblings share all but the last step
        parent = child.parent.id if child.parent is not None else None
        checkpoint = (child.depth % self.reflect_every == 0 or child.depth >= self.config.max_depth) \
            and parent is not None and parent not in self._reflected_below
        if checkpoint and parent is not None:
            self._reflected_below.add(parent)
        if checkpoint or wrote_invalid:
            text = self.ep.ask(child, prompts.LATS_REFLECTION_SYSTEM, prompts.REFLECTION_REQUEST, purpose="reflect")
            if text.strip():
                self.reflections = (self.reflections + [text.strip()[:600]])[-MAX_REFLECTIONS:]
