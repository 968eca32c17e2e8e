"""MLE-STAR over tool calls: initial pipeline → ablation → targeted refinement of one block, repeated.

1. **Initial solution**: draft a whole pipeline (:class:`~mltb_core.planners.automind.SolutionSearch`),
   debugging it up to ``max_debug_depth`` rounds; up to ``num_drafts`` drafts until one is valid.
2. **Ablation** of the current best pipeline, without the model: for each block it has (cleaning,
   features, model choice, tuning — :data:`pipeline.BLOCKS`) the pipeline is re-run with that block's
   calls removed (cleaning, features), the model replaced by a linear baseline (model choice), or the
   tuning call replaced by the plain fit of the same model (tuning); the effect is the absolute change
   of the CV score. A block whose ablation breaks the pipeline has an unbounded effect (essential).
3. **Targeted refinement** of the block with the largest effect not refined yet: ``refine_iterations``
   inner steps, each asking the model for one call at the block's first step (replace or add), the
   rest re-run; a refinement that improves the CV score becomes the new best.
Rounds of 2–3 repeat, a different block each round, until every block was refined, the round count
(``max_iterations``) or the budget ends. The answer is the best valid pipeline by its own CV score.

Not implemented: the paper's final ensemble of the best candidates. The toolset has no call that
averages predictions of several models, so an ensemble cannot be planned in tool calls yet.
"""
from __future__ import annotations

import math

from mltb_core.llm import prompts
from mltb_core.llm.base import Candidate
from mltb_core.planners import pipeline as pl
from mltb_core.planners.automind import SolutionSearch
from mltb_core.planners.base import register
from mltb_core.planners.pipeline import Solution
from mltb_core.toolkit.registry import ToolCall

__all__ = ["MLEStar", "ablated_calls"]

ESSENTIAL = math.inf


def _baseline_model(tool_name: str) -> str:
    """The linear model of the same kind (a random forest when the model already is the linear one)."""
    regressor = tool_name.endswith("_regressor") and not tool_name.endswith("logistic_regressor")
    linear = "fit_linear_regressor" if regressor else "fit_logistic_regressor"
    if tool_name != linear:
        return linear
    return "fit_random_forest_regressor" if regressor else "fit_random_forest_classifier"


def ablated_calls(block: str, steps: list, positions: list[int]) -> list[tuple[int, ToolCall | None]]:
    """The edits that ablate ``block``: (index, replacement call, or None to drop the step)."""
    if block in ("cleaning", "features"):
        return [(i, None) for i in positions]
    edits = []
    for i in positions:
        old = steps[i].call
        if block == "model":
            name = _baseline_model(old.tool_name)
        else:   # tuning: the same model, fitted with its default hyperparameters
            name = "fit_" + old.tool_name.removeprefix("tune_")
        edits.append((i, ToolCall(name, dict(old.bindings), dict(old.func_kwargs), old.output)))
    return edits


@register
class MLEStar(SolutionSearch):
    name = "mle_star"

    def __init__(self, episode, config):
        super().__init__(episode, config)
        self.refined: set[str] = set()

    def initial(self) -> Solution | None:
        for _ in range(self.config.num_drafts):
            sol = self.draft()
            while sol.buggy and sol.debug_depth < self.config.max_debug_depth:
                sol = self.debug(sol)
            if sol.valid:
                return sol
        return None

    def ablate(self, base: Solution) -> dict[str, float]:
        """Block → |CV change| when the block is removed or replaced (ESSENTIAL when the run breaks)."""
        steps = pl.steps_of(base.leaf)
        last_model = max((i for i, s in enumerate(steps) if s.call.tool_name.startswith(pl.MODEL_TOOL_PREFIXES)),
                         default=len(steps) - 1)
        effects: dict[str, float] = {}
        for block, positions in pl.block_positions(self.ep, steps).items():
            if block not in pl.BLOCKS:
                continue
            edits = dict(ablated_calls(block, steps, positions))
            if any(c is not None and c.tool_name not in self.ep.registry for c in edits.values()):
                continue   # the baseline is not in this toolset: no ablation for the block
            first = min(edits)
            node = pl.branch_point(steps, first, self.ep.root)
            ok = True
            # Re-run only up to the last model call: the CV score is known there, the submission is not needed.
            for i in range(first, last_model + 1):
                if i in edits and edits[i] is None:
                    continue
                call = edits.get(i) or steps[i].call
                node = self.ep.step(node, Candidate(f"Ablation of the {block} block.", [call]))
                node.dead = True
                if not node.ok:
                    ok = False
                    break
            ablated = pl.cv_score(node) if ok else None
            effects[block] = ESSENTIAL if ablated is None or base.score is None else abs(base.score - ablated)
            self.ep.trajectory.write("ablation", planner=self.name, block=block, base_score=base.score,
                                     ablated_score=ablated, effect=None if effects[block] == ESSENTIAL
                                     else effects[block], node_id=node.id)
        return effects

    def refine(self, best: Solution, block: str, effects: dict[str, float]) -> Solution:
        shown = ", ".join(f"{b}: {'breaks the pipeline' if e == ESSENTIAL else f'{e:.4f}'}" for b, e in effects.items())
        for _ in range(self.config.refine_iterations):
            steps = pl.steps_of(best.leaf)
            positions = pl.block_positions(self.ep, steps).get(block)
            if not positions:
                break
            index = positions[0]
            listing = pl.pipeline_listing(best.leaf)
            sol = self.edit(best, index, prompts.MLE_STAR_REFINE_SYSTEM,
                            lambda tried: prompts.refine_request(listing, block, shown, index + 1, tried), "refine")
            if sol is not None and sol.valid and sol.score is not None and (best.score is None or sol.score > best.score):
                best = sol
        return best

    def loop(self) -> str:
        best = self.initial()
        if best is None:
            return f"no valid initial solution after {self.config.num_drafts} draft(s)"
        effects_of: dict[int, dict[str, float]] = {}   # best leaf id → its ablation (re-run only for a new best)
        for _ in range(self.config.max_iterations):
            if best.leaf.id not in effects_of:
                effects_of[best.leaf.id] = self.ablate(best)
            effects = effects_of[best.leaf.id]
            todo = {b: e for b, e in effects.items() if b not in self.refined}
            if not todo:
                return "every block refined"
            block = max(todo, key=lambda b: (todo[b], -pl.BLOCKS.index(b)))
            self.refined.add(block)
            best = self.refine(best, block, effects)
        return f"round budget ({self.config.max_iterations}) used up"
