"""Submission validation, coercion, scoring, leaderboard placement and normalized score."""
import math
import tempfile
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mltb_core.bench import grading
from mltb_core.bench.grading import Grade, grade_submission, validate_submission
from mltb_core.bench.metrics import METRICS

RNG = np.random.default_rng(7)


def make_task(**overrides):
    spec = dict(slug="demo", problem_type="binary", target="y", id_column="id", metric="accuracy",
                prediction="label", source="bundled", data=None, data_origin="competition",
                leaderboard=None, leaderboard_public=None, leaderboard_teams=None)
    if "leaderboard" in overrides:  # one board file serves as both boards unless a test says otherwise
        spec["leaderboard_public"] = overrides["leaderboard"]
    spec.update(overrides)
    return types.SimpleNamespace(**spec)


def make_split(tmp_path, train_target, test_target, id_start=1000):
    """Write train.csv / test.csv / test_labels.csv with string ids; return a Split-like object."""
    tmp_path = Path(tempfile.mkdtemp(dir=tmp_path))  # several splits may share one test's tmp_path
    train = pd.DataFrame({"id": [f"r{i}" for i in range(len(train_target))], "x": 1.0, "y": train_target})
    labels = pd.DataFrame({"id": [f"t{id_start + i}" for i in range(len(test_target))], "y": test_target})
    paths = {name: tmp_path / f"{name}.csv" for name in ("train", "test", "test_labels")}
    train.to_csv(paths["train"], index=False)
    labels.drop(columns="y").assign(x=1.0).to_csv(paths["test"], index=False)
    labels.to_csv(paths["test_labels"], index=False)
    return types.SimpleNamespace(train_path=paths["train"], test_path=paths["test"],
                                 labels_path=paths["test_labels"], labels=labels,
                                 read_labels=lambda: pd.read_csv(paths["test_labels"]))


def submission_from(split, values, column="y"):
    return pd.DataFrame({"id": split.labels["id"], column: values})


# -- fixtures per target kind ---------------------------------------------------------------
@pytest.fixture
def bool_split(tmp_path):
    return make_split(tmp_path, RNG.random(60) < 0.6, RNG.random(30) < 0.6)


@pytest.fixture
def string_split(tmp_path):
    return make_split(tmp_path, RNG.choice(["e", "p"], 60, p=[0.3, 0.7]), RNG.choice(["e", "p"], 30))


@pytest.fixture
def cover_split(tmp_path):
    return make_split(tmp_path, RNG.integers(1, 8, 80), RNG.integers(1, 8, 40))


@pytest.fixture
def regression_split(tmp_path):
    return make_split(tmp_path, RNG.gamma(2.0, 5.0, 60), RNG.gamma(2.0, 5.0, 30))


# -- happy paths and coercions --------------------------------------------------------------
def test_perfect_prediction_scores_perfect_and_normalizes_to_one(bool_split):
    grade = grade_submission(make_task(), submission_from(bool_split, bool_split.labels["y"]), bool_split)
    assert grade.valid and grade.reason == "ok"
    assert grade.score == 1.0 and grade.normalized == 1.0
    assert grade.percentile is None and grade.medal is None and grade.above_median is None


@pytest.mark.parametrize("encode", [
    lambda v: v, lambda v: v.astype(int), lambda v: v.map({True: "True", False: "False"}),
    lambda v: v.astype(float),
])
def test_bool_targets_accept_true_false_and_one_zero(bool_split, encode, tmp_path):
    predictions = encode(bool_split.labels["y"])
    path = tmp_path / "submission.csv"
    submission_from(bool_split, predictions).to_csv(path, index=False)
    grade = grade_submission(make_task(), path, bool_split)
    assert grade.valid, grade.reason
    assert grade.score == 1.0


def test_string_labels_accept_label_encoder_codes(string_split):
    truth = string_split.labels["y"]
    codes = truth.map({"e": 0, "p": 1})  # sorted label order, as LabelEncoder
    task = make_task(metric="mcc")
    by_code = grade_submission(task, submission_from(string_split, codes), string_split)
    assert by_code.valid and by_code.score == 1.0
    flipped = grade_submission(task, submission_from(string_split, 1 - codes), string_split)
    assert flipped.valid and flipped.score == pytest.approx(-1.0)


def test_numeric_class_labels_are_exact(cover_split):
    task = make_task(problem_type="multiclass")
    truth = cover_split.labels["y"]
    assert grade_submission(task, submission_from(cover_split, truth.astype(float)), cover_split).score == 1.0
    shifted = grade_submission(task, submission_from(cover_split, truth - 1), cover_split)
    if (truth == 1).any():  # codes 0..6 are not accepted for numeric classes
        assert not shifted.valid and "not valid classes" in shifted.reason


