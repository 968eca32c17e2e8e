"""The confined solve-and-grade step that trials and replays share (runner/solve.py, issue 19): the same
calls graded the same way by both routes, a worker failure the model's in both, the worker ended
whatever the solver raises, and the bytes the solver answered are the ones graded and left in the sandbox.
Everything runs in a real confined tool worker and through the real grader."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mltb_core.bench.splits import prepare_split
from mltb_core.bench.tasks import get_task, percentile_note
from mltb_core.runner.confine import landlock_abi
from mltb_core.runner.expert import ReplayError, run_calls
from mltb_core.runner.solve import WorkerSettings, prepare_agent_data, solve_and_grade
from mltb_core.toolkit.registry import ToolCall

sys.path.insert(0, str(Path(__file__).parent))
from scripted import call, scripted_trial, spaceship_pipeline  # noqa: E402

pytestmark = pytest.mark.skipif(not landlock_abi()[0], reason=f"no Landlock here: {landlock_abi()[1]}")
TASK = "spaceship-titanic"


def test_a_trial_and_a_replay_of_the_same_calls_are_graded_alike(monkeypatch, tmp_path):
    script = spaceship_pipeline()
    record, _ = scripted_trial(monkeypatch, tmp_path / "trial", script)
    task = get_task(TASK)
    # the replay runs under the trial's split (run seed 0), worker seed, toolset and board
    replay = run_calls(task, script, seed=record.seed, split=prepare_split(task, seed=0),
                       out_dir=tmp_path / "replay", toolset=record.toolset, board=record.board)
    assert record.outcome == "valid" and replay.all_ok and replay.grade.valid, (record.error, record.feedback)
    grade = replay.grade
    assert (record.score, record.percentile, record.medal, record.normalized, record.percentile_note) == \
        (grade.score, grade.percentile, grade.medal, grade.normalized, grade.percentile_note)
    assert record.score_samples == grade.score_samples and record.row_seed == grade.row_seed
    assert record.extra["confinement"] == replay.extra["confinement"]
    # the same bytes were graded, and each sandbox holds the bytes it was graded on
    ident = Path(record.trajectory).stem
    graded = (tmp_path / "trial" / "submissions" / f"{ident}.csv").read_bytes()
    assert graded == (tmp_path / "replay" / "submission.graded.csv").read_bytes()
    assert graded == (tmp_path / "trial" / "sandboxes" / ident / "submission.csv").read_bytes()
    assert graded == (tmp_path / "replay" / "sandbox" / "submission.csv").read_bytes()


def test_a_worker_failure_is_the_models_in_both_routes_and_the_trial_keeps_what_it_spent(
        monkeypatch, tmp_path, hostile_tools):
    script = [call("crash_worker", output="x")]
    record, _ = scripted_trial(monkeypatch, tmp_path / "trial", script)
    assert record.outcome == "planner_failure" and record.error.startswith("the tool worker failed: ")
    why = record.error.removeprefix("the tool worker failed: ")
    # the scripted model's one reply (10 prompt and 5 completion tokens) was spent before the worker died
    assert (record.llm_calls, record.tokens_in, record.tokens_out) == (1, 10, 5)
    task = get_task(TASK)
    assert record.percentile_note == percentile_note(task, board=record.board)   # like every failed trial
    with pytest.raises(ReplayError, match="tool worker failed") as failed:
        run_calls(task, script, seed=record.seed, split=prepare_split(task, seed=0), toolset=record.toolset)
    assert why in str(failed.value)


def _place(tmp_path):
    task = get_task(TASK)
    split = prepare_split(task, seed=0)
    return task, split, prepare_agent_data(split, tmp_path), tmp_path / "sandbox", tmp_path / "graded.csv"


SETTINGS = WorkerSettings(toolset="paper", threads=1, seed=0, tool_time_limit=30.0)


def test_whatever_the_solver_raises_propagates_with_the_worker_ended(tmp_path):
    task, split, data_dir, sandbox, graded = _place(tmp_path)
    seen = []

    def solver(workspace):
        seen.append(workspace)
        workspace.step(0, 1, ToolCall("read_data", {}, {"filepath": "train.csv"}, "train"), None)
        raise ConnectionError("the LLM server went away")   # what the caller records as an infra error

    with pytest.raises(ConnectionError, match="went away"):
        solve_and_grade(task, split, data_dir, sandbox, graded, SETTINGS, solver, "public")
    assert seen[0].proc.poll() is not None                       # no worker outlives the step
    assert not (tmp_path / "sandbox.tmp").exists() and not graded.exists()


def test_the_bytes_the_solver_answers_are_graded_and_left_in_the_sandbox(tmp_path):
    task, split, data_dir, sandbox, graded = _place(tmp_path)
    answer = b"PassengerId,Transported\n"                           # a header and no rows

    def solver(workspace):
        # the sandbox's file at the end is not the answer (another branch of a tree may have written it)
        workspace.step(0, 1, ToolCall("read_data", {}, {"filepath": "test.csv"}, "test"), None)
        workspace.step(1, 2, ToolCall("save_dataframe_to_csv", {"df": "test"}, {"filepath": "submission.csv"},
                                      None), None)
        return "searched", answer

    solved = solve_and_grade(task, split, data_dir, sandbox, graded, SETTINGS, solver, "public")
    assert solved.result == "searched" and solved.worker_failure is None
    assert solved.grade is not None and not solved.valid and solved.invalid_reason == solved.grade.reason
    assert graded.read_bytes() == answer == (sandbox / "submission.csv").read_bytes()
    assert solved.confinement.startswith("landlock-abi") and solved.peak_mib is not None
    fields = solved.grade_fields(task, "public")
    assert fields["valid"] is False and fields["score"] is None
    assert fields["percentile_note"] == percentile_note(task, board="public")
