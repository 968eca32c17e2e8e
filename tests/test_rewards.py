"""The ten shaped-reward stages: order, once per trajectory, and the feedback the model reads."""

import json

import pytest

import mltb_core.toolkit.tools  # noqa: F401
from mltb_core.analysis.treeview import tree_from_steps
from mltb_core.config import TrialConfig
from mltb_core.planners.episode import Episode
from mltb_core.planners.trajectory import TrajectoryWriter
from mltb_core.planners.tree import path_to
from mltb_core.toolkit.registry import ToolContext
from mltb_core.stages.rewards import REWARD_STAGES, StageContext, stage_index
from mltb_core.bench.splits import prepare_split
from mltb_core.bench.tasks import get_task
from mltb_core.runner.solve import prepare_agent_data
from scripted import ScriptedBackend, call, spaceship_pipeline


@pytest.fixture(scope="module")
def spaceship(tmp_path_factory):
    task = get_task("spaceship-titanic")
    split = prepare_split(task, seed=0)
    out = tmp_path_factory.mktemp("run")
    return task, split, prepare_agent_data(split, out), out


def run_script(spaceship, script, max_features=1000, feedback=True, raw_width=None):
    """Step the calls one by one below the root; return the nodes (root excluded)."""
    return path_to(run_episode(spaceship, script, max_features, feedback, raw_width).last)[1:]


def run_episode(spaceship, script, max_features=1000, feedback=True, raw_width=None, trajectory=None):
    """The episode after stepping the calls one by one below the root (its last node as ``.last``); its steps
    are written to the file ``trajectory`` when given."""
    task, split, data_dir, out = spaceship
    stage_ctx = StageContext.from_files(task, split.train_path, split.test_path, max_features)
    if raw_width is not None:
        stage_ctx.original_features = raw_width
    sandbox = out / f"sandbox-{len(script)}-{max_features}"
    sandbox.mkdir(exist_ok=True)
    backend = ScriptedBackend(script)
    ep = Episode.in_process(task, TrialConfig(planner="react", model="scripted"), backend,
                 stage_ctx,
                 ToolContext(sandbox=sandbox, data_dir=data_dir, task=task),
                 TrajectoryWriter(trajectory) if trajectory else None, feedback=feedback)
    node = ep.root
    for _ in script:
        node = ep.step(node, ep.propose(node, "system", 1)[0])
    ep.last = node
    return ep


def test_stages_pass_in_order_once_each_with_actionable_feedback(spaceship):
    nodes = run_script(spaceship, spaceship_pipeline())
    stages = [n.progress.stage for n in nodes]
    assert stages == [1, 2, 3, 3, 4, 4, 5, 6, 7, 8, 9, 9, 9, 9, 9, 10]  # four calls write the submission
    assert all(n.ok for n in nodes), [n.observation[:200] for n in nodes if not n.ok]
    after_median = nodes[3]
    assert "Data cleaning incomplete" in after_median.progress.feedback
    assert "HomePlanet" in after_median.progress.feedback  # names a column that still has NaNs
    assert "Stage check: Data cleaning incomplete" in after_median.observation
    after_mode = nodes[4]
    assert "Categorical columns still unencoded" in after_mode.progress.feedback and "Cabin" in after_mode.progress.feedback
    fitted = nodes[10]
    assert fitted.progress.newly_passed == (9,) and 0.0 < fitted.progress.cv_quality <= 1.0
    # each stage pays once: 9 stages of 1.0 plus the model's 0.5..1.0
    final = nodes[-1]
    assert final.terminal and final.progress.done
    assert final.progress.reward == pytest.approx(9 + 0.5 + 0.5 * fitted.progress.cv_quality)
    assert sum(len(n.progress.newly_passed) for n in nodes) == 10


def test_a_valid_submission_that_skipped_stages_is_terminal_but_not_paid(spaceship):
    script = spaceship_pipeline()
    del script[3:7]  # no cleaning and no encoding: drop every text column instead (LightGBM takes NaN)
    script.insert(3, call("drop_feature", {"df": "combined"}, "combined",
                          column=["PassengerId", "Name", "HomePlanet", "CryoSleep", "Cabin", "Destination", "VIP"]))
    nodes = run_script(spaceship, script)
    final = nodes[-1]
    assert final.terminal, final.observation[:300]
    assert final.progress.stage == 3  # cleaning never passed, so later stages never paid
    assert "Data cleaning incomplete" in final.progress.feedback


def test_wrong_target_is_flagged_at_stage_seven(spaceship):
    script = spaceship_pipeline(target="VIP", submit=False)[:9]
    nodes = run_script(spaceship, script)
    assert nodes[-1].progress.stage == 6
    assert "the challenge's target column is 'Transported'" in nodes[-1].progress.feedback


def test_feature_blow_up_is_reported(spaceship):
    script = spaceship_pipeline()[:5] + [call("encode_all_categorical_columns", {"df": "combined"}, "combined",
                                              method="label")]
    nodes = run_script(spaceship, script, max_features=5, raw_width=2)
    assert nodes[-1].progress.stage == 4
    assert "Feature count blew up" in nodes[-1].progress.feedback and "bound 5" in nodes[-1].progress.feedback
    # the bound never falls below twice the raw width: wide raw data is not a blow-up
    assert run_script(spaceship, script, max_features=5)[-1].progress.stage == 5


def test_invalid_submission_gets_a_reason_and_the_calls_that_fix_it(spaceship):
    # predictions of the train features: one column, but of the train length
    script = spaceship_pipeline(submit=False) + [
        call("predict_target", {"model": "model", "X_data": "X_train"}, "train_preds"),
        call("save_dataframe_to_csv", {"df": "train_preds"}, filepath="submission.csv")]
    nodes = run_script(spaceship, script)
    final = nodes[-1]
    assert not final.terminal and final.progress.stage == 9
    feedback = final.progress.feedback
    assert "The submission is invalid" in feedback and "test.csv has 1739" in feedback, feedback
    # names the call that completes the stage, with the path's own test predictions
    assert "save_dataframe_to_csv(df='preds', filepath='submission.csv')" in feedback, feedback


