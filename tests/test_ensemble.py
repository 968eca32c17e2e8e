"""average_predictions (extended toolset) and MLE-STAR's final ensemble of the best pipelines (issue 12)."""
import numpy as np
import pandas as pd
import pytest

import mltb_core.toolkit.tools  # noqa: F401  (registers the toolset)
from mltb_core.bench.tasks import get_task
from mltb_core.config import TrialConfig
from mltb_core.planners.mle_star import renamed
from mltb_core.planners.trajectory import read_trajectory
from mltb_core.runner.trial import run_trial
from mltb_core.toolkit.registry import REGISTRY, ToolCall, ToolContext, ToolInputError, execute
from mltb_core.toolkit.scratchpad import Scratchpad
from mltb_core.toolkit.tools import evaluation
from mltb_core.toolkit.tools.evaluation import ENSEMBLE_TOOL

average = REGISTRY.get(ENSEMBLE_TOOL).func


def test_the_tool_is_in_the_extended_toolset_only():
    assert ENSEMBLE_TOOL in REGISTRY.for_toolset("extended").names()
    assert ENSEMBLE_TOOL not in REGISTRY.for_toolset("paper").names()
    assert REGISTRY.get(ENSEMBLE_TOOL).toolsets == ("extended",)


def test_regression_values_and_probabilities_are_averaged_row_wise():
    idx = pd.Index([10, 11, 12])
    out = average(pd.Series([1.0, 2.0, 3.0], index=idx, name="a"), pd.Series([3.0, 4.0, 8.0], index=idx),
                  pd.Series([2.0, 0.0, 1.0], index=idx))
    assert out.tolist() == [2.0, 2.0, 4.0] and list(out.index) == [10, 11, 12] and out.name == "a"
    proba = average(pd.Series([0.2, 0.9]), pd.Series([0.6, 0.5]))
    assert np.allclose(proba.to_numpy(), [0.4, 0.7])
    tables = average(pd.DataFrame({"x": [0.2, 0.5], "y": [0.8, 0.5]}), pd.DataFrame({"x": [0.6, 0.1], "y": [0.4, 0.9]}))
    assert np.allclose(tables.to_numpy(), [[0.4, 0.6], [0.3, 0.7]]) and list(tables.columns) == ["x", "y"]
    # Integer predictions are labels by default, numbers when asked (or on a regression task).
    assert average(np.array([1, 2]), np.array([2, 4]), method="mean").tolist() == [1.5, 3.0]


def test_labels_are_majority_voted_and_ties_go_to_the_first_input():
    a, b = pd.Series([True, False, True, False]), pd.Series([False, False, True, True])
    c = pd.Series([False, True, True, True])
    out = average(a, b, c)
    assert out.tolist() == [False, False, True, True] and out.dtype == bool
    assert average(pd.Series(["cat", "dog"]), pd.Series(["dog", "cat"])).tolist() == ["cat", "dog"]
    assert average(pd.Series(["dog", "cat"]), pd.Series(["cat", "dog"])).tolist() == ["dog", "cat"]
    # a 2-2 tie among four inputs: the label of the earliest input among the tied wins
    assert average(*(pd.Series([v]) for v in ("b", "a", "a", "b"))).tolist() == ["b"]


def test_mismatched_inputs_are_rejected_with_a_clear_message():
    with pytest.raises(ToolInputError, match="predictions_2 has 3 rows but predictions_1 has 2"):
        average(pd.Series([1.0, 2.0]), pd.Series([1.0, 2.0, 3.0]))
    with pytest.raises(ToolInputError, match="different row indexes"):
        average(pd.Series([1.0, 2.0], index=[0, 1]), pd.Series([1.0, 2.0], index=[5, 6]))
    with pytest.raises(ToolInputError, match="predictions_1 hold per-class probability tables"):
        average(pd.DataFrame({"x": [0.5], "y": [0.5]}), pd.Series([0.5]))
    with pytest.raises(ToolInputError, match="class columns"):
        average(pd.DataFrame({"x": [0.5], "y": [0.5]}), pd.DataFrame({"x": [0.5], "z": [0.5]}))
    with pytest.raises(ToolInputError, match="needs numeric predictions"):
        average(pd.Series(["a"]), pd.Series(["b"]), method="mean")
    with pytest.raises(ToolInputError, match="method must be one of auto, mean, vote"):
        average(pd.Series([1.0]), pd.Series([1.0]), method="median")


