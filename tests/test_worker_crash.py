"""A worker that dies under xdist (SIGKILL via the MLTB_FAULT_KILL test hook): its item is an ERROR
recorded as an infrastructure error, the other items finish, results.jsonl stays valid JSONL."""
from __future__ import annotations

import json

import pytest

pytest_plugins = ["pytester"]

SUITE = '''
def test_challenge(mltb_case, mltb_split, mltb_record, mltb_check):
    mltb_check(mltb_record)
'''


def test_killed_worker_is_an_infra_error_and_the_run_finishes(pytester, tmp_path, monkeypatch):
    pytester.makepyfile(test_challenges=SUITE)
    monkeypatch.setenv("MLTB_FAULT_KILL", "-t01")       # the second trial's worker SIGKILLs itself
    run_dir = tmp_path / "run"
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-n", "2", "--task=spaceship-titanic", "--model=sim", "--planner=react",
        "--trials=3", "--max-iterations=3", "--no-llm-cache", f"--mltb-out={run_dir}")
    text = result.stdout.str()
    outcomes = result.parseoutcomes()
    assert outcomes.get("errors") == 1, text
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) == 2, text
    assert "crashed while running" in text and "recorded as an infrastructure error" in text

    lines = (run_dir / "results.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]          # every line parses
    assert sorted(r["trial"] for r in records) == [0, 1, 2]  # one record per item
    by_trial = {r["trial"]: r for r in records}
    assert by_trial[1]["outcome"] == "infra_error" and "crashed" in by_trial[1]["error"]
    assert all(by_trial[t]["outcome"] in ("valid", "planner_failure") for t in (0, 2))
    assert "Infrastructure errors (not counted against consistency)" in text