def test_the_papers_finish_saving_the_predictions_alone_completes_stage_ten(spaceship):
    script = spaceship_pipeline(submit=False)
    before = run_script(spaceship, script)[-1]
    assert before.progress.stage == 9
    assert "save_dataframe_to_csv(df='preds', filepath='submission.csv')" in before.progress.feedback
    nodes = run_script(spaceship, script + [call("save_dataframe_to_csv", {"df": "preds"},
                                                 filepath="submission.csv")])
    final = nodes[-1]
    assert final.ok and final.terminal and final.progress.done, final.progress.feedback


def test_progress_says_when_the_path_holds_predictions_for_the_test_rows(spaceship):
    script = spaceship_pipeline(submit=False)
    assert script[-1]["tool_name"] == "predict_target"
    nodes = run_script(spaceship, script)
    assert nodes[-1].progress.predicted and not any(n.progress.predicted for n in nodes[:-1])
    # predictions of the train rows are not the test's; a valid submission leaves nothing pending
    train_only = run_script(spaceship, script[:-1] + [call("predict_target", {"model": "model", "X_data": "X_train"},
                                                           "train_preds")])[-1]
    assert train_only.progress.stage == 9 and not train_only.progress.predicted
    done = run_script(spaceship, script + [call("save_dataframe_to_csv", {"df": "preds"}, filepath="submission.csv")])
    assert done[-1].progress.done and not done[-1].progress.predicted
    # the trial's best node at stage 9 is one holding the test predictions, though deeper: its report then says
    # the save was missing, not the prediction
    ep = run_episode(spaceship, script, trajectory=spaceship[3] / "predicted.jsonl")
    assert ep.best is ep.last and ep.best.progress.predicted
    # the trajectory says so too, and the tree view shows it on the node
    ep.trajectory.close()
    steps = [json.loads(line) for line in (spaceship[3] / "predicted.jsonl").read_text().splitlines()]
    told = [s for s in steps if s["step_type"] == "reward_feedback"]
    assert [s["predicted"] for s in told] == [False] * (len(told) - 1) + [True]
    assert told[-1]["node_id"] == ep.last.id
    shown = {n["id"]: n for n in tree_from_steps(steps)["nodes"]}
    assert shown[ep.last.id]["feedback"][-1]["predicted"] is True


def test_predictions_converted_to_a_frame_under_their_own_name_stay_the_predictions(spaceship):
    # a frame of the predictions holds their values: converted in place, the path still holds the test
    # predictions (stage 10 had lost them, as the writer was no longer predict_target), and saving it finishes
    script = spaceship_pipeline(submit=False)
    convert = call("convert_to_dataframe", {"data": "preds"}, "preds", columns=["Transported"])
    converted = run_script(spaceship, script + [convert])[-1]
    assert converted.ok and converted.progress.stage == 9 and converted.progress.predicted
    assert "No submission written yet: save_dataframe_to_csv(df='preds'" in converted.progress.feedback
    saved = run_script(spaceship, script + [convert, call("save_dataframe_to_csv", {"df": "preds"},
                                                          filepath="submission.csv")])[-1]
    assert saved.progress.done, saved.progress.feedback
    # a frame of a test feature the grader would take saved alone is not offered: the predictions are
    other = [call("get_features", {"df": "X_test"}, "other", columns=["CryoSleep"]),
             call("convert_to_dataframe", {"data": "other"}, "other", columns=["Transported"])]
    final = run_script(spaceship, script + other)[-1]
    assert final.progress.predicted and "save_dataframe_to_csv(df='preds'" in final.progress.feedback
    assert "df='other'" not in final.progress.feedback
    # their one column named after the id, which the grader refuses for that name alone: the predictions kept
    # under their own name are offered; renamed in place, the advice is to name the column back, not to refit
    renamed = call("convert_to_dataframe", {"data": "preds"}, "sub", columns=["PassengerId"])
    final = run_script(spaceship, script + [renamed])[-1]
    assert final.progress.predicted and "save_dataframe_to_csv(df='preds'" in final.progress.feedback
    in_place = call("convert_to_dataframe", {"data": "preds"}, "preds", columns=["PassengerId"])
    final = run_script(spaceship, script + [in_place])[-1]
    assert final.ok and not final.progress.predicted and "'preds' cannot be the submission" in final.progress.feedback
    back = "convert_to_dataframe(data='preds', columns=['Transported'], output='preds'), then save_dataframe_to_csv("
    assert f"To finish, name its column after the target: {back}" in final.progress.feedback
    assert "predict_target(" not in final.progress.feedback.split("To finish")[1].split(";")[0]
    named_back = call("convert_to_dataframe", {"data": "preds"}, "preds", columns=["Transported"])
    assert run_script(spaceship, script + [in_place, named_back])[-1].progress.predicted
    # a frame of anything else is not predictions, and writing over them ends their standing
    ids = call("get_features", {"df": "test"}, "preds", columns=["PassengerId"])
    for tail in ([ids], [ids, call("convert_to_dataframe", {"data": "preds"}, "preds")]):
        final = run_script(spaceship, script + tail)[-1]
        assert final.ok and final.progress.stage == 9 and not final.progress.predicted, final.observation[:300]
        assert "predict the test features with predict_target(" in final.progress.feedback


