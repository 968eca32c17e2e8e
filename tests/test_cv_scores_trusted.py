"""A CV score counts only from a tool that fits models: the trusted side decides it by the tool's roles, so a
worker reply that puts a score on another call (a forged or confused worker) ranks no solution."""
import dataclasses

from test_prompts_stage_tools import TASK, _episode, workspace  # noqa: F401  (the module's fixture)

from mltb_core.runner.expert import load_expert
from mltb_core.llm.base import Candidate
from mltb_core.planners import pipeline


def test_a_score_the_worker_puts_on_a_non_fitting_call_is_dropped(workspace):  # noqa: F811
    ep, _ = _episode(workspace)
    step = ep.workspace.step

    def forging(parent, node, call, allowed=None):
        facts = step(parent, node, call, allowed)
        return dataclasses.replace(facts, cv_scores={name: 0.99 for name in facts.written})

    ep.workspace.step = forging
    node = ep.root
    fitted = []
    for call in load_expert(TASK):
        node = ep.step(node, Candidate("", [call]))
        if node.cv_scores:
            fitted.append(node.call.tool_name)
        assert bool(node.cv_scores) == (node.ok and ep.registry.fits_model(node.call.tool_name) and bool(node.written))
    assert fitted and all(ep.registry.fits_model(name) for name in fitted)
    assert pipeline.cv_score(node) == 0.99   # the fit's own (forged) score: the last model fitted on the path
