"""Evaluation tools through registry.execute: metrics, predictions, persistence, submission."""
from __future__ import annotations

import pickle
import types

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.tree import DecisionTreeClassifier

import mltb_core.toolkit.tools.evaluation  # noqa: F401 - registers the tools
from mltb_core.toolkit.registry import REGISTRY, ToolContext
from mltb_core.toolkit.scratchpad import Scratchpad
from tool_calls import call_tool, failed, tool_context


def make_task(prediction="label", problem_type="binary"):
    return types.SimpleNamespace(id_column="PassengerId", target="Transported", problem_type=problem_type,
                                 prediction=prediction)


@pytest.fixture
def ctx(tmp_path) -> ToolContext:
    return tool_context(tmp_path, data_dir=tmp_path, task=make_task())


@pytest.fixture(scope="module")
def objects() -> dict:
    """Fitted once per module: tools never mutate their inputs, so tests can share them."""
    X = pd.DataFrame({"a": np.arange(20.0), "b": np.arange(20.0) % 3})
    y = pd.Series(np.arange(20) >= 10, name="Transported")
    y3 = pd.Series(np.arange(20) // 7)
    return {
        "clf": LogisticRegression().fit(X, y), "reg": LinearRegression().fit(X, X["a"] * 2),
        "tree3": DecisionTreeClassifier(random_state=0).fit(X, y3),
        "X": X, "X_reordered": X[["b", "a"]], "X_bad": X.drop(columns="a").assign(c=1.0),
        "y": y, "y_reg": X["a"] * 2, "y3": y3,
        "test_df": pd.DataFrame({"PassengerId": [f"p{i}" for i in range(20)]}),
    }


@pytest.fixture
def pad(objects) -> Scratchpad:
    return Scratchpad(objects=objects)


call = call_tool


def assert_error(result, tool, fragment):
    failed(result, fragment, REGISTRY.get(tool).doc)


def test_evaluate_regression_model(pad, ctx):
    result = call(pad, ctx, "evaluate_regression_model", {"model": "reg", "X_test": "X", "y_test": "y_reg"},
                  {"model_name": "linear", "eval_data_label": "train"})
    assert result.ok and "linear on train data" in result.message and "R2: 1" in result.message
    assert_error(call(pad, ctx, "evaluate_regression_model", {"model": "X", "X_test": "X", "y_test": "y_reg"}),
                 "evaluate_regression_model", "fitted model")


def test_evaluate_classification_model(pad, ctx):
    result = call(pad, ctx, "evaluate_classification_model", {"model": "clf", "X_test": "X", "y_test": "y"})
    assert result.ok and "Accuracy: 1" in result.message and "ROC AUC" in result.message
    multi = call(pad, ctx, "evaluate_classification_model", {"model": "tree3", "X_test": "X", "y_test": "y3"})
    assert multi.ok and "3 classes" in multi.message and "ovr" in multi.message
    pad["y_short"] = pad["y"][:5]
    assert_error(call(pad, ctx, "evaluate_classification_model", {"model": "clf", "X_test": "X", "y_test": "y_short"}),
                 "evaluate_classification_model", "has 20 rows but y_test has 5")


def test_predict_target_aligns_column_order(pad, ctx):
    result = call(pad, ctx, "predict_target", {"model": "clf", "X_data": "X_reordered"}, output="pred")
    assert result.ok, result.message
    assert isinstance(pad["pred"], pd.Series)
    assert pad["pred"].tolist() == pad["y"].tolist()


def test_predict_target_names_the_predictions_after_the_tasks_target(pad, ctx, tmp_path):
    """Saved as they are (the paper's finish), they are the submission's target column."""
    result = call(pad, ctx, "predict_target", {"model": "clf", "X_data": "X"}, {"model_name": "CatBoost"}, "pred")
    assert result.ok and pad["pred"].name == "Transported"
    assert "Predictions of CatBoost for 20 rows, named 'Transported'" in result.message
    assert call(pad, ctx, "predict_target", {"model": "clf", "X_data": "X"}, {"return_probabilities": True},
                "proba").ok
    assert pad["proba"].name == "Transported"
    assert call(pad, ctx, "save_dataframe_to_csv", {"df": "pred"}, {"filepath": "submission.csv"}).ok
    assert pd.read_csv(ctx.sandbox / "submission.csv").columns.tolist() == ["Transported"]
    # without a task (a bare context) the model's name is used
    (tmp_path / "bare").mkdir()
    bare = tool_context(tmp_path / "bare")
    assert call(pad, bare, "predict_target", {"model": "clf", "X_data": "X"}, output="p2").ok
    assert pad["p2"].name == "model"


def test_predict_target_reports_missing_and_extra_columns(pad, ctx):
    result = call(pad, ctx, "predict_target", {"model": "clf", "X_data": "X_bad"}, output="pred")
    assert_error(result, "predict_target", "missing 1 column(s) the model was trained on: ['a']")
    assert "never saw: ['c']" in result.message and "same cleaning/feature steps" in result.message


def test_predict_target_on_a_test_split_that_still_holds_the_target_says_how_to_drop_it(pad, ctx):
    """Every training column plus one: what a model passes when it predicts on the test split without
    converting it (a real trial retried that 15 times on "Apply the same cleaning/feature steps")."""
    pad["X_with_target"] = pad["X"].assign(MedHouseVal=0.0)
    result = call(pad, ctx, "predict_target", {"model": "clf", "X_data": "X_with_target"}, output="pred")
    assert_error(result, "predict_target", "1 column(s) the model never saw: ['MedHouseVal']")
    assert "convert_dataframe_to_features_target (is_train=false), which drops it" in result.message


def test_predict_target_probabilities(pad, ctx):
    assert call(pad, ctx, "predict_target", {"model": "clf", "X_data": "X"},
                {"return_probabilities": True}, output="proba").ok
    proba = pad["proba"]
    assert isinstance(proba, pd.Series) and proba.between(0, 1).all() and proba.iloc[-1] > 0.5
    assert call(pad, ctx, "predict_target", {"model": "tree3", "X_data": "X"},
                {"return_probabilities": True}, output="proba3").ok
    assert pad["proba3"].shape == (20, 3)
    assert_error(call(pad, ctx, "predict_target", {"model": "reg", "X_data": "X"}, {"return_probabilities": True},
                      output="p"), "predict_target", "predict_proba")


def test_save_and_load_model(pad, ctx):
    result = call(pad, ctx, "save_model", {"model": "clf"}, {"filepath": "models/clf.pkl"})
    assert result.ok, result.message
    saved = ctx.sandbox / "models" / "clf.pkl"
    assert saved in ctx.written_files
    assert call(pad, ctx, "load_model", kwargs={"filepath": "models/clf.pkl"}, output="loaded").ok
    assert pad["loaded"].predict(pad["X"]).tolist() == pad["clf"].predict(pad["X"]).tolist()
    assert_error(call(pad, ctx, "save_model", {"model": "clf"}, {"filepath": "../escape.pkl"}), "save_model", "'..'")
    assert_error(call(pad, ctx, "save_model", {"model": "clf"}, {"filepath": "model.txt"}), "save_model", ".pkl")


class _Exploit:
    def __reduce__(self):
        return (print, ("pwned",))


def test_load_model_refuses_pickles_this_trial_did_not_write(pad, ctx, tmp_path):
    for where in (ctx.sandbox / "planted.pkl", tmp_path / "planted.pkl"):  # sandbox and data dir
        where.write_bytes(pickle.dumps(_Exploit()))
    result = call(pad, ctx, "load_model", kwargs={"filepath": "planted.pkl"}, output="m")
    assert_error(result, "load_model", "only models saved with save_model")
    assert "m" not in pad
    assert_error(call(pad, ctx, "load_model", kwargs={"filepath": "/etc/passwd.pkl"}, output="m"), "load_model",
                 "outside the allowed")


def test_csv_writer_cannot_plant_a_loadable_pickle(pad, ctx):
    assert_error(call(pad, ctx, "save_dataframe_to_csv", {"df": "X"}, {"filepath": "model.pkl"}),
                 "save_dataframe_to_csv", "must end with .csv")
    assert_error(call(pad, ctx, "load_model", kwargs={"filepath": "model.pkl"}, output="m"), "load_model",
                 "not found")


def test_save_dataframe_to_csv(pad, ctx):
    result = call(pad, ctx, "save_dataframe_to_csv", {"df": "X"}, {"filepath": "out/x.csv"})
    assert result.ok and "20 rows x 2 columns" in result.message
    assert pd.read_csv(ctx.sandbox / "out" / "x.csv").columns.tolist() == ["a", "b"]  # no index column
    assert_error(call(pad, ctx, "save_dataframe_to_csv", {"df": "X"}, {"filepath": "/tmp/x.csv"}),
                 "save_dataframe_to_csv", "outside the sandbox")


def test_create_submission_labels(pad, ctx):
    call(pad, ctx, "predict_target", {"model": "clf", "X_data": "X"}, output="pred")
    result = call(pad, ctx, "create_submission", {"predictions": "pred", "test_df": "test_df"})
    assert result.ok, result.message
    written = pd.read_csv(ctx.sandbox / "submission.csv")
    assert written.columns.tolist() == ["PassengerId", "Transported"]
    assert written["Transported"].tolist() == pad["y"].tolist()
    assert "20 rows" in result.message


def test_create_submission_refuses_probabilities_for_label_task(pad, ctx):
    call(pad, ctx, "predict_target", {"model": "clf", "X_data": "X"}, {"return_probabilities": True}, output="proba")
    assert_error(call(pad, ctx, "create_submission", {"predictions": "proba", "test_df": "test_df"}),
                 "create_submission", "look like probabilities")


def test_create_submission_probability_task_takes_positive_column(pad, ctx):
    ctx.task = make_task(prediction="probability")
    pad["proba2"] = pd.DataFrame({"False": np.linspace(1, 0, 20), "True": np.linspace(0, 1, 20)})
    assert call(pad, ctx, "create_submission", {"predictions": "proba2", "test_df": "test_df"}).ok
    written = pd.read_csv(ctx.sandbox / "submission.csv")
    np.testing.assert_allclose(written["Transported"], np.linspace(0, 1, 20))


def test_create_submission_errors(pad, ctx):
    pad["short"] = pd.Series([True] * 5)
    assert_error(call(pad, ctx, "create_submission", {"predictions": "short", "test_df": "test_df"}),
                 "create_submission", "has 5 rows but test_df has 20")
    pad["pred"] = pd.Series([True] * 20)
    assert_error(call(pad, ctx, "create_submission", {"predictions": "pred", "test_df": "X"}),
                 "create_submission", "no id column 'PassengerId'")


def test_predict_in_child_leaves_parent_and_sibling(pad, ctx):
    left, right = pad.child(), pad.child()
    assert call(left, ctx, "predict_target", {"model": "clf", "X_data": "X"}, output="X").ok
    assert isinstance(left["X"], pd.Series)
    assert isinstance(pad["X"], pd.DataFrame) and isinstance(right["X"], pd.DataFrame)


def test_stage_tags():
    assert {"modeling", "evaluation"} <= set(REGISTRY.get("save_model").roles)
    assert REGISTRY.get("load_model").kind == "set"
    assert REGISTRY.get("create_submission").kind == "get"
    assert REGISTRY.get("predict_target").object_params == ("model", "X_data")


def test_predict_accepts_the_frame_lightgbm_renamed_at_fit_time(tmp_path):
    """LightGBM stores '55 Cancri e' as '55_Cancri_e'; the agent's own test frame must still predict."""
    import lightgbm as lgb
    import numpy as np

    from mltb_core.toolkit.registry import ToolContext, execute
    from mltb_core.toolkit.scratchpad import Scratchpad

    rng = np.random.default_rng(0)
    X = pd.DataFrame({"Destination_55 Cancri e": rng.random(60), "Age": rng.random(60)})
    model = lgb.LGBMClassifier(n_estimators=3, verbose=-1).fit(X, rng.integers(0, 2, 60))
    pad = Scratchpad(objects={"model": model, "X_test": X[["Age", "Destination_55 Cancri e"]]})
    result = execute({"tool_name": "predict_target", "tool_args": {"bindings": {"model": "model", "X_data": "X_test"},
                                                                  "output": "preds"}}, pad, ToolContext(sandbox=tmp_path))
    assert result.ok, result.message
    assert len(pad.get("preds")) == 60
