"""Expert reference trajectories (the golden integration test) and the shared replay runner."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from mltb_core.runner.expert import (EXPERTS_DIR, CallsFileError, expert_slugs, expert_toolset, load_calls, load_expert,
                              parse_calls, run_calls, run_expert)
from mltb_core.toolkit.registry import ToolCall
from mltb_core.bench.splits import prepare_split
from mltb_core.bench.tasks import SUBMISSION_FILE, TASKS_DIR, get_task, load_tasks

FAST_TASK = "spaceship-titanic"
OFFLINE = sorted(slug for slug, task in load_tasks().items() if task.has_offline_data)
# The expert must clearly beat the trivial baseline (0) on the normalized scale on every task.
MIN_NORMALIZED = 0.2


def _read(path: str) -> dict:
    return {"tool_name": "read_data", "tool_args": {"bindings": {}, "func_kwargs": {"filepath": path},
                                                    "output": "train_df"}}


@pytest.fixture(scope="module")
def spaceship_expert():
    return run_expert(get_task(FAST_TASK))


# ------------------------------------------------------------------------- the trajectories
def test_every_offline_task_has_an_expert():
    assert set(expert_slugs()) == set(OFFLINE)
    assert set(OFFLINE) == {path.stem for path in TASKS_DIR.glob("*.toml")}   # every bundled task runs offline


@pytest.mark.parametrize("slug", OFFLINE)
def test_expert_file_uses_only_known_tools_and_placeholder_paths(slug):
    calls = load_expert(slug)  # check_tools: an unknown tool name would raise here
    paths = [c.func_kwargs["filepath"] for c in calls if "filepath" in c.func_kwargs]
    assert paths == ["train.csv", "test.csv", "submission.csv"], "experts use placeholder file names only"
    names = [c.tool_name for c in calls]
    assert names[:3] == ["read_data", "read_data", "concatenate_train_test"]
    assert "split_combined_into_train_test" in names
    assert any(n.startswith("fit_") for n in names)
    assert names[-1] == "save_dataframe_to_csv" and "create_submission" not in names  # the paper's toolset
    assert expert_toolset(slug) == "paper"
    task = get_task(slug)
    predict = next(c for c in calls if c.tool_name == "predict_target")
    assert predict.func_kwargs.get("return_probabilities", False) == (task.prediction == "probability")


def test_spaceship_expert_succeeds_with_a_good_score(spaceship_expert):
    result = spaceship_expert
    assert result.all_ok, [(c.index, c.tool_name, c.message[:200]) for c in result.failed_calls]
    assert len(result.calls) == len(load_expert(FAST_TASK))
    assert result.submission_written and result.grade is not None
    assert result.grade.valid, result.grade.reason
    assert result.grade.score > 0.75                       # accuracy; majority class is ~0.50
    assert result.grade.normalized > MIN_NORMALIZED
    assert result.grade.percentile is not None            # spaceship has a real leaderboard
    assert result.wall_seconds > 0                          # the time itself: benchmarks/expert.py
    assert result.peak_mib >= 0 and result.memory_method == "worker VmHWM"
    # The fit reports its cross-validation score in the task's metric.
    fit = next(c for c in result.calls if c.tool_name.startswith("fit_"))
    assert "CV accuracy" in fit.message


def test_replay_result_serialises_to_json(spaceship_expert):
    document = json.loads(json.dumps(spaceship_expert.to_dict()))
    assert document["task"] == FAST_TASK and document["all_ok"] is True
    assert document["grade"]["valid"] is True
    assert [c["index"] for c in document["calls"]] == list(range(1, len(document["calls"]) + 1))


@pytest.mark.slow
@pytest.mark.parametrize("slug", OFFLINE)
def test_expert_on_every_offline_task(slug, tmp_path_factory):
    """Golden test: every call succeeds and the submission is valid and clearly beats the baseline.

    The split is built in a fresh cache so the test sees the current data builders.
    """
    task = get_task(slug)
    split = prepare_split(task, seed=0, cache_dir=tmp_path_factory.getbasetemp() / "expert-cache")
    result = run_calls(task, load_expert(slug), seed=0, split=split)
    assert result.all_ok, [(c.index, c.tool_name, c.message[:300]) for c in result.failed_calls]
    assert result.grade is not None and result.grade.valid, result.grade and result.grade.reason
    assert result.grade.normalized > MIN_NORMALIZED, result.grade


# ------------------------------------------------------------------------- the runner
def test_run_calls_records_a_failing_call_and_keeps_going(tmp_path):
    task = get_task(FAST_TASK)
    calls = [_read("train.csv"),
             {"tool_name": "fillna_with_median", "tool_args": {"bindings": {"df": "no_such_frame"},
                                                              "func_kwargs": {}}},
             {"tool_name": "get_missing_summary", "tool_args": {"bindings": {"df": "train_df"}, "func_kwargs": {}}}]
    result = run_calls(task, calls, out_dir=tmp_path)
    assert [c.ok for c in result.calls] == [True, False, True]
    assert "no_such_frame" in result.calls[1].message and result.calls[1].message.startswith("Error:")
    assert result.calls[1].tool_name == "fillna_with_median"
    assert not result.submission_written and result.grade is None
    # With an out_dir the sandbox is kept, and the agent's data dir never holds the labels.
    assert Path(result.sandbox).is_dir()
    data_files = {p.name for p in tmp_path.glob("data/*/*")}
    assert {"train.csv", "test.csv"} <= data_files and "test_labels.csv" not in data_files


def test_run_calls_grades_an_invalid_submission(tmp_path):
    """A submission written from train rows has the wrong ids: graded invalid, with a reason."""
    task = get_task(FAST_TASK)
    calls = [_read("train.csv"),
             {"tool_name": "get_features", "tool_args": {"bindings": {"df": "train_df"},
                                                        "func_kwargs": {"columns": ["Transported"]},
                                                        "output": "preds"}},
             {"tool_name": "create_submission", "tool_args": {"bindings": {"predictions": "preds",
                                                                          "test_df": "train_df"}}}]
    result = run_calls(task, calls, out_dir=tmp_path)
    assert result.all_ok and result.submission_written
    assert (tmp_path / "sandbox" / SUBMISSION_FILE).exists()
    assert result.grade is not None and not result.grade.valid and result.grade.reason


def test_temporary_sandbox_is_removed():
    result = run_calls(get_task(FAST_TASK), [_read("train.csv")])
    assert result.sandbox is None and result.all_ok


# ------------------------------------------------------------------------- reading calls
def test_parse_calls_names_the_bad_line():
    lines = [json.dumps(_read("train.csv")), "", "# a comment", '{"tool_name": "read_data", "tool_args": ']
    with pytest.raises(CallsFileError, match=r"calls\.jsonl:4: not valid JSON"):
        parse_calls(lines, "calls.jsonl")
    with pytest.raises(CallsFileError, match=r"x:1: .*tool_name"):
        parse_calls(['{"tool_args": {}}'], "x")
    with pytest.raises(CallsFileError, match=r"x:2: unknown tool 'read_dat'.*read_data"):
        parse_calls([json.dumps(_read("a.csv")), '{"tool_name": "read_dat"}'], "x", check_tools=True)
    assert [c.tool_name for c in parse_calls(lines[:3])] == ["read_data"]


def test_load_calls_reads_a_trajectory_and_relocates_absolute_paths(tmp_path):
    path = tmp_path / "trajectory.jsonl"
    steps = [{"step_number": 1, "step_type": "trial_start"},
             {"step_number": 2, "step_type": "tool_execution_initiation", "node_id": 1,
              "tools_to_execute": [{**_read("/elsewhere/run/data/train.csv"), "tool_id": "call_1"}]},
             {"step_number": 3, "step_type": "tool_execution_initiation", "node_id": 2,
              "tools_to_execute": [{"tool_name": "no_such_tool", "tool_args": {}, "tool_id": "call_2"}]},
             {"step_number": 4, "step_type": "search_summary", "best_path": [1, 2]}]
    path.write_text("".join(json.dumps(s) + "\n" for s in steps))
    calls = load_calls(path, check_tools=True)
    assert [c.tool_name for c in calls] == ["read_data", "no_such_tool"]  # replayed as recorded
    assert calls[0].func_kwargs["filepath"] == "train.csv"


def test_load_calls_missing_file(tmp_path):
    with pytest.raises(CallsFileError, match="no such file"):
        load_calls(tmp_path / "missing.jsonl")


def test_load_expert_unknown_task_lists_known_ones():
    with pytest.raises(FileNotFoundError, match="spaceship-titanic"):
        load_expert("no-such-task")


def test_experts_dir_files_are_jsonl_objects():
    """One call per line after the '# toolset: NAME' header comment (parse_calls skips '#' lines)."""
    for path in EXPERTS_DIR.glob("*.jsonl"):
        header, *lines = path.read_text().splitlines()
        assert header.startswith("# toolset: ")
        for line in lines:
            assert isinstance(ToolCall.from_dict(json.loads(line)), ToolCall)


def test_expert_submission_matches_the_test_ids(tmp_path):
    task = get_task(FAST_TASK)
    result = run_calls(task, load_expert(FAST_TASK), out_dir=tmp_path)
    submission = pd.read_csv(tmp_path / "sandbox" / SUBMISSION_FILE)
    test = pd.read_csv(prepare_split(task).test_path)
    assert list(submission.columns) == [task.id_column, task.target]
    assert submission[task.id_column].tolist() == test[task.id_column].tolist()
    assert result.grade.valid


def test_a_replay_under_a_toolset_refuses_the_tools_outside_it(tmp_path):
    task = get_task(FAST_TASK)
    helper = {"tool_name": "create_submission", "tool_args": {"bindings": {"predictions": "p", "test_df": "t"}}}
    result = run_calls(task, [_read("train.csv"), helper], toolset="paper")
    assert result.calls[0].ok and not result.calls[1].ok
    assert "not in this run's 'paper' toolset" in result.calls[1].message
    extended = run_calls(task, [_read("train.csv"), helper], toolset="extended")
    assert "toolset" not in extended.calls[1].message   # the tool runs (and fails on the missing objects)