def test_probability_task_accepts_labels_as_degenerate_probabilities(bool_split):
    task = make_task(metric="roc_auc", prediction="probability")
    grade = grade_submission(task, submission_from(bool_split, bool_split.labels["y"].astype(int)), bool_split)
    assert grade.valid and grade.score == 1.0 and grade.baseline == 0.5 and grade.normalized == 1.0


def test_submission_rows_are_aligned_by_id(regression_split):
    task = make_task(problem_type="regression", metric="rmse")
    shuffled = submission_from(regression_split, regression_split.labels["y"]).sample(frac=1, random_state=1)
    grade = grade_submission(task, shuffled, regression_split)
    assert grade.valid and grade.score == pytest.approx(0.0) and grade.normalized == pytest.approx(1.0)


def test_unnamed_index_column_is_ignored(regression_split, tmp_path):
    path = tmp_path / "submission.csv"
    submission_from(regression_split, regression_split.labels["y"]).to_csv(path)  # index written
    assert pd.read_csv(path).columns[0].startswith("Unnamed")
    assert grade_submission(make_task(problem_type="regression", metric="rmse"), path, regression_split).valid


# -- the paper's finish: the predictions alone, ids by test.csv's row order ----------------------
def _saved(tmp_path, obj, **to_csv):
    path = Path(tempfile.mkdtemp(dir=tmp_path)) / "submission.csv"
    obj.to_csv(path, **{"index": False, **to_csv})
    return path


@pytest.mark.parametrize("name", ["y", "model", None, "Age"])
def test_predictions_alone_are_graded_in_test_csv_row_order(bool_split, tmp_path, name):
    """As the paper's agents save them (appendix I): one column, any name, no ids, one row per test row."""
    truth = bool_split.labels["y"]
    grade = grade_submission(make_task(), _saved(tmp_path, pd.Series(truth.to_numpy(), name=name)), bool_split)
    assert grade.valid and grade.score == 1.0, grade.reason
    # row order is the rule: the same values reversed score as their rows say, not 1.0
    reversed_grade = grade_submission(make_task(), pd.DataFrame({"p": truth.to_numpy()[::-1]}), bool_split)
    expected = float((truth.to_numpy()[::-1] == truth.to_numpy()).mean())
    assert reversed_grade.valid and reversed_grade.score == pytest.approx(expected)


def test_a_series_saved_with_its_index_is_the_same_one_column(bool_split, tmp_path):
    truth = bool_split.labels["y"]
    path = _saved(tmp_path, pd.Series(truth.to_numpy(), name="y"), index=True)
    assert list(pd.read_csv(path).columns) == ["Unnamed: 0", "y"]
    assert grade_submission(make_task(), path, bool_split).score == 1.0


def test_the_save_tool_writes_a_series_as_one_column_the_grader_accepts(bool_split, tmp_path):
    from mltb_core.toolkit.registry import ToolContext
    from mltb_core.toolkit.tools.evaluation import save_dataframe_to_csv

    truth = bool_split.labels["y"]
    save_dataframe_to_csv(pd.Series(truth.to_numpy(), index=range(5, 5 + len(truth)), name="y"), "submission.csv",
                          ctx=ToolContext(sandbox=tmp_path))
    assert list(pd.read_csv(tmp_path / "submission.csv").columns) == ["y"]
    assert grade_submission(make_task(), tmp_path / "submission.csv", bool_split).score == 1.0


def test_a_feature_column_of_test_length_is_graded_honestly(regression_split, tmp_path):
    """The paper would accept it too: it is scored, and scores badly."""
    task = make_task(problem_type="regression", metric="rmse")
    grade = grade_submission(task, pd.DataFrame({"x": np.ones(len(regression_split.labels))}), regression_split)
    assert grade.valid and grade.normalized < 0.1


@pytest.mark.parametrize("make, fragment", [
    (lambda truth: pd.DataFrame({"y": truth.to_numpy()[:-3]}),
     "read as predictions in test.csv's row order and needs one row per test.csv row: it has 27 rows, test.csv has 30"),
    (lambda truth: pd.DataFrame({"y": list(truth.to_numpy()) * 2}), "it has 60 rows, test.csv has 30"),
    (lambda truth: pd.DataFrame({"y": [None if i == 2 else v for i, v in enumerate(truth)]}),
     "1 missing prediction(s) in 'y' for id 't1002'"),
    (lambda truth: pd.DataFrame({"a": truth.to_numpy(), "b": 1}),
     "the submission has 2 columns 'a', 'b' and no 'id' column: save either the predictions alone"),
    (lambda truth: pd.DataFrame({"id": [f"t{1000 + i}" for i in range(len(truth))]}), "missing column(s) ['y']"),
    (lambda truth: pd.DataFrame({"id": [f"t{1000 + i}" for i in range(len(truth))], "model": truth.to_numpy()}),
     "unexpected column(s) ['model']"),
])
def test_predictions_alone_stay_invalid_when_wrong(bool_split, make, fragment):
    grade = grade_submission(make_task(), make(bool_split.labels["y"]), bool_split)
    assert not grade.valid and fragment in grade.reason, grade.reason