def test_predictions_the_grader_refuses_are_not_offered_for_saving(spaceship):
    # a regressor passes stage 9 on a classification task; its floats saved alone are refused, so the feedback
    # must not send the model to save them (again), nor the note put the save first
    script = spaceship_pipeline(submit=False)
    regressor = script[:-2] + [call("fit_lightgbm_regressor", {"X_train": "X_train", "y_train": "y_train"}, "model",
                                    cv=3),
                               call("predict_target", {"model": "model", "X_data": "X_test"}, "preds")]
    # fitted, not yet predicted: predicting with the regressor cannot finish, so the first advice is the refit
    fitted = run_script(spaceship, regressor[:-1])[-1].progress.feedback
    assert fitted.startswith("No submission written yet: fit a model of the task's kind: fit_lightgbm_classifier(")
    assert "predict_target(model='model'" not in fitted
    for tail in ([], [call("save_dataframe_to_csv", {"df": "preds"}, filepath="submission.csv")]):
        final = run_script(spaceship, regressor + tail)[-1]
        assert final.progress.stage == 9 and not final.progress.predicted
        feedback = final.progress.feedback
        assert "fit a model of the task's kind: fit_lightgbm_classifier(" in feedback
        assert "save_dataframe_to_csv(df='preds'" not in feedback
        # the refusal's reason said once: for the predictions, or for the saved file refused alike
        assert feedback.count("not booleans") == 1
        assert ("the predictions 'preds' cannot be the submission" in feedback) == (not tail)
        assert feedback.startswith("The submission is invalid: ") == bool(tail)
    # a classifier's probabilities on a task graded on labels: predict labels with the same model
    probabilities = script[:-1] + [call("predict_target", {"model": "model", "X_data": "X_test"}, "proba",
                                        return_probabilities=True)]
    feedback = run_script(spaceship, probabilities)[-1].progress.feedback
    assert "the predictions 'proba' cannot be the submission" in feedback
    assert "predict labels: predict_target(model='model', X_data='X_test', return_probabilities=false)" in feedback
    # labels the path predicted before them are offered for saving
    feedback = run_script(spaceship, script + probabilities[-1:])[-1].progress.feedback
    assert "No submission written yet: save_dataframe_to_csv(df='preds'" in feedback
    # a classifier fitted on another column (HomePlanet's codes): predicting its labels again cannot finish,
    # so the advice is a fit on the train target
    other = script[:-2] + [call("get_features", {"df": "train_df"}, "hp", columns=["HomePlanet"]),
                           call("fit_lightgbm_classifier", {"X_train": "X_train", "y_train": "hp"}, "model", cv=3),
                           call("predict_target", {"model": "model", "X_data": "X_test"}, "codes")]
    feedback = run_script(spaceship, other)[-1].progress.feedback
    assert "the predictions 'codes' cannot be the submission" in feedback and "predict labels" not in feedback
    assert "fit_random_forest_classifier(X_train='X_train', y_train='y_train')" in feedback
    # ... and before it predicts, the feedback does not send it to predict those codes first
    fitted = run_script(spaceship, other[:-1])[-1].progress.feedback
    assert "predict_target(model='model'" not in fitted and "fit_random_forest_classifier(" in fitted
    # a classifier fitted after the regressor is the one to predict with, not another fit
    refit = run_script(spaceship, regressor[:-1] + [
        call("fit_lightgbm_classifier", {"X_train": "X_train", "y_train": "y_train"}, "clf", cv=3)])[-1]
    assert "predict with the fitted model 'clf': predict_target(model='clf', X_data='X_test')" \
        in refit.progress.feedback and "fit a model of the task's kind" not in refit.progress.feedback
    # a valid prediction made after it is offered again
    fixed = regressor + [call("fit_lightgbm_classifier", {"X_train": "X_train", "y_train": "y_train"}, "clf", cv=3),
                         call("predict_target", {"model": "clf", "X_data": "X_test"}, "labels")]
    final = run_script(spaceship, fixed)[-1]
    assert final.progress.predicted and "save_dataframe_to_csv(df='labels'" in final.progress.feedback


def test_a_task_graded_on_probabilities_is_told_to_predict_probabilities_in_the_graders_form(spaceship):
    import dataclasses

    from mltb_core.stages.rewards import PathLog, Progress, advance
    from mltb_core.toolkit.scratchpad import Scratchpad

    task, split, _data_dir, _out = spaceship
    labels = StageContext.from_files(task, split.train_path, split.test_path)
    proba = dataclasses.replace(labels, task=dataclasses.replace(task, prediction="probability"), _saved_alone={})
    log = PathLog(frozenset({"fit_lightgbm_classifier"}), (("m", "fit_lightgbm_classifier"),))
    per_class = dataclasses.replace(labels, task=dataclasses.replace(task, prediction="probability",
                                                                     problem_type="multiclass"), _saved_alone={})
    for ctx, flag, form in ((labels, "X_data='X_test')", "in its order) or a frame with the columns "
                                                         "['PassengerId', 'Transported'] are valid"),
                            (proba, "X_data='X_test', return_probabilities=true)", "['PassengerId', 'Transported']"),
                            (per_class, "X_data='X_test', return_probabilities=true)",
                             "in its order, one column per class named after it) or a frame with the columns "
                             "['PassengerId', 'False', 'True'] are valid")):
        progress, _ = advance(ctx, Progress(stage=9), Scratchpad(objects={}), log, {"model": "m"})
        assert f"predict_target(model='<the fitted model>', {flag}" in progress.feedback, progress.feedback
        assert form in progress.feedback, progress.feedback


