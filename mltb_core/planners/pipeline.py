"""Whole-pipeline search helpers shared by the AutoMind and MLE-STAR planners.

A *solution* is a root→leaf path of the episode tree that ends in a submission attempt (or in the
first failed call, which makes it buggy). Solutions share prefixes in the tree, so a modified copy of
a pipeline branches at the first changed step and re-executes (replays) the unchanged calls after
it, without asking the model again. Its score is the cross-validation score the last model-fitting
tool (``Tool.fits_model``) on the path reported (a tool's own CV on the training rows, never held-out labels),
oriented so that higher is better.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from mltb_core.llm.base import Candidate
from mltb_core.planners.episode import Episode
from mltb_core.planners.tree import Node, path_to
from mltb_core.toolkit.registry import ToolCall

__all__ = ["Solution", "generate", "replay", "cv_score", "steps_of", "failure_text", "wrote_submission",
           "pipeline_listing", "BLOCKS", "block_of",
           "block_positions", "branch_point", "edit_kind", "apply_edit"]

@dataclass(eq=False)
class Solution:
    leaf: Node
    kind: str                       # draft | improve | debug | ablation | refine | ensemble
    parent: Solution | None = None
    debug_depth: int = 0            # consecutive debug rounds that led here
    note: str = ""                  # what changed (shown in the trajectory)
    debugged: bool = False          # a Debug action already started from it
    children: list[Solution] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return self.leaf.terminal

    @property
    def buggy(self) -> bool:
        return not self.valid

    @property
    def score(self) -> float | None:
        # No tool cross-validates an average of models: the last fit on an ensemble's path is one member's.
        return cv_score(self.leaf) if self.valid and self.kind != "ensemble" else None


def steps_of(node: Node) -> list[Node]:
    """The executed tool calls on the root→node path (replies without a call left out)."""
    return [n for n in path_to(node)[1:] if n.call is not None]


def wrote_submission(node: Node) -> bool:
    parent = node.parent
    return node.ok and node.log.submission is not None and (parent is None or node.log.submission is not parent.log.submission)


def cv_score(node: Node) -> float | None:
    """The CV score (higher is better) of the last model fitted on the path, as its tool reported it."""
    for step in reversed(steps_of(node)):
        if not step.ok or not step.cv_scores:   # cv_scores: the models a model-fitting tool wrote (Episode.step)
            continue
        outputs = step.call.output if isinstance(step.call.output, list) else [step.call.output]
        for name in outputs:
            if name in step.cv_scores:
                return step.cv_scores[name]
    return None


def failure_text(node: Node) -> str:
    """Why a buggy solution failed: the failed call's message, or the submission check's reason."""
    if not node.ok:
        return node.observation.split("\n\n", 1)[0][:600]
    if node.log.submission is not None and not node.log.submission_check[0]:
        return f"The submission is invalid: {node.log.submission_check[1]}"[:600]
    return "The pipeline ended without writing a submission file."


def pipeline_listing(node: Node) -> str:
    """The pipeline as numbered calls (for prompts that talk about the whole solution)."""
    return "\n".join(f"{i}. {s.call.tool_name}({_args(s)})" for i, s in enumerate(steps_of(node), 1))


def _args(node: Node) -> str:
    call = node.call
    parts = [f"{k}={v}" for k, v in call.bindings.items()] + [f"{k}={v!r}" for k, v in call.func_kwargs.items()]
    return ", ".join(parts)[:160]


def generate(ep: Episode, start: Node, system: str, max_steps: int, extra: Iterable[str] = (),
             allowed: Sequence[str] | None = None) -> tuple[Node, str]:
    """Let the model write the pipeline on from ``start`` (one LLM call per step).

    Stops at a submission attempt, at the first failed call (the solution is then buggy: repairing
    it is a Debug action, not more of this draft), when the model calls no tool, or after
    ``max_steps`` calls. Returns the leaf and why it stopped.
    """
    node = start
    extra = tuple(extra)
    for _ in range(max_steps):
        candidates = ep.propose(node, system, n=1, allowed=allowed, extra=extra)
        if not candidates or (not candidates[0].tool_calls and not candidates[0].error):
            return node, "the model stopped calling tools"
        node = ep.step(node, candidates[0], allowed)
        if not node.ok:
            return node, "a call failed"
        if wrote_submission(node):
            return node, "submission written"
    return node, f"step cap ({max_steps}) reached"


def replay(ep: Episode, start: Node, old_steps: Sequence[Node]) -> tuple[Node, bool]:
    """Re-execute ``old_steps``' calls below ``start`` (no LLM calls); stop at the first failure."""
    node = start
    for old in old_steps:
        node = ep.step(node, Candidate(old.assistant_text, [old.call]))
        if not node.ok:
            return node, False
        if wrote_submission(node):
            break
    return node, True


# MLE-STAR's blocks of a pipeline (and AutoMind's places to improve), by the tool's stage tags.
BLOCKS = ("cleaning", "features", "model", "tuning")


def block_of(ep: Episode, tool_name: str) -> str | None:
    """Which block a call belongs to: tuning or model by the tool's roles, else cleaning/features by its first
    such tag."""
    if tool_name not in ep.registry:
        return None   # unknown: changes nothing in the pipeline's data
    tool = ep.registry.get(tool_name)
    if tool.fits_model:
        return "tuning" if tool.tunes else "model"
    if tool.kind == "get":
        return None   # read-only (summaries): changes nothing in the pipeline's data
    tags = tool.roles
    return next((b for b in ("cleaning", "features") if b in tags), None)


def block_positions(ep: Episode, steps: Sequence[Node]) -> dict[str, list[int]]:
    """Block → indices (into ``steps``) of its successful calls, for the blocks the pipeline has."""
    out: dict[str, list[int]] = {}
    for i, step in enumerate(steps):
        block = block_of(ep, step.call.tool_name) if step.ok else None
        if block is not None:
            out.setdefault(block, []).append(i)
    return out


def branch_point(steps: Sequence[Node], index: int, root: Node) -> Node:
    """The node to branch from so that ``steps[index]`` is the next call: the previous step, or the root."""
    return steps[index - 1] if index > 0 else root


def edit_kind(old_steps: Sequence[Node], index: int, call: ToolCall) -> str:
    """How a proposed call at ``index`` edits the pipeline: same, replace, remove (skips to the next) or add.

    It replaces the old step when it calls the same tool or writes the same object(s); a call equal to
    the step after it drops the old step; anything else is inserted before it.
    """
    old = old_steps[index].call
    if call.key() == old.key():
        return "same"
    if index + 1 < len(old_steps) and call.key() == old_steps[index + 1].call.key():
        return "remove"
    if call.tool_name == old.tool_name or (call.output is not None and call.output == old.output):
        return "replace"
    return "add"


def apply_edit(ep: Episode, old_steps: Sequence[Node], index: int, candidate: Candidate) -> tuple[Node, str, bool]:
    """Execute an edited copy of the pipeline: the proposed call at ``index``, then the old calls after it.

    Returns (leaf, edit kind, replay ok). The branch starts at the step before ``index`` (shared prefix).
    """
    start = branch_point(old_steps, index, ep.root)
    call = candidate.tool_calls[0]
    kind = edit_kind(old_steps, index, call)
    node = ep.step(start, candidate)
    if not node.ok:
        return node, kind, False
    rest = {"replace": index + 1, "remove": index + 2, "add": index, "same": index + 1}[kind]
    leaf, ok = replay(ep, node, old_steps[rest:]) if not wrote_submission(node) else (node, True)
    return leaf, kind, ok