def test_multiclass_probabilities_alone_are_the_class_columns(cover_split):
    task = make_task(problem_type="multiclass", metric="log_loss", prediction="probability")
    onehot = pd.get_dummies(cover_split.labels["y"]).reindex(columns=range(1, 8), fill_value=0).astype(float)
    grade = grade_submission(task, onehot.rename(columns=str), cover_split)
    assert grade.valid and grade.normalized == pytest.approx(1.0), grade.reason
    grade = grade_submission(task, onehot.rename(columns=str).iloc[:, :3], cover_split)
    assert not grade.valid and "the predictions alone (the columns ['1', '2'" in grade.reason


def test_the_stage_ten_check_and_the_grader_share_the_rule(bool_split, tmp_path):
    """Whatever the grader accepts, stage 10 accepts, and the other way round, with the same reason."""
    from mltb_core.stages.rewards import StageContext, check_submission

    task = make_task()
    ctx = StageContext.from_files(task, bool_split.train_path, bool_split.test_path)
    truth = bool_split.labels["y"]
    ids = bool_split.labels["id"]
    cases = [pd.Series(truth.to_numpy(), name="y"), pd.DataFrame({"id": ids, "y": truth}),
             pd.DataFrame({"y": truth.to_numpy()[:-1]}), pd.DataFrame({"a": truth, "b": 1}),
             pd.DataFrame({"id": ids}), pd.DataFrame({"y": ["maybe"] * len(truth)})]
    for i, case in enumerate(cases):
        path = _saved(tmp_path, case)
        grade = grade_submission(task, path, bool_split)
        ok, reason = check_submission(ctx, path.read_bytes())
        assert ok == grade.valid and (ok or reason == grade.reason), (i, reason, grade.reason)
    for content in (b"", b"y\nTrue,1,2\nFalse\n"):   # unreadable bytes: the same reason too
        path = tmp_path / "bad.csv"
        path.write_bytes(content)
        ok, reason = check_submission(ctx, content)
        assert not ok and not grade_submission(task, path, bool_split).valid


def test_held_out_labels_are_in_test_csv_row_order():
    """The row-order rule rests on this: the split writes test.csv and the labels from one frame."""
    from mltb_core.bench.splits import prepare_split
    from mltb_core.bench.tasks import get_task

    task = get_task("spaceship-titanic")
    split = prepare_split(task, seed=0)
    test_ids = pd.read_csv(split.test_path, usecols=[task.id_column])[task.id_column]
    assert split.read_labels()[task.id_column].tolist() == test_ids.tolist()


def test_numeric_ids_match_across_types(tmp_path):
    labels = pd.DataFrame({"id": [1, 2, 3], "y": [1.0, 2.0, 3.0]})
    task = make_task(problem_type="regression", metric="rmse")
    for ids in ([1.0, 2.0, 3.0], ["1", "2", "3"]):
        ok, reason, aligned = validate_submission(task, pd.DataFrame({"id": ids, "y": [1, 2, 3]}), labels)
        assert ok, reason
        assert aligned.tolist() == [1.0, 2.0, 3.0]


def test_integer_ids_past_2_to_the_53_stay_distinct():
    """Integer ids are compared exactly: through float64, 2**53 + 1 matched 2**53 and two ids collided."""
    labels = pd.DataFrame({"id": [2**53, 2**53 + 1], "y": [1.0, 2.0]})
    task = make_task(problem_type="regression", metric="rmse")
    ok, reason, aligned = validate_submission(task, pd.DataFrame({"id": [2**53 + 1, 2**53], "y": [2, 1]}), labels)
    assert ok, reason
    assert aligned.tolist() == [1.0, 2.0]
    ok, reason, _ = validate_submission(task, pd.DataFrame({"id": [2**53, 2**53 + 2], "y": [1, 2]}), labels)
    assert not ok and "9007199254740993" in reason and "9007199254740994" in reason
    # ids written as floats lost those digits: both sides then compare through float, as before
    odd = pd.DataFrame({"id": [2**53 + 1, 2**53 + 3], "y": [1.0, 2.0]})
    as_floats = pd.DataFrame({"id": odd["id"].astype(float), "y": [1, 2]})
    for sub, lab in ((as_floats, odd), (odd, as_floats.assign(y=[1.0, 2.0]))):
        ok, reason, _ = validate_submission(task, sub, lab)
        assert ok, reason
    # uint64 ids past int64's range match themselves (through int64 they overflowed into "duplicates")
    big = pd.DataFrame({"id": np.array([2**64 - 1, 2**64 - 2], dtype="uint64"), "y": [1.0, 2.0]})
    ok, reason, _ = validate_submission(task, big.iloc[::-1], big)
    assert ok, reason


