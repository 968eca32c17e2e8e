"""A worker that dies under xdist (a conftest's ``pytest_mltb_run_trial`` hook SIGKILLs it): its item is an ERROR
recorded as an infrastructure error, the other items finish, results.jsonl stays valid JSONL."""
from __future__ import annotations

import json
from pathlib import Path


pytest_plugins = ["pytester"]

SUITE = '''
def test_challenge(mltb_case, mltb_split, mltb_record, mltb_check):
    mltb_check(mltb_record)
'''

# Fault injection lives here, not in the plugin: the worker about to run the second trial kills itself.
KILL_CONFTEST = '''
import os
import signal

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_mltb_run_trial(case):
    if case.id.endswith("-t01"):
        os.kill(os.getpid(), signal.SIGKILL)
'''


def test_killed_worker_is_an_infra_error_and_the_run_finishes(pytester, tmp_path, monkeypatch):
    import mltb_core

    # the subprocess imports this checkout's mltb, whatever is installed
    monkeypatch.setenv("PYTHONPATH", str(Path(mltb_core.__file__).parent.parent))
    pytester.makepyfile(test_challenges=SUITE)
    pytester.makeconftest(KILL_CONFTEST)
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
    # the crash record names the trial like the others do (it once lost its board and toolset)
    for name in ("board", "toolset", "config_hash", "synthetic", "model", "planner"):
        assert by_trial[1][name] == by_trial[0][name] is not None, name
    assert all(by_trial[t]["outcome"] in ("valid", "planner_failure") for t in (0, 2))
    assert "Infrastructure errors (not counted against consistency)" in text


def test_a_crash_record_is_built_from_the_case_configuration():
    from mltb_core.analysis.records import Outcome
    from mltb_core.config import TrialConfig
    from pytest_mltb.bookkeeping import RunBook
    from pytest_mltb.collection import Case

    config = TrialConfig(planner="react", model="sim", trial=2, board="private", toolset="extended")
    record = RunBook.crash_record(Case("spaceship-titanic", "react", "sim", 2), config, "node down")
    assert record.outcome is Outcome.INFRA_ERROR and record.stop_reason == "worker crashed"
    assert (record.board, record.toolset, record.seed) == ("private", "extended", config.trial_seed)
    assert record.config_hash == config.config_hash() and record.synthetic and "node down" in record.error
