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
(``max_iterations``) or the LLM budget ends.
4. **Ensemble** (only when the toolset offers ``average_predictions``, i.e. not the paper's Table 9):
   the best ``ENSEMBLE_SIZE`` valid pipelines by CV that end in ``create_submission`` are combined
   without the model: below the best pipeline's prediction step, each other member's calls are
   replayed with its predictions stored under a fresh name, the predictions are averaged and the best
   pipeline's submission call is re-run on the average. No tool cross-validates an average, so the
   ensemble has no CV score; when it writes a valid submission it is the answer (the paper's final
   step), otherwise (a member's replay or the average fails) the best single pipeline stays the answer.
   Predicted labels are majority-voted with ties going to the best pipeline, so two label-predicting
   members reproduce the best one's labels; a third member can outvote it.

Without a valid ensemble, the answer is the best valid pipeline by its own CV score.
"""
from __future__ import annotations

import math

from mltb_core.config import Range, knob
from mltb_core.llm import prompts
from mltb_core.llm.base import Candidate
from mltb_core.planners import pipeline as pl
from mltb_core.planners.automind import SolutionSearch
from mltb_core.planners.base import SearchResult
from mltb_core.bench.stops import StopKind
from mltb_core.planners.episode import BudgetExhausted
from mltb_core.planners.pipeline import Solution
from mltb_core.planners.tree import Node
from mltb_core.toolkit.registry import ToolCall
from mltb_core.toolkit.tools.evaluation import ENSEMBLE_TOOL
from mltb_core.stages.events import EventKind

__all__ = ["MLEStar", "ablated_calls", "renamed", "ENSEMBLE_SIZE"]

ESSENTIAL = math.inf
ENSEMBLE_SIZE = 3                   # the best pipelines averaged (average_predictions takes up to 5)
SUBMISSION_TOOL = "create_submission"   # its 'predictions' binding says which object the pipeline submits


def renamed(call: ToolCall, old: str, new: str) -> ToolCall:
    """``call`` with the scratchpad name ``old`` replaced by ``new`` in its bindings and output."""
    output = call.output
    if isinstance(output, list):
        output = [new if o == old else o for o in output]
    elif output == old:
        output = new
    return ToolCall(call.tool_name, {k: new if v == old else v for k, v in call.bindings.items()},
                    dict(call.func_kwargs), output)


def _producer(steps: list[Node], name: str) -> int | None:
    """Index of the last step that wrote ``name``."""
    return next((i for i in range(len(steps) - 1, -1, -1)
                 if steps[i].ok and name in (steps[i].call.output if isinstance(steps[i].call.output, list)
                                             else [steps[i].call.output])), None)


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


class MLEStar(SolutionSearch):
    name = "mle_star"
    knobs = (knob("refine_iterations", 3, "refinement steps of the block with the largest effect",
                  range=Range(int, 1)),)

    def __init__(self, episode, config):
        super().__init__(episode, config)
        self.refined: set[str] = set()
        self.ensemble: Solution | None = None
        self.ensemble_members: list[Solution] = []

    def initial(self) -> Solution | None:
        for _ in range(self.config.knob("num_drafts")):
            sol = self.draft()
            while sol.buggy and sol.debug_depth < self.config.knob("max_debug_depth"):
                sol = self.debug(sol)
            if sol.valid:
                return sol
        return None

    def ablate(self, base: Solution) -> dict[str, float]:
        """Block → |CV change| when the block is removed or replaced (ESSENTIAL when the run breaks)."""
        steps = pl.steps_of(base.leaf)
        last_model = max((i for i, s in enumerate(steps) if self.ep.registry.fits_model(s.call.tool_name)),
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
            self.ep.trajectory.write(EventKind.ABLATION, planner=self.name, block=block, base_score=base.score,
                                     ablated_score=ablated, effect=None if effects[block] == ESSENTIAL
                                     else effects[block], node_id=node.id)
        return effects

    def refine(self, best: Solution, block: str, effects: dict[str, float]) -> Solution:
        shown = ", ".join(f"{b}: {'breaks the pipeline' if e == ESSENTIAL else f'{e:.4f}'}" for b, e in effects.items())
        for _ in range(self.config.knob("refine_iterations")):
            steps = pl.steps_of(best.leaf)
            positions = pl.block_positions(self.ep, steps).get(block)
            if not positions:
                break
            index = positions[0]
            listing = pl.pipeline_listing(best.leaf)
            sol = self.edit(best, index, prompts.MLE_STAR_REFINE_SYSTEM,
                            lambda tried: prompts.refine_request(listing, block, shown, index + 1, tried),  # noqa: B023 (edit calls it at once)
                            "refine")
            if sol is not None and sol.valid and sol.score is not None and (best.score is None or sol.score > best.score):
                best = sol
        return best

    def loop(self) -> tuple[str, StopKind]:
        best = self.initial()
        if best is None:
            return (f"no valid initial solution after {self.config.knob('num_drafts')} draft(s)",
                    StopKind.NO_VALID_SOLUTION)
        effects_of: dict[int, dict[str, float]] = {}   # best leaf id → its ablation (re-run only for a new best)
        for _ in range(self.config.max_iterations):
            if best.leaf.id not in effects_of:
                effects_of[best.leaf.id] = self.ablate(best)
            effects = effects_of[best.leaf.id]
            todo = {b: e for b, e in effects.items() if b not in self.refined}
            if not todo:
                return "every block refined", StopKind.SEARCH_COMPLETE
            block = max(todo, key=lambda b: (todo[b], -pl.BLOCKS.index(b)))
            self.refined.add(block)
            best = self.refine(best, block, effects)
        return f"round budget ({self.config.max_iterations}) used up", StopKind.ITERATION_BUDGET

    # -- the final ensemble ---------------------------------------------------------------
    def _submitted(self, sol: Solution) -> tuple[list[Node], str, int] | None:
        """(steps, submitted predictions' name, index of their step) for a pipeline ending in create_submission."""
        steps = pl.steps_of(sol.leaf)
        last = steps[-1].call if steps else None
        if last is None or last.tool_name != SUBMISSION_TOOL or "predictions" not in last.bindings:
            return None
        name = last.bindings["predictions"]
        made = _producer(steps[:-1], name)
        return (steps, name, made) if made is not None else None

    def _ensemble_members(self) -> list[tuple[Solution, tuple[list[Node], str, int]]]:
        """The best valid pipelines by CV that end in create_submission (with :meth:`_submitted`'s facts), at
        most ``ENSEMBLE_SIZE``, best first."""
        ranked = sorted((s for s in self.solutions if s.valid and s.score is not None and s.kind != "ensemble"),
                        key=lambda s: -s.score)
        members: list[tuple[Solution, tuple[list[Node], str, int]]] = []
        seen: set[tuple] = set()
        for sol in ranked:
            found = self._submitted(sol)
            if found is None:
                continue
            # Pipelines that make the same calls up to their predictions predict the same: one of them suffices.
            key = tuple(s.call.key() for s in found[0][:found[2] + 1])
            if key not in seen:
                seen.add(key)
                members.append((sol, found))
            if len(members) == ENSEMBLE_SIZE:
                break
        return members

    def _replay_members(self, node: Node, others: list[tuple[Solution, tuple[list[Node], str, int]]]
                        ) -> tuple[Node, list[str], str]:
        """Replay each other member's pipeline from ``node`` up to its predictions, renamed so that they do not
        overwrite the best pipeline's: (the node reached, the members' prediction names, why it failed or "")."""
        names: list[str] = []
        for k, (_, (steps, name, made)) in enumerate(others, 2):
            fresh = f"ensemble_member_{k}_predictions"
            calls = [s.call for s in steps[:made]] + [renamed(steps[made].call, name, fresh)]
            for call in calls:
                node = self.ep.step(node, Candidate(f"Ensemble: replay member {k}.", [call]))
                if not node.ok:
                    return node, names, f"member {k}'s replay failed: {pl.failure_text(node)[:200]}"
            names.append(fresh)
        return node, names, ""

    def _average_and_submit(self, node: Node, names: list[str], submission: ToolCall,
                            best_name: str) -> tuple[Node, str]:
        """Average the predictions ``names`` and submit the average with the best pipeline's ``submission``
        call: (the node reached, why it failed or "")."""
        average = ToolCall(ENSEMBLE_TOOL, {f"predictions_{i}": n for i, n in enumerate(names, 1)}, {},
                           "ensemble_predictions")
        node = self.ep.step(node, Candidate("Ensemble: average the members' predictions.", [average]))
        if node.ok:
            submit = renamed(submission, best_name, "ensemble_predictions")
            node = self.ep.step(node, Candidate("Ensemble: submit the averaged predictions.", [submit]))
        if not (node.ok and pl.wrote_submission(node) and node.terminal):
            return node, pl.failure_text(node)[:300]
        return node, ""

    def build_ensemble(self) -> Solution | None:
        """Average the best pipelines' predictions and submit the average (no LLM calls; see the module doc)."""
        if ENSEMBLE_TOOL not in self.ep.registry:
            return None
        members = self._ensemble_members()
        if len(members) < 2:
            self.ep.trajectory.write(EventKind.ENSEMBLE, planner=self.name, built=False,
                                     members=[m.leaf.id for m, _ in members],
                                     reason="fewer than 2 distinct valid pipelines that end in create_submission")
            return None
        self.ensemble_members = [m for m, _ in members]
        (best, (best_steps, best_name, _)), others = members[0], members[1:]
        start = best_steps[-2]   # the best pipeline up to its submission: its predictions are on the scratchpad
        node, names, why = self._replay_members(start, others)
        if not why and node.writer(best_name) is not start.writer(best_name):
            why = f"a member's replay overwrote the best pipeline's predictions '{best_name}'"
        if not why:
            node, why = self._average_and_submit(node, [best_name, *names], best_steps[-1].call, best_name)
        sol = self._record(Solution(node, "ensemble", parent=best,
                                    note=f"average of {len(members)} pipelines" + (f"; {why}" if why else "")))
        # Judged by ``why``, not ``sol.valid``: the path may hold an earlier valid submission of the best pipeline.
        self.ep.trajectory.write(EventKind.ENSEMBLE, planner=self.name, built=not why,
                                 members=[m.leaf.id for m, _ in members],
                                 member_cv_scores=[m.score for m, _ in members], node_id=node.id,
                                 reason=why or "valid submission from the averaged predictions")
        return None if why else sol

    def search(self) -> SearchResult:
        try:
            reason, kind = self.loop()
        except BudgetExhausted as exc:
            reason, kind = exc.reason, exc.kind
        try:
            self.ensemble = self.build_ensemble()   # no LLM calls: runs after the LLM budget ends too
        except BudgetExhausted as exc:   # time budget: the best single pipeline stays the answer
            reason += f"; no ensemble ({exc.reason})"
        if self.ensemble is not None:
            return SearchResult(self.ensemble.leaf, f"valid submission (average of the best "
                                                    f"{len(self.ensemble_members)} pipelines by CV); {reason}",
                                StopKind.VALID_SUBMISSION)
        return self.result(reason, kind)