def test_rmsle_refuses_negative_predictions_as_kaggle_does(regression_split):
    # issue 18: -0.5 used to be clipped to 0 and scored; Kaggle's scorer and scikit-learn refuse it
    task = make_task(problem_type="regression", metric="rmsle")
    values = regression_split.labels["y"].abs().astype(float).copy()
    values.iloc[2] = -0.5
    grade = grade_submission(task, submission_from(regression_split, values), regression_split)
    assert not grade.valid and "negative" in grade.reason and "RMSLE needs predictions >= 0" in grade.reason
    assert "-0.5" in grade.reason
    assert grade_submission(task, submission_from(regression_split, 0.0), regression_split).valid
    # the same rule for RMSE would be wrong: negatives are fine there
    assert grade_submission(make_task(problem_type="regression", metric="rmse"),
                            submission_from(regression_split, -1.0), regression_split).valid


def test_multiclass_probability_columns_per_class(cover_split):
    task = make_task(problem_type="multiclass", metric="log_loss", prediction="probability")
    truth = cover_split.labels["y"]
    onehot = pd.get_dummies(truth).reindex(columns=range(1, 8), fill_value=0).astype(float)
    submission = pd.concat([cover_split.labels[["id"]], onehot.rename(columns=str)], axis=1)
    grade = grade_submission(task, submission, cover_split)
    assert grade.valid, grade.reason
    assert grade.score == pytest.approx(0.0, abs=1e-10) and grade.normalized == pytest.approx(1.0)


def test_per_class_columns_are_the_train_classes_the_agent_knows(tmp_path):
    """A class only in the held-out labels has no column the agent could know of (stage 10 asks for the train
    classes): the train classes' columns are valid, the missing class counts as probability 0."""
    split = make_split(tmp_path, RNG.integers(1, 4, 60), np.r_[RNG.integers(1, 4, 29), 4])
    task = make_task(problem_type="multiclass", metric="log_loss", prediction="probability")
    uniform = pd.DataFrame({str(c): np.full(30, 1 / 3) for c in (1, 2, 3)})
    grade = grade_submission(task, pd.concat([split.labels[["id"]], uniform], axis=1), split)
    assert grade.valid, grade.reason
    assert grade.score > -np.log(1 / 3)          # the class-4 row scored at probability 0 (clipped)
    with_four = pd.concat([split.labels[["id"]], uniform.assign(**{"4": 0.0})], axis=1)
    refused = grade_submission(task, with_four, split)
    assert not refused.valid and "4" in refused.reason


# -- normalized score ---------------------------------------------------------------------
def _train_target(split):
    return pd.read_csv(split.train_path)["y"]


@pytest.mark.parametrize("metric", ["rmse", "rmsle", "mae", "r2"])
def test_regression_baseline_normalizes_to_zero(regression_split, metric):
    train = _train_target(regression_split)
    constant = math.expm1(np.log1p(train).mean()) if metric == "rmsle" else train.mean()
    task = make_task(problem_type="regression", metric=metric)
    grade = grade_submission(task, submission_from(regression_split, constant), regression_split)
    assert grade.valid and grade.normalized == pytest.approx(0.0, abs=1e-9)
    assert grade.score == pytest.approx(grade.baseline)


@pytest.mark.parametrize("metric", ["accuracy", "macro_f1", "mcc"])
def test_majority_class_baseline_normalizes_to_zero(string_split, metric):
    majority = _train_target(string_split).mode()[0]
    task = make_task(metric=metric)
    grade = grade_submission(task, submission_from(string_split, majority), string_split)
    assert grade.valid and grade.normalized == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("metric", ["roc_auc", "gini"])
def test_prior_probability_baseline_normalizes_to_zero(bool_split, metric):
    prior = _train_target(bool_split).mean()
    task = make_task(metric=metric, prediction="probability")
    grade = grade_submission(task, submission_from(bool_split, prior), bool_split)
    assert grade.valid and grade.normalized == pytest.approx(0.0, abs=1e-12)
    if metric == "roc_auc":
        assert grade.baseline == pytest.approx(0.5)
    else:   # the reference kernel breaks ties in row order: a constant's Gini is the rows' own order's, not 0
        truth = bool_split.labels["y"].to_numpy().astype(float)
        assert grade.baseline == pytest.approx(METRICS["gini"](truth, np.full(truth.size, prior)))