def test_the_model_sees_the_error_through_the_executor(tmp_path):
    pad = Scratchpad()
    pad.set("p1", pd.Series([0.1, 0.2]))
    pad.set("p2", pd.Series([0.1]))
    call = ToolCall(ENSEMBLE_TOOL, {"predictions_1": "p1", "predictions_2": "p2"}, {}, "avg")
    result = execute(call, pad, ToolContext(sandbox=tmp_path), REGISTRY.for_toolset("extended"))
    assert not result.ok and "predictions_2 has 1 rows but predictions_1 has 2" in result.message
    refused = execute(call, pad, ToolContext(sandbox=tmp_path), REGISTRY.for_toolset("paper"))
    assert not refused.ok and "not in this run's 'paper' toolset" in refused.message


def test_renamed_moves_a_name_in_bindings_and_output_only():
    call = ToolCall("predict_target", {"model": "m", "X_data": "preds"}, {"model_name": "preds"}, "preds")
    out = renamed(call, "preds", "fresh")
    assert out.bindings == {"model": "m", "X_data": "fresh"} and out.output == "fresh"
    assert out.func_kwargs == {"model_name": "preds"}


def _run(tmp_path, **kw):
    cfg = TrialConfig(planner="mle_star", model="sim:1.0", llm_cache=False, toolset="extended", max_llm_calls=40, **kw)
    record = run_trial(get_task("spaceship-titanic"), cfg, tmp_path)
    return record, list(read_trajectory(record.trajectory))


def test_mle_star_ends_with_a_valid_ensemble_of_its_best_pipelines(tmp_path):
    record, steps = _run(tmp_path)
    assert record.valid and record.llm_calls <= 40, record.stop_reason
    ensemble = next(s for s in steps if s["step_type"] == "ensemble")
    assert ensemble["built"] and len(ensemble["members"]) >= 2, ensemble
    assert ensemble["member_cv_scores"] == sorted(ensemble["member_cv_scores"], reverse=True)
    summary = next(s for s in steps if s["step_type"] == "search_summary")
    assert summary["best_node"] == ensemble["node_id"]   # the ensemble is the answer
    called = [s["tools_to_execute"][0]["tool_name"] for s in steps if s["step_type"] == "tool_execution_initiation"]
    assert called[-2:] == [ENSEMBLE_TOOL, "create_submission"]


@pytest.fixture
def broken_vote():
    """The ensemble's vote raises, in this process and in the trial's tool worker (spaceship-titanic
    predicts labels: they are voted)."""
    import importlib
    import sys

    sys.modules.pop("broken_vote", None)
    with REGISTRY.scoped():
        module = importlib.import_module("broken_vote")
        yield
    evaluation._vote = module.ORIGINAL_VOTE
    sys.modules.pop("broken_vote", None)


def test_a_failing_ensemble_keeps_the_best_single_pipeline(tmp_path, broken_vote):
    record, steps = _run(tmp_path)
    assert record.valid, record.stop_reason
    ensemble = next(s for s in steps if s["step_type"] == "ensemble")
    assert not ensemble["built"] and "vote broken for this test" in ensemble["reason"]
    solutions = [s for s in steps if s["step_type"] == "solution" and s["valid"] and s["cv_score"] is not None]
    best = max(solutions, key=lambda s: s["cv_score"])
    summary = next(s for s in steps if s["step_type"] == "search_summary")
    assert summary["best_node"] == best["node_id"]
