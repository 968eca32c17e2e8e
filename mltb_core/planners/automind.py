"""AutoMind (AIDE-style) over tool calls: a tree of whole solutions grown by Draft / Improve / Debug.

A node of this search is a *solution*: a complete pipeline of tool calls ending in a submission
attempt (see :mod:`mltb_core.planners.pipeline`). Each action is chosen by AutoMind's stochastic
heuristic policy:

1. fewer than ``num_drafts`` drafts so far → **Draft** a new pipeline from the task description;
2. else, with probability ``debug_prob`` and a debuggable buggy solution (fewer than
   ``max_debug_depth`` debug rounds behind it, not yet debugged) → **Debug** it: the model sees the
   failure and writes the pipeline on from the failing step;
3. else, with a valid solution → **Improve**: with probability ``greedy_prob`` the best valid
   solution by CV, otherwise a random valid one; one step is replaced, added or removed, as the
   model's call at a chosen step says (:func:`pipeline.edit_kind`), and the rest is re-run;
4. else → Draft.

A buggy solution past ``max_debug_depth`` is dead. The answer is the valid solution with the best
cross-validation score reported by its own ``fit_*``/``tune_*`` tool (never the hidden labels);
without any valid solution, the node that reached the furthest stage.
"""
from __future__ import annotations

import random
from collections.abc import Callable

from mltb_core.config import Range, knob
from mltb_core.llm import prompts
from mltb_core.planners import pipeline as pl
from mltb_core.planners.base import Planner, SearchResult
from mltb_core.bench.stops import StopKind
from mltb_core.planners.episode import BudgetExhausted
from mltb_core.planners.pipeline import Solution
from mltb_core.stages.events import EventKind

__all__ = ["AutoMind", "SolutionSearch"]