def test_normalized_is_none_when_baseline_is_perfect(tmp_path):
    split = make_split(tmp_path, ["a"] * 10, ["a"] * 5)
    grade = grade_submission(make_task(), submission_from(split, "a"), split)
    assert grade.valid and grade.score == 1.0 and grade.normalized is None


def test_partial_score_normalizes_between(bool_split):
    truth = bool_split.labels["y"].to_numpy().copy()
    truth[:5] = ~truth[:5]
    grade = grade_submission(make_task(), submission_from(bool_split, truth), bool_split)
    expected = (grade.score - grade.baseline) / (1 - grade.baseline)
    assert grade.normalized == pytest.approx(expected) and grade.normalized < 1


# -- invalid submissions: each has a clear reason -------------------------------------------
@pytest.mark.parametrize("mutate, fragment", [
    (lambda s: s.drop(columns="y"), "missing column(s) ['y']"),
    (lambda s: s.assign(extra=1), "unexpected column(s) ['extra']"),
    (lambda s: s.rename(columns={"y": "Y"}), "missing column(s) ['y']"),
    (lambda s: s.iloc[:-2], "missing id value(s): 't1028', 't1029'"),
    (lambda s: pd.concat([s, s.iloc[:1]]), "duplicate id value(s): 't1000'"),
    (lambda s: s.assign(id=s["id"].where(s.index != 3, "zzz")), "unexpected id value(s) not in the test set: 'zzz'"),
    (lambda s: s.assign(y=s["y"].where(s.index != 4, None)), "1 missing prediction(s) in 'y' for id 't1004'"),
    (lambda s: s.assign(y="maybe"), "are not valid classes"),
    (lambda s: s.assign(y=5), "are not valid classes"),
    (lambda s: s.assign(y=[0, "e"] * 15), "mixes class labels"),
    (lambda s: s.iloc[:0], "no rows"),
])
def test_invalid_label_submissions(string_split, mutate, fragment):
    submission = mutate(submission_from(string_split, string_split.labels["y"]))
    grade = grade_submission(make_task(), submission, string_split)
    assert not grade.valid and grade.score is None
    assert fragment in grade.reason, grade.reason


@pytest.mark.parametrize("value, fragment", [
    ("yes", "are not booleans"), (2, "are not booleans"),
])
def test_invalid_bool_labels(bool_split, value, fragment):
    grade = grade_submission(make_task(), submission_from(bool_split, value), bool_split)
    assert not grade.valid and fragment in grade.reason


@pytest.mark.parametrize("value, fragment", [
    (1.5, "outside [0, 1]"), (-0.1, "outside [0, 1]"), ("high", "not finite numbers"),
])
def test_invalid_probabilities(bool_split, value, fragment):
    task = make_task(metric="roc_auc", prediction="probability")
    grade = grade_submission(task, submission_from(bool_split, value), bool_split)
    assert not grade.valid and fragment in grade.reason, grade.reason


@pytest.mark.parametrize("value", ["12 dollars", math.inf, 2.5])
def test_regression_needs_finite_numbers_and_classes_exact(regression_split, cover_split, value):
    if value == 2.5:  # a fractional class for a numeric-class task
        grade = grade_submission(make_task(problem_type="multiclass"), submission_from(cover_split, value), cover_split)
        assert not grade.valid and "not valid classes" in grade.reason
        return
    task = make_task(problem_type="regression", metric="rmse")
    grade = grade_submission(task, submission_from(regression_split, value), regression_split)
    assert not grade.valid and "not finite numbers" in grade.reason


@pytest.mark.parametrize("content, fragment", [
    (b"", "empty"),
    (b"id,y\nt1,1,2,3\nt2,1\n", "not a readable CSV"),
    (b"\xff\xfe\x00\x81\x9f garbage", "not a readable CSV"),
    (b"id,y\n", "no rows"),
])
def test_unreadable_submission_files_never_raise(bool_split, tmp_path, content, fragment):
    path = tmp_path / "submission.csv"
    path.write_bytes(content)
    grade = grade_submission(make_task(), path, bool_split)
    assert not grade.valid and fragment in grade.reason, grade.reason


def test_missing_submission_file(bool_split, tmp_path):
    grade = grade_submission(make_task(), tmp_path / "nope.csv", bool_split)
    assert not grade.valid and "not found" in grade.reason


# -- leaderboard placement ------------------------------------------------------------------
@pytest.fixture
def board_dir(tmp_path, monkeypatch):
    directory = tmp_path / "boards"
    directory.mkdir()
    (directory / "demo.csv").write_text("rank,score\n" + "".join(f"{i},{s}\n" for i, s in
                                                               enumerate([0.05, 0.1, 0.2, 0.3], 1)))
    monkeypatch.setattr(grading, "LEADERBOARDS_DIR", directory)
    return directory