def test_per_class_probabilities_relabelled_by_a_conversion_are_not_offered(spaceship):
    # relabelled, column 'True' holds P(False): the grader would take the frame, so only the call that renamed
    # several columns at once tells it apart; a conversion that keeps the names (or restates them) keeps the standing
    import dataclasses

    import numpy as np
    import pandas as pd

    from mltb_core.stages.rewards import PathLog, Progress, advance
    from mltb_core.toolkit.registry import ToolCall
    from mltb_core.toolkit.scratchpad import Scratchpad

    task, split, _data_dir, _out = spaceship
    ctx = StageContext.from_files(dataclasses.replace(task, prediction="probability", problem_type="multiclass"),
                                  split.train_path, split.test_path)
    p = np.linspace(0.1, 0.9, ctx.n_test)
    proba = pd.DataFrame({"False": 1 - p, "True": p})
    pad = Scratchpad(objects={"proba": proba, "framed": proba.copy(), "restated": proba.copy(),
                              "relabelled": proba.set_axis(["True", "False"], axis=1)})
    log = PathLog(frozenset({"fit_lightgbm_classifier"}), (("m", "fit_lightgbm_classifier"),))
    for call_, out in ((ToolCall("predict_target", {"model": "m", "X_data": "X_test"}, {"return_probabilities": True},
                                 "proba"), "proba"),
                       (ToolCall("convert_to_dataframe", {"data": "proba"}, {}, "framed"), "framed"),
                       (ToolCall("convert_to_dataframe", {"data": "proba"}, {"columns": ["False", "True"]},
                                 "restated"), "restated"),
                       (ToolCall("convert_to_dataframe", {"data": "proba"}, {"columns": ["True", "False"]},
                                 "relabelled"), "relabelled")):
        log = log.extend(call_, True, [out], before=pad)
    # the names restated in their order rename nothing; without the data, any list of names counts as renaming
    assert log.predictions == {"proba", "framed", "restated"}
    blind = PathLog(predictions=frozenset({"proba"})).extend(
        ToolCall("convert_to_dataframe", {"data": "proba"}, {"columns": ["False", "True"]}, "restated"), True,
        ["restated"])
    assert blind.predictions == {"proba"}
    assert ctx.saved_alone(pad.get("relabelled"))[0]
    progress, _ = advance(ctx, Progress(stage=9), pad, log, {"model": "m"})
    assert progress.predicted and "save_dataframe_to_csv(df='restated'" in progress.feedback, progress.feedback


def test_the_worker_tells_restated_class_names_from_relabelled_ones_on_the_scratchpad_the_call_read(spaceship):
    # per-class probabilities (a classifier of HomePlanet's three codes) converted in place: the names restated
    # in their order keep the standing; reordered, the object loses it, though its new names are the old ones
    script = spaceship_pipeline(submit=False)[:-2] + [
        call("get_features", {"df": "train_df"}, "hp", columns=["HomePlanet"]),
        call("fit_lightgbm_classifier", {"X_train": "X_train", "y_train": "hp"}, "model", cv=3),
        call("predict_target", {"model": "model", "X_data": "X_test"}, "proba", return_probabilities=True)]
    ep = run_episode(spaceship, script)
    names = list(ep.workspace._states[ep.last.state].pad.get("proba").columns)
    assert len(names) == 3, names

    def standing(columns):
        ep = run_episode(spaceship, script + [call("convert_to_dataframe", {"data": "proba"}, "proba",
                                                   columns=columns)])
        assert ep.last.ok, ep.last.observation
        return "proba" in ep.workspace._states[ep.last.state].log.predictions

    assert standing(names)
    assert not standing(names[::-1])


def test_a_frame_of_several_columns_without_ids_is_invalid_with_a_reason(spaceship):
    script = spaceship_pipeline(submit=False) + [
        call("save_dataframe_to_csv", {"df": "X_test"}, filepath="submission.csv")]
    final = run_script(spaceship, script)[-1]
    assert not final.terminal and final.progress.stage == 9
    assert "no 'PassengerId' column" in final.progress.feedback and "predictions alone" in final.progress.feedback


def test_every_stage_feedback_names_a_tool_call(spaceship):
    """Each stage's first feedback (the path stopped just before it) names a call that completes it."""
    script = spaceship_pipeline(submit=False)
    nodes = run_script(spaceship, script)
    feedback = {n.progress.stage + 1: n.progress.feedback for n in reversed(nodes) if n.progress.feedback}
    task, split, data_dir, out = spaceship
    expected = {2: "read_data(filepath='test.csv')", 3: "concatenate_train_test(train_df='train', test_df='test')",
                4: "fillna_with_mode(df='combined', columns=[", 5: "label_encode(df='combined', columns=[",
                10: "predict_target(model='model', X_data='X_test'), then save_dataframe_to_csv("}
    for stage, fragment in expected.items():
        assert fragment in feedback[stage], (stage, feedback[stage])
    first = run_script(spaceship, [call("get_dataframe_summary", {"df": "nothing"})])[-1]
    assert "read_data(filepath='train.csv')" in first.progress.feedback
    stage_ctx = StageContext.from_files(task, split.train_path, split.test_path)
    from mltb_core.stages.rewards import PathLog, Progress, advance
    from mltb_core.toolkit.scratchpad import Scratchpad

    for stage in range(6, 10):   # a path that has passed stage-1 checks up to `stage`, with nothing after it
        progress, _ = advance(stage_ctx, Progress(stage=stage - 1), Scratchpad(), PathLog(), {})
        assert progress.stage == stage - 1
        tool = {6: "split_combined_into_train_test(combined=", 7: "convert_dataframe_to_features_target(df=",
                8: "is_train=false)", 9: "fit_lightgbm_classifier(X_train="}[stage]
        assert tool in progress.feedback, (stage, progress.feedback)


def test_stage_six_needs_the_target_on_the_train_part(spaceship):
    script = spaceship_pipeline(submit=False)[:7] + [
        call("drop_feature", {"df": "combined"}, "combined", column="Transported"),
        call("split_combined_into_train_test", {"combined": "combined"}, ["train_df", "test_df"])]
    final = run_script(spaceship, script)[-1]
    assert final.ok and final.progress.stage == 5
    assert "has no target column 'Transported'" in final.progress.feedback, final.progress.feedback
    assert "split_combined_into_train_test(combined='combined')" in final.progress.feedback