class SolutionSearch(Planner):
    """Machinery shared by the whole-solution planners: draft, debug, edit and pick the best by CV."""

    default_feedback = False   # the model sees tool errors and, when debugging, why the solution failed
    knobs = (
        knob("num_drafts", 3, "initial drafts (automind: before improving or debugging; mle_star: until one "
                              "is valid)", range=Range(int, 1)),
        knob("max_debug_depth", 3, "debug rounds before a buggy solution is dead", range=Range(int, 0)),
    )

    def __init__(self, episode, config):
        super().__init__(episode, config)
        self.rng = random.Random(f"{self.name}:{config.trial_seed}")
        self.solutions: list[Solution] = []
        self.tried: dict[tuple[int, int], list[str]] = {}   # (base leaf id, step index) → earlier proposals

    # -- actions ------------------------------------------------------------------------
    def _record(self, solution: Solution) -> Solution:
        self.solutions.append(solution)
        if solution.parent is not None:
            solution.parent.children.append(solution)
        self.ep.trajectory.write(EventKind.SOLUTION, planner=self.name, kind=solution.kind, node_id=solution.leaf.id,
                                 parent_node=solution.parent.leaf.id if solution.parent else None,
                                 valid=solution.valid, cv_score=solution.score, debug_depth=solution.debug_depth,
                                 note=solution.note[:300])
        return solution

    def draft(self) -> Solution:
        leaf, why = pl.generate(self.ep, self.ep.root, prompts.AUTOMIND_DRAFT_SYSTEM, self.config.max_depth)
        return self._record(Solution(leaf, "draft", note=why))

    def debug(self, buggy: Solution) -> Solution:
        buggy.debugged = True
        remaining = max(1, self.config.max_depth - buggy.leaf.depth)
        leaf, why = pl.generate(self.ep, buggy.leaf, prompts.AUTOMIND_DEBUG_SYSTEM, remaining,
                                extra=(prompts.debug_request(pl.failure_text(buggy.leaf)),))
        return self._record(Solution(leaf, "debug", parent=buggy, debug_depth=buggy.debug_depth + 1, note=why))

    def edit(self, base: Solution, index: int, system: str, request: Callable[[list[str]], str],
             kind: str) -> Solution | None:
        """Ask for one call at step ``index`` of ``base``'s pipeline and run the edited copy (None: no change).

        ``request(tried)`` words the request; ``tried`` lists the earlier proposals at this step and how
        they did, so a repeated request is a new question (as in the papers' prompts with past attempts).
        """
        steps = pl.steps_of(base.leaf)
        start = pl.branch_point(steps, index, self.ep.root)
        tried = self.tried.setdefault((base.leaf.id, index), [])
        candidates = self.ep.propose(start, system, n=1, extra=(request(list(tried)),))
        if not candidates or not candidates[0].tool_calls:
            tried.append("a reply without a tool call")
            return self._record(Solution(start, kind, parent=base, note="the model proposed no call"))
        call = candidates[0].tool_calls[0]
        shown = f"{call.tool_name}({', '.join(f'{k}={v}' for k, v in {**call.bindings, **call.func_kwargs}.items())})"
        if pl.edit_kind(steps, index, call) == "same":
            tried.append(f"{shown[:150]}: the same call as before (no change)")
            self.ep.trajectory.write(EventKind.SOLUTION_UNCHANGED, planner=self.name, kind=kind, base_node=base.leaf.id,
                                     step=index + 1)
            return None
        leaf, edit, _ = pl.apply_edit(self.ep, steps, index, candidates[0])
        sol = self._record(Solution(leaf, kind, parent=base, note=f"{edit} step {index + 1}"))
        outcome = f"CV {sol.score:.4f}" if sol.score is not None else f"failed: {pl.failure_text(leaf)[:120]}"
        tried.append(f"{shown[:150]}: {outcome}")
        return sol

    def improve(self, base: Solution) -> Solution | None:
        steps = pl.steps_of(base.leaf)
        blocks = pl.block_positions(self.ep, steps)
        # AIDE's atomic change, at the start of a block (cleaning, features, model, tuning) the pipeline has;
        # a pipeline with none of them is edited at a random step.
        index = self.rng.choice([p[0] for p in blocks.values()]) if blocks else self.rng.randrange(len(steps))
        listing = pl.pipeline_listing(base.leaf)
        return self.edit(base, index, prompts.AUTOMIND_IMPROVE_SYSTEM,
                         lambda tried: prompts.improve_request(listing, index + 1, base.score, tried), "improve")

    # -- answers ------------------------------------------------------------------------
    def best_solution(self) -> Solution | None:
        valid = [s for s in self.solutions if s.valid]
        if not valid:
            return None
        return max(valid, key=lambda s: (s.score is not None, s.score if s.score is not None else 0.0, -s.leaf.depth))

    def result(self, stop_reason: str, kind: StopKind) -> SearchResult:
        """The answer: the best valid solution (its kind: a valid submission), else the best node with the kind
        of what ended the loop."""
        best = self.best_solution()
        if best is None:
            return SearchResult(self.ep.best, f"no valid solution; {stop_reason}", kind)
        score = f"{best.score:.4f}" if best.score is not None else "n/a"
        return SearchResult(best.leaf, f"valid submission (best of {sum(s.valid for s in self.solutions)} valid "
                                       f"solutions by CV {score}); {stop_reason}", StopKind.VALID_SUBMISSION)

    def search(self) -> SearchResult:
        try:
            reason, kind = self.loop()
        except BudgetExhausted as exc:
            reason, kind = exc.reason, exc.kind
        return self.result(reason, kind)

    def loop(self) -> tuple[str, StopKind]:  # pragma: no cover - interface
        raise NotImplementedError


class AutoMind(SolutionSearch):
    name = "automind"
    knobs = (
        knob("debug_prob", 0.5, "chance to debug a buggy solution when one is debuggable",
             range=Range(float, 0, 1, why="a probability")),
        knob("greedy_prob", 0.8, "chance to improve the best solution (else a random valid one)",
             range=Range(float, 0, 1, why="a probability")),
    )

    def debuggable(self) -> list[Solution]:
        return [s for s in self.solutions if s.buggy and not s.debugged
                and s.debug_depth < self.config.knob("max_debug_depth")]

    def choose(self) -> tuple[str, Solution | None]:
        c = self.config
        drafts = sum(s.kind == "draft" for s in self.solutions)
        if drafts < c.knob("num_drafts"):
            return "draft", None
        buggy = self.debuggable()
        if buggy and self.rng.random() < c.knob("debug_prob"):
            return "debug", self.rng.choice(buggy)
        valid = [s for s in self.solutions if s.valid]
        if valid:
            if self.rng.random() < c.knob("greedy_prob"):
                return "improve", self.best_solution()
            return "improve", self.rng.choice(valid)
        return ("debug", self.rng.choice(buggy)) if buggy else ("draft", None)

    def loop(self) -> tuple[str, StopKind]:
        for _ in range(self.config.max_iterations):
            action, base = self.choose()
            if action == "draft":
                self.draft()
            elif action == "debug":
                self.debug(base)
            else:
                self.improve(base)
        return f"action budget ({self.config.max_iterations}) used up", StopKind.ITERATION_BUDGET
