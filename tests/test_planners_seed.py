"""The seed systems as planners (issue 12): automind, mle_star, agent_k — policy, edits, ablation, memory, runs."""
import json

import pytest

from mltb_core.bench.tasks import get_task
from mltb_core.config import TrialConfig
from mltb_core.planners import PLANNERS
from mltb_core.planners.agent_k import AgentK, memory_notes, remember
from mltb_core.planners.automind import AutoMind
from mltb_core.planners.mle_star import ablated_calls
from mltb_core.planners.pipeline import Solution, edit_kind
from mltb_core.stages.rewards import PathLog
from mltb_core.planners.trajectory import read_trajectory
from mltb_core.planners.tree import Node
from mltb_core.runner.trial import run_trial
from mltb_core.toolkit.registry import ToolCall

NEW = ("automind", "mle_star", "agent_k")


def _step(call: ToolCall, parent: Node | None = None) -> Node:
    node = Node(parent=parent, call=call, depth=parent.depth + 1 if parent else 0)
    if parent:
        parent.add_child(node)
    return node


def _pipeline(*calls: ToolCall) -> list[Node]:
    node, out = Node(), []
    for call in calls:
        node = _step(call, node)
        out.append(node)
    return out


FIT = ToolCall("fit_lightgbm_classifier", {"X_train": "X", "y_train": "y"}, {"cv": 3}, "model")
PRED = ToolCall("predict_target", {"model": "model", "X_data": "X_test"}, {}, "predictions")
FILL = ToolCall("fillna_with_median", {"df": "combined"}, {}, "combined")


def test_the_three_planners_are_registered():
    assert set(NEW) <= set(PLANNERS)


def test_edit_kind_reads_the_models_call_as_replace_add_or_remove():
    steps = _pipeline(FILL, FIT, PRED)
    assert edit_kind(steps, 1, FIT) == "same"
    assert edit_kind(steps, 1, ToolCall("fit_xgboost_classifier", FIT.bindings, {"cv": 3}, "model")) == "replace"
    assert edit_kind(steps, 1, ToolCall("fit_lightgbm_classifier", FIT.bindings, {"cv": 5}, "model")) == "replace"
    assert edit_kind(steps, 1, PRED) == "remove"
    assert edit_kind(steps, 1, ToolCall("drop_feature", {"df": "combined"}, {"column": "x"}, "combined")) == "add"


def _solution(valid: bool, kind: str = "draft", depth: int = 0) -> Solution:
    # a valid solution predicted the test rows with a model (PathLog.valid_submission, the paper's stage 10)
    log = PathLog(tools_used=frozenset({"predict_target"}), submission=b"id,y\n" if valid else None,
                  submission_check=(valid, ""))
    return Solution(Node(log=log), kind, debug_depth=depth)


def test_automind_policy_drafts_first_then_debugs_or_improves():
    cfg = TrialConfig(planner="automind", model="sim",
                      knobs={"num_drafts": 2, "debug_prob": 1.0, "greedy_prob": 1.0, "max_debug_depth": 2})
    planner = AutoMind(None, cfg)
    assert planner.choose() == ("draft", None)
    planner.solutions = [_solution(False), _solution(True, "improve")]
    assert planner.choose()[0] == "draft"                      # only 1 of 2 drafts so far
    planner.solutions.append(_solution(False))
    action, base = planner.choose()
    assert action == "debug" and base.buggy                    # debug_prob 1 and a debuggable buggy node
    for sol in planner.solutions:
        sol.debugged = sol.buggy
    planner.solutions.append(_solution(False, "debug", depth=2))   # at max_debug_depth: dead
    action, base = planner.choose()
    assert action == "improve" and base is planner.best_solution() and base.valid


def test_automind_never_debugs_with_debug_prob_zero_and_drafts_without_a_valid_node():
    planner = AutoMind(None, TrialConfig(planner="automind", model="sim", knobs={"num_drafts": 1, "debug_prob": 0.0}))
    planner.solutions = [_solution(False)]
    assert all(planner.choose()[0] == "debug" for _ in range(5))   # no valid node: repair is all that is left
    planner.solutions.append(_solution(True))
    assert all(planner.choose()[0] == "improve" for _ in range(20))


def test_mle_star_ablation_removes_cleaning_and_swaps_model_and_tuning_for_baselines():
    steps = _pipeline(FILL, FIT, ToolCall("tune_xgboost_regressor", {"X_train": "X", "y_train": "y"}, {"cv": 3}, "m2"))
    assert ablated_calls("cleaning", steps, [0]) == [(0, None)]
    (_, model), = ablated_calls("model", steps, [1])
    assert model.tool_name == "fit_logistic_regressor" and model.output == "model" and model.bindings == FIT.bindings
    (_, tuned), = ablated_calls("tuning", steps, [2])
    assert tuned.tool_name == "fit_xgboost_regressor" and tuned.output == "m2"
    linear = _pipeline(ToolCall("fit_linear_regressor", {}, {}, "m"))
    assert ablated_calls("model", linear, [0])[0][1].tool_name == "fit_random_forest_regressor"