def test_leaderboard_placement_for_bundled_task(board_dir, regression_split):
    task = make_task(problem_type="regression", metric="rmse", leaderboard="demo.csv")
    grade = grade_submission(task, submission_from(regression_split, regression_split.labels["y"]), regression_split)
    # Perfect RMSE 0 beats every team of a lower-is-better board.
    assert grade.percentile == 100.0 and grade.medal == "gold" and grade.above_median is True


def test_replica_never_gets_a_percentile(board_dir, regression_split):
    task = make_task(problem_type="regression", metric="rmse", leaderboard="demo.csv", source="replica")
    grade = grade_submission(task, submission_from(regression_split, regression_split.labels["y"]), regression_split)
    assert grade.valid and grade.percentile is None and grade.medal is None and grade.above_median is None


def test_truncated_board_uses_true_team_count(board_dir, regression_split):
    task = make_task(problem_type="regression", metric="rmse", leaderboard="demo.csv", leaderboard_teams=8)
    worst = submission_from(regression_split, regression_split.labels["y"] + 0.3)  # RMSE exactly 0.3
    grade = grade_submission(task, worst, regression_split)
    assert grade.score == pytest.approx(0.3)
    assert grade.percentile == pytest.approx((0.5 + 4) / 8 * 100)    # ties the worst listed: half of it


def test_board_choice_reads_that_boards_percentile(board_dir, regression_split):
    # Public board: RMSE 0.3 ties the worst of four teams (half of one); private board: it beats three of four.
    (board_dir / "demo.public.csv").write_text("rank,score\n1,0.05\n2,0.1\n3,0.2\n4,0.3\n")
    (board_dir / "demo.private.csv").write_text("rank,score\n1,0.05\n2,0.31\n3,0.4\n4,0.5\n")
    task = make_task(problem_type="regression", metric="rmse", leaderboard="demo.private.csv",
                     leaderboard_public="demo.public.csv")
    worst = submission_from(regression_split, regression_split.labels["y"] + 0.3)
    public = grade_submission(task, worst, regression_split)  # the default board, as in the paper
    private = grade_submission(task, worst, regression_split, board="private")
    assert public.board == "public" and public.percentile == pytest.approx(12.5)
    assert private.board == "private" and private.percentile == pytest.approx(75.0)
    with pytest.raises(ValueError, match="public, private"):
        grade_submission(task, worst, regression_split, board="final")


@pytest.mark.parametrize("origin, note", [
    ("original", "original dataset; the board was scored on the competition's synthetic data"),
    ("replica", "synthetic schema replica generated by mltb, not the competition's rows"),
    (None, "the task spec declares no data_origin, so its rows cannot be matched to the board")])
def test_rows_unlike_the_boards_get_no_percentile_but_a_reason(board_dir, regression_split, origin, note):
    task = make_task(problem_type="regression", metric="rmse", leaderboard="demo.csv", data_origin=origin)
    grade = grade_submission(task, submission_from(regression_split, regression_split.labels["y"]), regression_split)
    assert grade.valid and grade.normalized == 1.0 and grade.percentile is None and grade.medal is None
    assert grade.percentile_note == note


def test_heldout_rows_unlike_the_board_need_class_weights(board_dir, cover_split):
    task = make_task(problem_type="multiclass", leaderboard="demo.csv", heldout_matches_board=False,
                     heldout_note="balanced sample")
    grade = grade_submission(task, submission_from(cover_split, cover_split.labels["y"]), cover_split)
    assert grade.percentile is None and grade.percentile_note == "balanced sample"


def test_prior_weighted_accuracy_weights_each_class_recall_by_its_test_share(cover_split):
    weights = {"1": 209680, "2": 281141, "3": 33594, "4": 587, "5": 7333, "6": 15207, "7": 18350}
    task = make_task(problem_type="multiclass", metric="prior_weighted_accuracy",
                     scoring={"class_weights": weights})
    truth = cover_split.labels["y"].to_numpy()
    rng = np.random.default_rng(3)
    predicted = np.where(rng.random(len(truth)) < 0.6, truth, rng.integers(1, 8, len(truth)))
    grade = grade_submission(task, submission_from(cover_split, predicted), cover_split)
    # By hand: recall of each class present in the held-out rows, weighted by its share among them.
    present = sorted(set(truth.tolist()))
    total = sum(weights[str(c)] for c in present)
    expected = sum(weights[str(c)] / total * np.mean(predicted[truth == c] == c) for c in present)
    assert grade.valid and grade.metric == "prior_weighted_accuracy"
    assert grade.score == pytest.approx(expected)
    assert grade.score != pytest.approx(np.mean(predicted == truth))
    # Normalized 0 is the constant the weighted test distribution favours most: class 2.
    baseline = grade_submission(task, submission_from(cover_split, [2] * len(truth)), cover_split)
    assert baseline.normalized == pytest.approx(0.0, abs=1e-12)