def test_stage_eight_names_missing_values_as_the_cause(spaceship):
    import numpy as np
    import pandas as pd

    from mltb_core.stages.rewards import PathLog, Progress, advance
    from mltb_core.toolkit.scratchpad import Scratchpad

    task, split, data_dir, out = spaceship
    stage_ctx = StageContext.from_files(task, split.train_path, split.test_path)
    columns = ["Age", "VIP"]
    gappy = pd.DataFrame({"Age": np.where(np.arange(stage_ctx.n_test) % 3 == 0, np.nan, 30.0), "VIP": 0})
    pad = Scratchpad(objects={"X_test": gappy})
    log = PathLog(frozenset({"convert_dataframe_to_features_target"}),
                  (("X_test", "convert_dataframe_to_features_target"),))
    progress, _ = advance(stage_ctx, Progress(stage=7), pad, log, {"X_train_columns": columns})
    feedback = progress.feedback
    assert progress.stage == 7
    assert "'X_test' have the training columns" in feedback and "missing values remain in 1 column(s): Age (" in feedback
    assert "missing []" not in feedback and "convert_dataframe_to_features_target(df='test_df'" in feedback
    # a frame that really lacks columns is reported by its column difference
    pad = Scratchpad(objects={"X_test": gappy.drop(columns="VIP").fillna(0)})
    progress, _ = advance(stage_ctx, Progress(stage=7), pad, log, {"X_train_columns": columns})
    assert "Test features do not match" in progress.feedback and "missing ['VIP'], extra []" in progress.feedback
    # the columns match and nothing is missing, but a column is text: that is the cause named, not "0 missing"
    pad = Scratchpad(objects={"X_test": gappy.fillna(0).assign(VIP="yes")})
    progress, _ = advance(stage_ctx, Progress(stage=7), pad, log, {"X_train_columns": columns})
    assert progress.stage == 7 and "categorical columns are still unencoded: VIP (1 unique" in progress.feedback
    assert "missing values remain" not in progress.feedback


def test_feedback_never_offers_a_name_rewritten_since_its_stage_found_it(spaceship):
    """Seen on the real model (MCTS-Shaped, spaceship, 5d5f4ac, t01 node 41): stage 7 found the train features
    under 'X_train'; a later get_features wrote the combined frame's 8,693 rows under that name, and stage 9's
    feedback still said fit_lightgbm_classifier(X_train='X_train', ...), a call the tool refuses."""
    script = spaceship_pipeline(submit=False)[:10]
    before = run_script(spaceship, script)[-1]
    assert before.progress.stage == 8
    assert "fit_lightgbm_classifier(X_train='X_train', y_train='y_train')" in before.progress.feedback
    rewritten = script + [call("get_features", {"df": "combined"}, "X_train", columns=["Age", "Spa"])]
    after = run_script(spaceship, rewritten)[-1]
    feedback = after.progress.feedback
    assert after.ok and after.progress.stage == 8
    assert "X_train='X_train'" not in feedback, feedback
    assert "X_train='<the train features>', y_train='y_train'" in feedback, feedback
    assert "'X_train' does not hold the train features now (last written by get_features)" \
        in feedback, feedback
    # a rewrite that still holds what the stage found (the same features under the same name) stays offered
    features = ["HomePlanet", "CryoSleep", "Cabin", "Destination", "Age", "VIP", "RoomService", "FoodCourt",
                "ShoppingMall", "Spa", "VRDeck"]   # spaceship's columns less the id, Name and the target
    kept = run_script(spaceship, script + [call("get_features", {"df": "X_train"}, "X_train", columns=features)])[-1]
    assert kept.ok and "fit_lightgbm_classifier(X_train='X_train', y_train='y_train')" in kept.progress.feedback
    assert "does not hold" not in kept.progress.feedback
    # train rows, encoded and complete, but fewer columns than stage 7 found: a fit on them fails stage 9
    fewer = run_script(spaceship, script + [call("get_features", {"df": "X_train"}, "X_train", columns=["Age"])])[-1]
    assert fewer.ok and "'X_train' does not hold the train features now" in fewer.progress.feedback
    # stage 10 names the fitted model for predict_target, unless something else now has its name
    fitted = spaceship_pipeline(submit=False)[:11]
    gone = run_script(spaceship, fitted + [call("read_data", output="model", filepath="test.csv")])[-1]
    assert gone.ok and gone.progress.stage == 9
    assert "predict_target(model='<the fitted model>', X_data='X_test')" in gone.progress.feedback
    assert "'model' does not hold the fitted model now (last written by read_data)" in gone.progress.feedback
    assert "make it again under a new name: fit_lightgbm_classifier(X_train='X_train'" in gone.progress.feedback


def test_feedback_offers_the_object_made_again_and_notes_only_the_stage_shown(spaceship):
    """Review of the stale-name fix: a note about a name must belong to the stage whose feedback is shown,
    an object made again under a new name is offered, and a role is what the tool and the stage accept."""
    script = spaceship_pipeline(submit=False)
    # the train conversion stored over its own input: stage 7 passed, stage 8's feedback has no note about it
    over_input = script[:8] + [call("convert_dataframe_to_features_target", {"df": "train_df"},
                                    ["train_df", "y_train"], target_column="Transported", is_train=True)]
    final = run_script(spaceship, over_input)[-1]
    assert final.ok and final.progress.stage == 7 and "does not hold" not in final.progress.feedback
    # the model follows the note and makes the train features again: the new name is offered
    remade = script[:10] + [call("get_features", {"df": "combined"}, "X_train", columns=["Age", "Spa"]),
                            call("convert_dataframe_to_features_target", {"df": "train_df"}, ["X_train2", "y_train2"],
                                 target_column="Transported", is_train=True)]
    feedback = run_script(spaceship, remade)[-1].progress.feedback
    assert "X_train='X_train2'" in feedback and "does not hold" not in feedback, feedback
    # features with an infinite value are no train features: every fit refuses them
    infinite = script[:10] + [call("create_numeric_feature", {"df": "X_train"}, "X_train", name="Age",
                                   expression="(RoomService + 1) / 0")]
    final = run_script(spaceship, infinite)[-1]
    assert final.ok, final.observation[:300]
    assert "X_train='<the train features>'" in final.progress.feedback, final.progress.feedback
    # test.csv read again over the split's test part: converting it would not give the train features' columns
    reread = script[:9] + [call("read_data", output="test_df", filepath="test.csv")]
    feedback = run_script(spaceship, reread)[-1].progress.feedback
    assert "df='test_df'" not in feedback, feedback
    assert "'test_df' does not hold the split test part now (last written by read_data)" in feedback, feedback
    assert "make it again under a new name: split_combined_into_train_test(combined='combined')" in feedback