def test_knobs_enter_their_own_planners_hash_only_and_are_range_checked():
    agent_k, react = TrialConfig(planner="agent_k", model="sim"), TrialConfig(planner="react", model="sim")
    assert agent_k.config_hash() != agent_k.with_(agent_memory=True).config_hash()
    automind = agent_k.with_(planner="automind")
    assert automind.config_hash() != automind.with_(num_drafts=5).config_hash()
    assert react.config_hash() == react.with_(num_drafts=5, agent_memory=True).config_hash()
    for bad in ({"debug_prob": 1.5}, {"greedy_prob": -0.1}, {"num_drafts": 0}, {"stage_attempts": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            TrialConfig(planner="automind", model="sim", knobs=bad)
    with pytest.raises(ValueError, match="unknown planner knob 'num_draft'"):
        TrialConfig(planner="automind", model="sim", knobs={"num_draft": 2})


def test_agent_k_memory_keeps_valid_paths_of_the_same_run_only(tmp_path):
    run = tmp_path / "run" / "trajectories"
    run.mkdir(parents=True)
    traj = run / "a.jsonl"
    steps = [{"step_type": "tool_execution_initiation", "node_id": 1, "tools_to_execute": [{"tool_name": "read_data"}]},
             {"step_type": "tool_execution_initiation", "node_id": 2, "tools_to_execute": [{"tool_name": "fit_x"}]},
             {"step_type": "search_summary", "best_path": [1, 2]}]
    traj.write_text("\n".join(json.dumps(s) for s in steps) + "\n")
    remember("task-a", traj, valid=False)
    assert memory_notes(run / "b.jsonl") == []
    remember("task-a", traj, valid=True)
    assert memory_notes(run / "b.jsonl") == ["task-a: read_data, fit_x"]
    assert memory_notes(tmp_path / "other" / "trajectories" / "c.jsonl") == []


def test_after_trial_hook_keeps_agent_k_memory_only_when_switched_on(tmp_path):
    """The runner calls each planner's after_trial; only agent_k with agent_memory on notes the path."""
    from mltb_core.planners import get_planner_class

    run = tmp_path / "run" / "trajectories"
    run.mkdir(parents=True)
    traj = run / "a.jsonl"
    steps = [{"step_type": "tool_execution_initiation", "node_id": 1, "tools_to_execute": [{"tool_name": "read_data"}]},
             {"step_type": "search_summary", "best_path": [1]}]
    traj.write_text("\n".join(json.dumps(s) for s in steps) + "\n")
    off = TrialConfig(planner="agent_k", model="sim")
    get_planner_class("react").after_trial(off.with_(planner="react", agent_memory=True), "t", traj, True)
    AgentK.after_trial(off, "t", traj, True)
    assert memory_notes(run / "b.jsonl") == []
    AgentK.after_trial(off.with_(agent_memory=True), "t", traj, True)
    assert memory_notes(run / "b.jsonl") == ["t: read_data"]


def test_agent_k_modeling_stage_offers_tuning_instead_of_plain_fits():
    import mltb_core.toolkit.tools  # noqa: F401
    from mltb_core.stages.rewards import REWARD_STAGES
    from mltb_core.toolkit.registry import REGISTRY

    class _Episode:
        registry = REGISTRY.for_toolset("paper")

    planner = AgentK.__new__(AgentK)
    planner.ep, planner.masking = _Episode(), True
    allowed = planner.allowed(REWARD_STAGES[8])
    assert any(t.startswith("tune_") for t in allowed) and not any(t.startswith("fit_") for t in allowed)


def _run(tmp_path, planner, **kw):
    cfg = TrialConfig(planner=planner, model="sim:1.0", llm_cache=False, **kw)
    return run_trial(get_task("spaceship-titanic"), cfg, tmp_path)


def test_automind_ends_valid_and_answers_with_its_best_cv_solution(tmp_path):
    record = _run(tmp_path, "automind", max_llm_calls=20)
    assert record.valid, record.stop_reason
    steps = list(read_trajectory(record.trajectory))
    solutions = [s for s in steps if s["step_type"] == "solution"]
    assert solutions and solutions[0]["kind"] == "draft"
    best = max((s for s in solutions if s["valid"]), key=lambda s: s["cv_score"])
    summary = next(s for s in steps if s["step_type"] == "search_summary")
    assert summary["best_node"] == best["node_id"]


def test_mle_star_ablates_and_refines_within_the_budget(tmp_path):
    record = _run(tmp_path, "mle_star", max_llm_calls=19, toolset="paper")
    assert record.valid and record.llm_calls <= 19, record.stop_reason
    steps = list(read_trajectory(record.trajectory))
    blocks = {s["block"] for s in steps if s["step_type"] == "ablation"}
    assert {"cleaning", "model"} <= blocks
    assert any(s["step_type"] in ("solution", "solution_unchanged") and s.get("kind") == "refine" for s in steps)
    # The paper's toolset has no average_predictions: no ensemble is attempted.
    assert not any(s["step_type"] == "ensemble" or s.get("kind") == "ensemble" for s in steps)


def test_agent_k_passes_each_unit_test_in_order_and_tunes(tmp_path):
    record = _run(tmp_path, "agent_k")
    assert record.valid, record.stop_reason
    steps = list(read_trajectory(record.trajectory))
    tests = [s for s in steps if s["step_type"] == "unit_test"]
    assert [t["stage"] for t in tests] == list(range(1, 11)) and all(t["passed"] for t in tests)
    called = [s["tools_to_execute"][0]["tool_name"] for s in steps if s["step_type"] == "tool_execution_initiation"]
    assert any(name.startswith("tune_") for name in called)
