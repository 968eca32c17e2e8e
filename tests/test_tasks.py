"""Task specs: the paper's 15 challenges, spec validation errors, user tasks, the prompt template."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mltb_core.bench.fixtures import FIXTURES
from mltb_core.bench.tasks import (SUBMISSION_FILE, Task, TaskSpecError, UnknownTaskError, get_task, load_tasks,
                             parse_task)

# The competition's official metric for each of the paper's challenges.
EXPECTED_METRICS = {
    "spaceship-titanic": "accuracy", "costa-rican-household-poverty-prediction": "macro_f1",
    "forest-cover-type-kernels-only": "prior_weighted_accuracy", "new-york-city-taxi-fare-prediction": "rmse",
    "nyc-taxi-trip-duration": "rmsle", "santander-value-prediction-challenge": "rmsle",
    "playground-series-s3e1": "rmse", "playground-series-s4e1": "roc_auc", "playground-series-s4e8": "mcc",
    "playground-series-s4e9": "rmse", "playground-series-s5e5": "rmsle", "playground-series-s5e8": "roc_auc",
    "porto-seguro-safe-driver-prediction": "gini", "santander-customer-transaction-prediction": "roc_auc",
    "playground-series-s5e9": "rmse",
}
REPLICAS = {"santander-value-prediction-challenge", "porto-seguro-safe-driver-prediction",
            "santander-customer-transaction-prediction", "playground-series-s5e9"}

MINIMAL_SPEC = """\
slug = "my-task"
title = "My task"
problem_type = "binary"
target = "label"
id_column = "row"
metric = "roc_auc"
prediction = "probability"
source = "bundled"
data = "labelled.csv"
summary = "Predict the label."
[fields]
x = "a feature"
"""


@pytest.fixture(autouse=True)
def _no_user_task_dirs(monkeypatch):
    monkeypatch.delenv("MLTB_TASKS_DIR", raising=False)


def write_spec(directory: Path, text: str, name: str = "my-task.toml") -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(text))
    return path


def test_the_paper_has_fifteen_challenges_with_their_official_metrics():
    tasks = load_tasks()
    assert {slug: task.metric for slug, task in tasks.items()} == EXPECTED_METRICS
    assert {slug for slug, task in tasks.items() if task.source == "replica"} == REPLICAS
    for task in tasks.values():
        assert task.spec_path == FIXTURES / "tasks" / f"{task.slug}.toml"
        assert task.has_offline_data
        assert task.fields and task.summary.strip()
        assert task.provenance.get("source_repo") and task.provenance.get("licence")
        wants_probability = task.metric in ("roc_auc", "gini")
        assert task.prediction == ("probability" if wants_probability else "label"), task.slug
        assert task.greater_is_better == (task.metric not in ("rmse", "rmsle"))


# Where each task's rows come from, and which tasks may be placed on their Kaggle board.
EXPECTED_ORIGINS = {
    "spaceship-titanic": "competition", "costa-rican-household-poverty-prediction": "competition",
    "forest-cover-type-kernels-only": "competition", "new-york-city-taxi-fare-prediction": "competition-sample",
    "nyc-taxi-trip-duration": "competition-sample", "playground-series-s3e1": "competition-sample",
    "playground-series-s4e1": "competition-sample", "playground-series-s4e8": "original",
    "playground-series-s4e9": "original", "playground-series-s5e5": "original", "playground-series-s5e8": "original",
    **{slug: "replica" for slug in REPLICAS},
}
COMPARABLE = {"spaceship-titanic", "forest-cover-type-kernels-only", "new-york-city-taxi-fare-prediction",
              "nyc-taxi-trip-duration", "playground-series-s3e1", "playground-series-s4e1"}


def test_every_task_declares_its_data_origin_and_whether_it_gets_a_percentile():
    tasks = load_tasks()
    assert {slug: task.data_origin for slug, task in tasks.items()} == EXPECTED_ORIGINS
    assert {slug for slug, task in tasks.items() if task.percentile_comparable} == COMPARABLE
    for slug, task in tasks.items():
        assert (task.percentile_note is None) == (slug in COMPARABLE)
    assert tasks["santander-value-prediction-challenge"].percentile_note.startswith("synthetic schema replica")
    assert tasks["costa-rican-household-poverty-prediction"].percentile_note == (
        "no leaderboard bundled for this competition")
    forest = tasks["forest-cover-type-kernels-only"]
    # Comparable only because the score is reweighted to the real test set's class shares.
    assert forest.heldout_matches_board is False and sum(forest.scoring["class_weights"].values()) == 581012 - 15120
    costa = tasks["costa-rican-household-poverty-prediction"]
    assert costa.group_column == "idhogar" and str(costa.scoring_rows) == "parentesco1 == 1"
    assert costa.grader_columns == ["parentesco1"]


@pytest.mark.parametrize(("extra", "field", "message"), [
    ('data_origin = "synthetic"\n', "data_origin", "unknown value 'synthetic'"),
    ('original_builder = "nope"\n', "original_builder", "unknown value 'nope'"),
    ('heldout_matches_board = "no"\n', "heldout_matches_board", "must be true or false"),
    ('[scoring]\nrows = "import os"\n', "scoring.rows", "is not '<column> <op> <value>'"),
    ('[scoring]\nrows = "a == b + 1"\n', "scoring.rows", "is not a number, a quoted string or a boolean"),
    ('[scoring]\nweights = 1\n', "scoring", "unknown key(s) ['weights']"),
    ('[scoring]\nclass_weights = { "1" = -2 }\n', "scoring.class_weights", "positive number"),
])
def test_origin_and_scoring_errors_name_the_field(tmp_path, extra, field, message):
    text = MINIMAL_SPEC.replace("[fields]", extra + "[fields]") if not extra.startswith("[") else MINIMAL_SPEC + extra
    path = write_spec(tmp_path, text)
    with pytest.raises(TaskSpecError) as info:
        load_tasks([tmp_path])
    assert str(path) in str(info.value) and info.value.field == field and message in str(info.value)


def test_a_metric_that_needs_settings_requires_them_in_the_spec(tmp_path):
    spec = MINIMAL_SPEC.replace('"roc_auc"', '"prior_weighted_accuracy"').replace('"probability"', '"label"')
    write_spec(tmp_path, spec)
    with pytest.raises(TaskSpecError, match="needs \\[scoring\\] class_weights"):
        load_tasks([tmp_path])
    write_spec(tmp_path, spec + '[scoring]\nclass_weights = { "0" = 3, "1" = 1 }\n')
    assert load_tasks([tmp_path])["my-task"].scoring == {"class_weights": {"0": 3.0, "1": 1.0}}


def test_row_filter_compares_a_column_with_a_literal():
    import pandas as pd
    from mltb_core.bench.tasks import RowFilter

    frame = pd.DataFrame({"parentesco1": [1, 0, 1], "kind": ["a", "b", "a"]})
    assert RowFilter.parse("parentesco1 == 1").mask(frame).tolist() == [True, False, True]
    assert RowFilter.parse("kind != 'a'").mask(frame).tolist() == [False, True, False]
    with pytest.raises(ValueError, match="not in the labels file"):
        RowFilter.parse("missing == 1").mask(frame)


def test_leaderboard_files_exist_and_truncated_boards_carry_the_true_team_count():
    tasks = load_tasks()
    with_board = {slug for slug, task in tasks.items() if task.leaderboard}
    assert len(with_board) == 9
    for slug in with_board:
        for name in (tasks[slug].leaderboard, tasks[slug].leaderboard_public):
            assert (FIXTURES / "leaderboards" / name).is_file()
    porto = tasks["porto-seguro-safe-driver-prediction"]
    board_rows = len((FIXTURES / "leaderboards" / porto.leaderboard).read_text().splitlines()) - 1
    assert porto.leaderboard_teams == 5156 > board_rows


def test_prompt_follows_the_paper_template():
    task = get_task("spaceship-titanic")
    text = task.prompt(Path(SUBMISSION_FILE))
    for expected in ("Spaceship Titanic", "File and Data Field Descriptions", "CryoSleep",
                     "Submission File Format", "Benchmark Instructions", "located at train.csv",
                     "located at test.csv", "in CSV format to submission.csv", "Concatenate train and test", "True or False"):
        assert expected in text
    assert "SYNTHETIC" not in text


def test_the_submission_format_names_the_columns_the_grader_takes():
    import dataclasses

    from mltb_core.bench.grading import submission_columns

    forest = get_task("forest-cover-type-kernels-only")   # multiclass, graded on labels
    forms = {"labels": forest, "per class": dataclasses.replace(forest, prediction="probability"),
             "binary": get_task("porto-seguro-safe-driver-prediction")}
    lines = {kind: task.prompt(Path(SUBMISSION_FILE)).split("Submission File Format")[1].splitlines()[2:4]
             for kind, task in forms.items()}
    assert lines["labels"][1].startswith("- Cover_Type – predicted class label")
    assert lines["per class"][1].startswith("- one column per class of Cover_Type, named after the class")
    assert lines["binary"][1].startswith("- target – predicted probability that target is 1")
    assert submission_columns(forms["per class"], [1, 2]) == ["Id", "1", "2"]
    assert submission_columns(forest, [1, 2]) == ["Id", "Cover_Type"]


@pytest.mark.parametrize("slug", sorted(REPLICAS))
def test_replica_prompts_say_the_data_is_synthetic(slug):
    task = get_task(slug)
    assert "SYNTHETIC SCHEMA REPLICA" in task.prompt(Path("o.csv"))
    assert "replica" in task.title.lower() and "replica" in task.summary.lower()


def test_probability_prompt_asks_for_probabilities():
    text = get_task("playground-series-s5e8").prompt(Path("o.csv"))
    assert "probability that y is 1" in text


def test_unknown_slug_lists_valid_slugs():
    with pytest.raises(UnknownTaskError) as info:
        get_task("no-such-task")
    assert "no-such-task" in str(info.value) and "spaceship-titanic" in str(info.value)


def test_user_task_from_an_extra_dir_and_from_env(tmp_path, monkeypatch):
    write_spec(tmp_path, MINIMAL_SPEC)
    task = get_task("my-task", extra_dirs=[tmp_path])
    assert isinstance(task, Task) and task.data_path == tmp_path.resolve() / "labelled.csv"
    assert "my-task" not in load_tasks()
    monkeypatch.setenv("MLTB_TASKS_DIR", str(tmp_path))
    assert "my-task" in load_tasks() and len(load_tasks()) == 16


def test_yaml_specs_are_read_when_pyyaml_is_installed(tmp_path):
    pytest.importorskip("yaml")
    (tmp_path / "y.yaml").write_text("slug: y-task\ntitle: Y\nproblem_type: regression\ntarget: t\n"
                                     "id_column: id\nmetric: rmse\nprediction: label\nsource: bundled\n"
                                     "data: y.csv\nsummary: Predict t.\nfields: {a: a number}\n")
    assert load_tasks([tmp_path])["y-task"].metric == "rmse"


@pytest.mark.parametrize(("edit", "field", "message"), [
    (lambda s: s.replace('target = "label"\n', ""), "target", "missing required field"),
    (lambda s: s.replace('"roc_auc"', '"auc_pr"'), "metric", "unknown value 'auc_pr'"),
    (lambda s: s.replace('"binary"', '"ranking"'), "problem_type", "unknown value 'ranking'"),
    (lambda s: s.replace('"probability"', '"score"'), "prediction", "unknown value 'score'"),
    (lambda s: s.replace('data = "labelled.csv"', 'builder = "nope"'), "builder", "unknown value 'nope'"),
    (lambda s: s.replace('data = "labelled.csv"\n', ""), "builder", "needs a 'builder' or a 'data'"),
])
def test_spec_errors_name_the_file_and_the_field(tmp_path, edit, field, message):
    path = write_spec(tmp_path, edit(MINIMAL_SPEC))
    with pytest.raises(TaskSpecError) as info:
        load_tasks([tmp_path])
    assert str(path) in str(info.value) and f"field '{field}'" in str(info.value)
    assert message in str(info.value) and info.value.field == field


def test_bad_leaderboard_team_count_is_rejected(tmp_path):
    path = write_spec(tmp_path, MINIMAL_SPEC.replace("[fields]", "leaderboard_teams = -3\n[fields]"))
    with pytest.raises(TaskSpecError, match="leaderboard_teams"):
        parse_task(path)


def test_bad_toml_names_the_file(tmp_path):
    path = write_spec(tmp_path, MINIMAL_SPEC.replace('title = "My task"', "title = My task"))
    with pytest.raises(TaskSpecError) as info:
        load_tasks([tmp_path])
    assert str(path) in str(info.value) and "cannot parse" in str(info.value)


def test_duplicate_slug_in_one_directory_is_an_error(tmp_path):
    write_spec(tmp_path, MINIMAL_SPEC, "a.toml")
    write_spec(tmp_path, MINIMAL_SPEC, "b.toml")
    with pytest.raises(TaskSpecError, match="also used by"):
        load_tasks([tmp_path])


def test_missing_tasks_dir_is_reported(tmp_path):
    with pytest.raises(TaskSpecError, match="does not exist"):
        load_tasks([tmp_path / "missing"])


def test_a_users_own_dataset_gets_its_own_data_origin(tmp_path):
    """Issue 35: a user's dataset was described as 'the competition's synthetic data'."""
    write_spec(tmp_path, MINIMAL_SPEC)
    task = get_task("my-task", extra_dirs=[tmp_path])
    assert task.data_origin is None and task.active_data_origin == "own"
    assert task.percentile_note == "the task's own dataset, not the competition's rows: no Kaggle board was scored on them"
    write_spec(tmp_path, MINIMAL_SPEC.replace('source = "bundled"\n', 'source = "bundled"\ndata_origin = "own"\n'))
    assert get_task("my-task", extra_dirs=[tmp_path]).active_data_origin == "own"
    assert "synthetic" not in get_task("my-task", extra_dirs=[tmp_path]).percentile_note