def test_a_frame_column_named_like_the_cv_record_is_no_fitted_model(spaceship):
    """A DataFrame column is an attribute too: a column 'mltb_cv_score_' was read as a model's CV score and
    raised out of stage 9 (a Series is no float), so a valid call was reported as not checkable."""
    script = spaceship_pipeline(submit=False)[:10] + [
        call("create_numeric_feature", {"df": "X_test"}, "scored", name="mltb_cv_score_", expression="Age * 0 + 1")]
    final = run_script(spaceship, script)[-1]
    assert final.ok and final.progress.stage == 8, final.observation[:300]
    assert "No fitted model yet" in final.progress.feedback and "could not be checked" not in final.observation


def test_roles_take_what_the_tools_take(spaceship):
    """Second review: the raw test.csv frame has the split part's columns when nothing was dropped, but its
    conversion gives test features with gaps and text; train features without a column pass no fit; a fit
    whose folds gave no score is a fitted model all the same; a category counts its declared levels."""
    import numpy as np
    import pandas as pd

    from mltb_core.stages.rewards import PathLog, Progress, advance
    from mltb_core.toolkit.scratchpad import Scratchpad
    from mltb_core.toolkit.validation import MAX_CATEGORY_LEVELS

    script = spaceship_pipeline(submit=False)
    no_drop = script[:5] + script[6:9]   # stage 7 passes; the raw frames keep the split part's columns
    reread = run_script(spaceship, no_drop + [call("read_data", output="test_df", filepath="test.csv")])[-1]
    assert reread.progress.stage == 7 and "df='test_df'" not in reread.progress.feedback, reread.progress.feedback
    assert "df='test'" not in reread.progress.feedback and "does not hold the split test part now" \
        in reread.progress.feedback
    features = ["HomePlanet", "CryoSleep", "Cabin", "Destination", "Age", "VIP", "RoomService", "FoodCourt",
                "ShoppingMall", "Spa", "VRDeck"]
    bare = script[:6] + [call("drop_feature", {"df": "combined"}, "combined", column=features)] + script[7:9]
    assert run_script(spaceship, bare)[-1].progress.stage == 4   # no feature left: stage 5 does not pass

    task, split, data_dir, out = spaceship
    ctx = StageContext.from_files(task, split.train_path, split.test_path)

    class Fitted:   # a fit whose folds gave NaN (one class in a fold, for ROC AUC)
        def __init__(self):
            self.mltb_cv_score_, self.mltb_cv_metric_, self.mltb_greater_is_better_ = float("nan"), "accuracy", True
    log = PathLog(frozenset({"fit_lightgbm_classifier"}), (("m", "fit_lightgbm_classifier"),))
    progress, _ = advance(ctx, Progress(stage=8), Scratchpad(objects={"m": Fitted()}), log, {})
    assert progress.stage == 9 and progress.cv_quality == 0.0 and progress.newly_passed == (9,)

    levels = [f"v{i}" for i in range(MAX_CATEGORY_LEVELS + 1)]   # declared, though only two are present
    X = pd.DataFrame({"Age": np.arange(ctx.n_train, dtype=float),
                      "Deck": pd.Categorical(["v0", "v1"] * (ctx.n_train // 2) + ["v0"] * (ctx.n_train % 2),
                                             categories=levels)})
    y = pd.Series([True, False] * (ctx.n_train // 2) + [True] * (ctx.n_train % 2), name=task.target)
    log = PathLog(frozenset({"convert_dataframe_to_features_target"}),
                  (("X", "convert_dataframe_to_features_target"), ("y", "convert_dataframe_to_features_target")))
    progress, _ = advance(ctx, Progress(stage=6), Scratchpad(objects={"X": X, "y": y}), log, {})
    assert progress.stage == 6, "every fit refuses a category of more declared levels than the limit"
    X["Deck"] = X["Deck"].cat.remove_unused_categories()
    progress, _ = advance(ctx, Progress(stage=6), Scratchpad(objects={"X": X, "y": y}), log, {})
    assert progress.stage == 7


def test_stage_eight_points_at_the_split_test_part_not_the_raw_test_frame(spaceship):
    """Seen on the real model (MCTS-Shaped, spaceship, 6d96efa): every column label-encoded, the split done, the
    train part converted. The raw test frame has the training columns with gaps, and the feedback said to fill
    them in the combined frame (done already); 30 calls went round that loop. The split's test part needs only
    its target placeholder dropped, and the feedback says so."""
    script = spaceship_pipeline(submit=False)[:5] + spaceship_pipeline(submit=False)[6:9]   # no drop_feature
    final = run_script(spaceship, script)[-1]
    assert final.ok and final.progress.stage == 7, (final.observation[:300], final.progress.feedback)
    feedback = final.progress.feedback
    assert "The split test part 'test_df'" in feedback and "target column 'Transported'" in feedback, feedback
    assert "convert_dataframe_to_features_target(df='test_df', target_column='Transported', is_train=false)" \
        in feedback and "Fill them" not in feedback


def test_feedback_can_be_switched_off(spaceship):
    nodes = run_script(spaceship, spaceship_pipeline()[:4], feedback=False)
    assert "Stage check" not in nodes[-1].observation
    assert "Data cleaning incomplete" in nodes[-1].progress.feedback  # still computed for the record


def test_stage_names_match_the_paper_subtasks():
    assert [s.number for s in REWARD_STAGES] == list(range(1, 11))
    assert stage_index("modeling") == 9
    with pytest.raises(KeyError):
        stage_index("cooking")


def test_forest_cover_stage_nine_quality_uses_its_class_weights():
    # issue 18: the weighted-accuracy metric was called without its class weights, the baseline came back
    # None and stage 9's quality sat at 0.5 whatever the model scored
    import pandas as pd

    from mltb_core.stages.rewards import _constant_baseline, _quality

    task = get_task("forest-cover-type-kernels-only")
    y = pd.Series([c for c in range(1, 8) for _ in range(30)])          # a balanced train sample, as Kaggle's
    baseline = _constant_baseline(task, y)
    weights = task.scoring["class_weights"]
    # the grader's baseline: the heaviest class ("2") everywhere, whose weighted accuracy is its weight share
    assert baseline == pytest.approx(weights["2"] / sum(weights.values()))
    ctx = StageContext(task, len(y), 10, pd.Series(range(10)), y, 1000, original_features=3)
    ctx.cv_baseline = baseline
    metric = task.metric
    assert _quality(ctx, 0.9, metric) > _quality(ctx, 0.7, metric) > 0.0 and _quality(ctx, 0.9, metric) != 0.5


def test_stage_nine_quality_reads_only_the_task_metric(spaceship):
    """A regressor fitted on spaceship's bool target reported its CV RMSE, and stage 9 read it as accuracy
    (issue 33, main job t02): an RMSE of 0.37 clipped to quality 0, and a worse fit would have scored
    higher. A score in another metric counts as the baseline's (0, below any right-kind model at or above
    it), whatever its value; the classifier's accuracy is read as before."""
    script = spaceship_pipeline()
    fit = next(i for i, c in enumerate(script) if c["tool_name"].startswith("fit_"))
    nodes = run_script(spaceship, script[:fit + 1])
    assert script[fit]["tool_name"] == "fit_lightgbm_classifier" and nodes[-1].progress.stage == 9
    assert nodes[-1].progress.cv_quality not in (0.0, 0.5, 1.0)
    regressor = call("fit_lightgbm_regressor", dict(script[fit]["tool_args"]["bindings"]), "reg")
    nodes = run_script(spaceship, [*script[:fit], regressor])
    assert "rmse" in nodes[-1].observation and nodes[-1].progress.stage == 9
    assert nodes[-1].progress.cv_quality == 0.0
    assert nodes[-1].cv_scores == {}   # nor does it rank solutions against scores in the task's metric


def _with_leak(*leak_calls):
    """The canonical pipeline with ``leak_calls`` on the train frame right after it is read (the pipeline's
    fillna then fills the leak's test rows)."""
    script = spaceship_pipeline()
    return [script[0], *leak_calls, *script[1:]]


LEAKS = {
    "expression copy": [call("create_numeric_feature", {"df": "train"}, "train", name="Leak",
                             expression="Transported * 1")],
    "arithmetic of the target": [call("create_numeric_feature", {"df": "train"}, "train", name="Leak",
                                      expression="3 - Transported * 2")],
    "near-copy with noise": [call("create_numeric_feature", {"df": "train"}, "train", name="Leak",
                                  expression="Transported + Age / 70")],
    "rename": [call("create_numeric_feature", {"df": "train"}, "train", name="T2", expression="Transported * 1"),
               call("rename_feature", {"df": "train"}, "train", old_name="T2", new_name="Leak")],
}


def test_the_honest_expert_path_outranks_every_leak_of_the_target(spaceship):
    """Round 5: a copy of the target as a feature earned the maximum shaped reward (10.0 against 9.81): stage
    9 paid 0.5 + 0.5 * the CV quality the copy gave the fit. A feature that alone predicts the training target
    near perfectly earns the fit no quality, and the feedback says why."""
    honest = run_script(spaceship, spaceship_pipeline())[-1]
    assert honest.progress.done and honest.progress.cv_quality > 0
    for variant, leak in LEAKS.items():
        nodes = run_script(spaceship, _with_leak(*leak))
        assert all(n.ok for n in nodes), (variant, [n.observation[:300] for n in nodes if not n.ok])
        last = nodes[-1]
        assert last.progress.stage == 10 and last.progress.cv_quality == 0.0, (variant, last.progress)
        assert honest.progress.reward > last.progress.reward, variant
        fitted = next(n for n in nodes if 9 in n.progress.newly_passed)
        assert "earns no CV quality" in fitted.progress.feedback and "'Leak'" in fitted.progress.feedback, variant


def test_an_honest_strong_feature_and_an_identifier_are_no_copy_of_the_target():
    import numpy as np
    import pandas as pd

    from mltb_core.stages.rewards import LEAK_SKILL, single_feature_skill, target_copies

    rng = np.random.default_rng(0)
    y = pd.Series(rng.integers(0, 2, 2000).astype(bool), name="t")
    X = pd.DataFrame({"id": np.arange(2000), "strong": y * 1.0 + rng.normal(0, 0.5, 2000),
                      "copy": y * 2.0 + 1, "noisy_copy": y + rng.normal(0, 0.05, 2000)})
    skill = single_feature_skill(X, y, classification=True)
    assert skill["id"] < 0.2 and 0.5 < skill["strong"] < LEAK_SKILL
    assert target_copies(X, y, classification=True) == ["copy", "noisy_copy"]
    rare = pd.Series(np.r_[np.ones(20), np.zeros(1980)].astype(int))   # 99% majority: accuracy alone says nothing
    assert target_copies(pd.DataFrame({"zero": np.zeros(2000)}), rare, classification=True) == []
    value = pd.Series(rng.normal(size=2000))
    assert target_copies(pd.DataFrame({"log": np.exp(value), "half": value + rng.normal(0, 1, 2000)}), value,
                         classification=False) == ["log"]


def test_a_copy_with_a_missing_value_or_as_text_is_still_a_copy():
    """A hostile model's variants the fits accept (boosters take missing values; text is a category): one
    missing row, or the target as strings, must not hide the copy."""
    import numpy as np
    import pandas as pd

    from mltb_core.stages.rewards import target_copies

    rng = np.random.default_rng(1)
    y = pd.Series(rng.integers(0, 2, 2000).astype(bool))
    holed = (y * 1.0).mask(pd.Series(np.arange(2000)) == 7)
    X = pd.DataFrame({"holed": holed, "text": y.map({True: "yes", False: "no"}),
                      "names": [f"passenger {i}" for i in range(2000)], "honest": rng.normal(size=2000)})
    assert target_copies(X, y, classification=True) == ["holed", "text"]
    value = pd.Series(rng.normal(size=2000))
    assert target_copies(pd.DataFrame({"holed": value.mask(value > 2)}), value, classification=False) == ["holed"]


# Round 5: five calls and no model (read the test file, a constant target column, save) gave a valid trial.
NO_MODEL = [
    call("read_data", output="test", filepath="test.csv"),
    call("create_numeric_feature", {"df": "test"}, "test", name="Transported", expression="False"),
    call("get_features", {"df": "test"}, "submission", columns=["PassengerId", "Transported"]),
    call("save_dataframe_to_csv", {"df": "submission"}, filepath="submission.csv"),
]


def test_a_valid_file_no_model_predicted_ends_no_path(spaceship):
    """The paper's stage 10 pays a submission "when the agent generates predictions on the test data and
    writes a valid submission CSV": a constant column saved without a model is no valid trajectory."""
    nodes = run_script(spaceship, NO_MODEL)
    assert all(n.ok for n in nodes), [n.observation[:200] for n in nodes if not n.ok]
    last = nodes[-1]
    assert last.log.submission is not None and last.log.submission_check[0]   # the file itself is valid
    assert not last.log.predicted_by_model and not last.terminal


def test_a_trial_whose_file_no_model_predicted_is_not_counted_valid(monkeypatch, tmp_path):
    from mltb_core.stages.rewards import NO_MODEL_REASON
    from scripted import scripted_trial

    record, results = scripted_trial(monkeypatch, tmp_path / "run", NO_MODEL, max_iterations=len(NO_MODEL))
    assert all(r["ok"] for r in results), results
    assert record.outcome == "planner_failure" and not record.valid and record.normalized is None
    assert record.extra["submission_reason"] == NO_MODEL_REASON


def test_each_role_holds_only_what_it_names(spaceship):
    # the predicates the checks and the feedback share (one per role): each takes its own kind of object and
    # refuses the near misses a model makes (wrong rows, a target or tracking column, gaps, text, infinities)
    import numpy as np
    import pandas as pd

    from mltb_core.llm.prompts import FEEDBACK_ROLES
    from mltb_core.stages.rewards import PathLog, _Checker
    from mltb_core.toolkit.scratchpad import Scratchpad

    task, split, _data_dir, _ = spaceship
    ctx = StageContext.from_files(task, split.train_path, split.test_path)
    checker = _Checker(ctx, Scratchpad(), PathLog(), {})
    holds = checker._holds
    target, n_train, n_test = task.target, ctx.n_train, ctx.n_test
    train, test = pd.read_csv(split.train_path), pd.read_csv(split.test_path)
    assert set(_Checker._HOLDS) <= set(FEEDBACK_ROLES)   # every role has the name a feedback calls it by
    assert holds("train", train) and not holds("test", train) and not holds("train", train.drop(columns=[target]))
    assert holds("test", test) and not holds("train", test) and not holds("test", test.head(3))
    assert holds("y_train", train[target]) and not holds("y_train", train[target].rename("other"))
    assert not holds("y_train", train[target].head(3)) and not holds("y_train", train)

    def numeric(rows, **extra):
        return pd.DataFrame({"a": np.arange(rows, dtype=float), **extra})

    assert holds("X_train", numeric(n_train)) and not holds("X_train", numeric(n_test))
    for bad in (numeric(n_train, **{target: 1}), numeric(n_train, _is_train=1), numeric(n_train).iloc[:, :0],
                numeric(n_train).assign(a=np.nan), numeric(n_train).assign(a=np.inf),
                numeric(n_train).assign(a=[f"t{i}" for i in range(n_train)])):
        assert not holds("X_train", bad)
    checker.found["X_train_columns"] = ["a"]
    assert holds("X_test", numeric(n_test)) and not holds("X_test", numeric(n_test).rename(columns={"a": "b"}))
    assert not holds("X_train", numeric(n_train).rename(columns={"a": "b"}))   # once found, the same columns

    combined = numeric(n_train + n_test, _is_train=[1] * n_train + [0] * n_test)
    assert holds("combined", combined) and not holds("combined", combined.head(n_train))
    assert not holds("combined", combined.assign(a=np.nan)) and not holds("combined", combined.drop(columns="a"))
    text = [f"t{i}" for i in range(n_train + n_test)]
    assert not holds("combined", combined.assign(a=text)) and not holds("combined", combined.drop(columns="_is_train"))
    part = numeric(n_train, **{target: 1})
    assert holds("train_part", part) and not holds("train_part", part.assign(_is_train=1))
    assert not holds("train_part", part.assign(a=np.nan)) and not holds("train_part", numeric(n_train))
    test_part = numeric(n_test, **{target: np.nan})   # the test rows' target is a placeholder: gaps allowed
    assert holds("test_part", test_part) and holds("test_part", numeric(n_test))
    assert not holds("test_part", test_part.assign(b=1.0)) and not holds("test_part", test_part.assign(a=np.nan))
    with pytest.raises(ValueError, match="unknown role"):
        holds("submission", train)