def test_grade_to_dict_round_trip(bool_split):
    grade = grade_submission(make_task(), submission_from(bool_split, bool_split.labels["y"]), bool_split)
    data = grade.to_dict()
    assert data["valid"] is True and data["score"] == 1.0 and data["metric"] == "accuracy"
    assert Grade(**data) == grade


# -- end to end on the project's real tasks (skipped while tasks/splits are unavailable) -----
REAL_TASKS = ["spaceship-titanic", "forest-cover-type-kernels-only", "playground-series-s4e8",
              "nyc-taxi-trip-duration", "playground-series-s4e1", "playground-series-s3e1",
              "costa-rican-household-poverty-prediction"]


@pytest.mark.parametrize("slug", REAL_TASKS)
def test_real_task_perfect_and_baseline_submissions(slug):
    try:
        from mltb_core.bench.splits import prepare_split
        from mltb_core.bench.tasks import get_task
        task = get_task(slug)
        split = prepare_split(task, seed=0)
    except Exception as exc:  # noqa: BLE001  another module's data may be missing on this machine
        pytest.skip(f"real task {slug} unavailable: {exc}")
    labels = pd.read_csv(split.labels_path)[[task.id_column, task.target]]  # without the grader's columns
    perfect = grade_submission(task, labels, split)
    assert perfect.valid, perfect.reason
    assert perfect.normalized == pytest.approx(1.0)
    if task.percentile_comparable:
        # a perfect score ties the board's leaked perfect entries, which count half (mid-rank)
        assert perfect.percentile > 99.5 and perfect.medal == "gold"
    else:
        from mltb_core.bench.tasks import percentile_note
        assert perfect.percentile is None and perfect.percentile_note == percentile_note(task, board="public")
    train_target = pd.read_csv(split.train_path)[task.target]
    classes = sorted(set(train_target) | set(labels[task.target])) if task.problem_type != "regression" else None
    constant = grading.baseline_prediction(task, train_target, len(labels), classes)
    baseline = grade_submission(task, labels.assign(**{task.target: constant}), split)
    assert baseline.valid, baseline.reason
    assert baseline.normalized == pytest.approx(0.0, abs=1e-9)
    if slug in ("playground-series-s3e1", "playground-series-s4e1"):  # real competition rows: on the board
        assert split.meta["data_source"] == "bundled" and split.meta["sampled_rows"] == 10_000
        assert split.meta["labelled_rows"] == 30_000 and perfect.percentile > 99.5
    if slug == "playground-series-s4e8":  # 'e'/'p' labels given as LabelEncoder codes
        codes = labels[task.target].map({c: i for i, c in enumerate(classes)})
        assert grade_submission(task, labels.assign(**{task.target: codes}), split).score == 1.0


def test_costa_rica_scores_heads_of_household_only():
    """Right on every head of household and wrong on everyone else: macro F1 1.0, as Kaggle scores it."""
    from mltb_core.bench.splits import prepare_split
    from mltb_core.bench.tasks import get_task

    task = get_task("costa-rican-household-poverty-prediction")
    split = prepare_split(task, seed=0)
    labels = pd.read_csv(split.labels_path)
    assert list(labels.columns) == ["Id", "Target", "parentesco1"]
    heads = labels["parentesco1"] == 1
    assert 0 < heads.sum() < len(labels)
    wrong = labels["Target"] % 4 + 1  # another class for every row
    submission = pd.DataFrame({"Id": labels["Id"], "Target": labels["Target"].where(heads, wrong)})
    grade = grade_submission(task, submission, split)
    assert grade.valid and grade.score == 1.0 and grade.scored_rows == int(heads.sum())
    everyone_wrong_but_members = pd.DataFrame({"Id": labels["Id"], "Target": labels["Target"].where(~heads, wrong)})
    assert grade_submission(task, everyone_wrong_but_members, split).score == 0.0


# -- held-out-row bootstrap (mltb_core.bench.grading.row_bootstrap) ------------------------------------
def test_grade_carries_seeded_row_resamples_paired_across_submissions(board_dir, regression_split):
    task = make_task(problem_type="regression", metric="rmse", leaderboard="demo.csv")
    noisy = submission_from(regression_split, regression_split.labels["y"] + RNG.normal(0, 0.2, 30))
    first, again = (grade_submission(task, noisy, regression_split) for _ in range(2))
    assert first.row_seed == 0 and len(first.score_samples) == len(first.percentile_samples) == 200
    assert first.score_samples == again.score_samples          # same split → same row resamples
    assert len(set(first.score_samples)) > 50                  # the rows' noise is really there
    assert min(first.score_samples) < first.score < max(first.score_samples)
    board = grading.task_leaderboard(task)
    assert first.percentile_samples[:5] == [round(board.percentile(s), 2) for s in first.score_samples[:5]]
    assert first.row_bootstrap_fields() == {"score_samples": first.score_samples,
                                            "percentile_samples": first.percentile_samples,
                                            "normalized_samples": first.normalized_samples, "row_seed": 0}
    # each replicate normalized on its own rows: the perfect prediction stays at 1 on every resample
    assert len(first.normalized_samples) == 200
    assert not grade_submission(task, noisy.iloc[:3], regression_split).row_bootstrap_fields()["score_samples"]


