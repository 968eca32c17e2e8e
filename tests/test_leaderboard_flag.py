"""Task.has_leaderboard is the one rule for "this task has a Kaggle board"; both front ends' records carry
it and the tables fall back on it for records that do not."""
import contextlib
import dataclasses
import io
import json

from mltb_core import cli
from mltb_core.analysis.records import TrialRecord
from mltb_core.analysis.results import NO_LEADERBOARD, percentile_exclusion
from mltb_core.bench.tasks import load_tasks


def test_a_task_has_a_leaderboard_when_it_names_one_and_is_not_a_replica():
    tasks = load_tasks()
    spaceship, santander = tasks["spaceship-titanic"], tasks["santander-value-prediction-challenge"]
    assert spaceship.has_leaderboard and spaceship.leaderboard
    assert santander.leaderboard and santander.is_replica and not santander.has_leaderboard  # named, never used
    assert not dataclasses.replace(spaceship, leaderboard=None).has_leaderboard
    assert {t.has_leaderboard for t in tasks.values()} == {True, False}


def _old_failure(slug):
    # an older record: no percentile note, no leaderboard flag; the task spec decides
    return TrialRecord(task=slug, planner="react", model="sim", trial=0, seed=0, config_hash="h",
                       outcome="planner_failure")


def test_tables_ask_the_task_for_records_without_the_flag():
    assert percentile_exclusion([_old_failure("spaceship-titanic")]) is None
    assert percentile_exclusion([_old_failure("santander-value-prediction-challenge")]) == NO_LEADERBOARD
    flagged = _old_failure("spaceship-titanic")
    flagged.extra["leaderboard"] = False     # the record's own flag wins over today's spec
    assert percentile_exclusion([flagged]) == NO_LEADERBOARD


def test_mltb_run_records_carry_the_flag(tmp_path):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        cli.main(["run", "--task", "santander-value-prediction-challenge", "--planner", "react", "--model", "sim",
                  "--max-llm-calls", "1", "--out", str(tmp_path), "--json"])
    document = json.loads(out.getvalue())
    assert document["extra"]["leaderboard"] is False
    stored = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert stored[0]["extra"]["leaderboard"] is False