def test_percentile_text_carries_the_held_out_row_interval():
    samples = [float(v) for v in range(0, 100)] * 2        # 200 resamples spread over 0..99
    grade = grading.Grade(valid=True, reason="ok", score=0.8, percentile=50.0, percentile_samples=samples)
    low, high = grade.percentile_interval()
    assert low < 5 and high > 95
    assert grade.percentile_text(1) == f"50.0 [{low:.1f}, {high:.1f}]"
    few = grading.Grade(valid=True, reason="ok", score=0.8, percentile=50.0, percentile_samples=samples[:5])
    assert few.percentile_interval() is None and few.percentile_text(1) == "50.0"
    none = grading.Grade(valid=True, reason="ok", score=0.8, percentile_note="original dataset")
    assert none.percentile_text() == "none: original dataset"


# -- hostile submissions (issue 20): invalid with a reason, never an exception ----------------------------
BIG = "9" * 400


def _csv(tmp_path, text: str, name="submission.csv"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("kind", ["regression", "cover", "bool"])
def test_400_digit_integers_are_invalid_not_an_overflow(tmp_path, regression_split, cover_split, bool_split, kind):
    split, task = {"regression": (regression_split, make_task(problem_type="regression", metric="rmse")),
                   "cover": (cover_split, make_task(problem_type="multiclass")),
                   "bool": (bool_split, make_task())}[kind]
    ids = split.labels["id"].tolist()
    in_target = _csv(tmp_path, "id,y\n" + "".join(f"{i},{BIG}\n" for i in ids), "target.csv")
    in_ids = _csv(tmp_path, "id,y\n" + "".join(f"{BIG}{n},1\n" for n in range(len(ids))), "ids.csv")
    for path in (in_target, in_ids):
        grade = grade_submission(task, path, split)          # no OverflowError
        assert not grade.valid and grade.reason
        frame = pd.read_csv(path, dtype=object)
        ok, reason, _ = validate_submission(task, frame, split.labels)
        assert not ok and reason


def test_huge_finite_predictions_are_invalid_when_the_metric_overflows(regression_split):
    task = make_task(problem_type="regression", metric="rmse")
    grade = grade_submission(task, submission_from(regression_split, 1e308), regression_split)
    assert not grade.valid and "not finite" in grade.reason


def test_a_directory_at_the_submission_path_is_invalid(tmp_path, regression_split):
    (tmp_path / "submission.csv").mkdir()
    grade = grade_submission(make_task(problem_type="regression", metric="rmse"), tmp_path / "submission.csv",
                             regression_split)
    assert not grade.valid and "is a directory" in grade.reason


def test_lone_surrogates_give_an_encodable_reason(tmp_path, bool_split):
    task = make_task()
    hostile = pd.Series(["maybe\ud800"] * len(bool_split.labels), dtype=object)   # object: arrow refuses them
    frame = pd.DataFrame(np.column_stack([bool_split.labels["id"].astype(object), hostile]),
                         columns=pd.Index(["id", "y\udcff"], dtype=object), dtype=object)
    ok, reason, _ = validate_submission(task, frame, bool_split.labels)
    assert not ok and "\\udcff" in reason
    reason.encode("utf-8")                                   # no UnicodeEncodeError downstream
    bad_values = pd.DataFrame({"id": bool_split.labels["id"].astype(object), "y": hostile}, dtype=object)
    ok, reason, _ = validate_submission(task, bad_values, bool_split.labels)
    assert not ok and "\\ud800" in reason
    reason.encode("utf-8")
    raw = tmp_path / "raw.csv"
    raw.write_bytes(b"id,y\n" + b"".join(f"{i},".encode() + b"\xed\xa0\x80\n" for i in bool_split.labels["id"]))
    grade = grade_submission(task, raw, bool_split)          # not UTF-8: a readable reason
    assert not grade.valid
    grade.reason.encode("utf-8")


def test_reasons_are_capped():
    from mltb_core.bench.grading import MAX_REASON_CHARS, safe_text

    assert len(safe_text("x" * 10 * MAX_REASON_CHARS)) == MAX_REASON_CHARS
