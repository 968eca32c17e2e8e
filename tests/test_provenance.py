"""Every trial record says which code ran it (mltb version @ commit), reports say which code ran their
trials, and --resume warns when it keeps trials that other code ran: the config hash pins the settings,
not the code, and a run directory grows over sessions and commits."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import mltb_core
from mltb_core.analysis import provenance
from mltb_core.analysis.provenance import NOT_RECORDED, code_version, git_commit, trial_code
from mltb_core.analysis.reports import build_report
from mltb_core.analysis.records import TrialRecord
from mltb_core.analysis.resultsfile import append_records, read_records
from mltb_core.config import TrialConfig

pytest_plugins = ["pytester"]
ROOT = Path(mltb_core.__file__).resolve().parents[1]


def _git(cwd: Path, *argv: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *argv], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def repo(tmp_path) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    top = tmp_path / "repo"
    top.mkdir()
    _git(top, "init", "-q")
    (top / "a.txt").write_text("one")
    _git(top, "add", "a.txt")
    _git(top, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    return top


def test_the_commit_of_a_checkout_and_its_uncommitted_changes(repo):
    head = _git(repo, "rev-parse", "--short=12", "HEAD")
    assert git_commit(repo) == head
    (repo / "a.txt").write_text("two")
    git_commit.cache_clear()
    dirty = git_commit(repo)
    assert re.fullmatch(rf"{head} \(with uncommitted changes [0-9a-f]{{8}}\)", dirty), dirty
    # the digest is the diff's: the same changes give the same code, other changes another (issue 59)
    git_commit.cache_clear()
    assert git_commit(repo) == dirty
    (repo / "a.txt").write_text("three")
    git_commit.cache_clear()
    assert git_commit(repo) != dirty and git_commit(repo).startswith(f"{head} (with uncommitted changes ")
    git_commit.cache_clear()


def test_a_report_written_into_the_checkout_is_not_a_code_change(repo):
    """A long run writes its report into the checkout it runs from: later trials ran the same code."""
    (repo / "reports").mkdir()
    (repo / "reports" / "table.md").write_text("one")
    (repo / "README.md").write_text("one")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "reports")
    head = _git(repo, "rev-parse", "--short=12", "HEAD")
    (repo / "reports" / "table.md").write_text("two")
    (repo / "README.md").write_text("two")
    git_commit.cache_clear()
    assert git_commit(repo) == head
    (repo / "a.txt").write_text("changed code")
    git_commit.cache_clear()
    assert git_commit(repo).startswith(f"{head} (with uncommitted changes ")
    git_commit.cache_clear()


def test_an_installed_copy_inside_another_repository_reports_no_commit(repo):
    """site-packages of a virtual environment that lives in the user's own repository: not mltb's commit."""
    site = repo / ".venv" / "lib" / "site-packages"
    site.mkdir(parents=True)
    assert git_commit(site) is None
    assert git_commit(repo.parent) is None       # not a checkout at all


def test_a_record_made_for_a_config_carries_the_code_that_made_it():
    record = TrialRecord.for_config("spaceship-titanic", TrialConfig(planner="react", model="sim"), "valid")
    assert record.code == code_version()
    assert code_version().startswith(f"mltb {mltb_core.__version__}")
    if (ROOT / ".git").exists() and shutil.which("git"):                 # a checkout (CI's clean clone is one)
        assert code_version().split(" @ ")[1].split(" ")[0] == _git(ROOT, "rev-parse", "--short=12", "HEAD")


def test_the_load_meter_averages_the_load_per_core_over_the_trial(monkeypatch):
    import itertools
    import os
    import threading

    from mltb_core.analysis.provenance import LoadMeter, machine_facts

    cores = machine_facts()["cores"]
    values = itertools.chain([3.0, 5.0], itertools.repeat(1.0))   # 1-minute load averages
    returned: list[float] = []
    sampled = threading.Event()

    def getloadavg():
        returned.append(next(values))
        if len(returned) == 2:
            sampled.set()
        return (returned[-1], 0.0, 0.0)

    monkeypatch.setattr(os, "getloadavg", getloadavg)
    meter = LoadMeter(every=0.01).start()
    assert sampled.wait(10)                  # the thread samples between the start and the read
    meter.stop()
    mean = meter.mean()                      # the read samples too
    assert returned[:2] == [3.0, 5.0] and len(returned) >= 3
    assert mean == round(sum(returned) / cores / len(returned), 2)
    calls = len(returned)
    assert meter.mean() is not None and len(returned) == calls + 1   # stopped: only the read samples

    def unavailable():
        raise OSError("no load average here")

    monkeypatch.setattr(os, "getloadavg", unavailable)
    with LoadMeter() as meter:
        assert meter.mean() is None          # "not recorded", never a made-up 0
    monkeypatch.delattr(os, "getloadavg")    # a system without one at all
    with LoadMeter() as meter:
        assert meter.mean() is None


def test_a_trial_record_says_how_busy_the_machine_was(tmp_path, monkeypatch):
    import os
    import threading

    from mltb_core.bench.tasks import get_task
    from mltb_core.runner.trial import run_trial

    monkeypatch.setattr(os, "getloadavg", lambda: (7.0, 0.0, 0.0))   # every sample: 7 runnable threads
    record = run_trial(get_task("spaceship-titanic"), TrialConfig(planner="react", model="sim", max_llm_calls=2),
                       tmp_path)
    assert record.load_per_core == round(7.0 / os.cpu_count(), 2)
    assert not any(t.name == "mltb-load-meter" for t in threading.enumerate())   # stopped with the trial
    assert TrialRecord.from_dict(json.loads(json.dumps(record.to_dict()))).load_per_core == record.load_per_core
    old = {**record.to_dict(), "schema_version": 2}
    del old["load_per_core"]                 # a record written before mltb measured it
    assert TrialRecord.from_dict(old).load_per_core is None


@pytest.mark.parametrize("field, value, says", [
    ("load_per_core", -1.5, "not a load"), ("load_per_core", float("nan"), "not a finite number"),
    ("wall_seconds", float("inf"), "not a finite number"), ("wall_seconds", 10 ** 400, "not a finite number")])
def test_a_record_refuses_a_number_no_trial_could_have_written(field, value, says):
    record = TrialRecord.for_config("spaceship-titanic", TrialConfig(planner="react", model="sim"), "valid")
    with pytest.raises(ValueError, match=f"field '{field}' is .*{says}"):
        TrialRecord.from_dict({**record.to_dict(), field: value})


def test_records_older_than_the_stamp_load_and_say_so(tmp_path):
    record = TrialRecord.for_config("spaceship-titanic", TrialConfig(planner="react", model="sim"), "valid")
    old = record.to_dict()
    del old["code"]
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(old) + "\n" + json.dumps(record.to_dict()) + "\n")
    loaded = list(read_records(path))
    assert [r.code for r in loaded] == [None, code_version()]
    assert trial_code(loaded) in (f"{code_version()} (1), {NOT_RECORDED} (1)", f"{NOT_RECORDED} (1), {code_version()} (1)")
    assert trial_code(loaded + [loaded[1]]) == f"{code_version()} (2), {NOT_RECORDED} (1)"   # most trials first


def test_the_report_says_which_code_ran_its_trials(tmp_path):
    config = TrialConfig(planner="react", model="sim")
    records = [TrialRecord.for_config("spaceship-titanic", config.with_(trial=t), "planner_failure") for t in range(3)]
    records[0].code = "mltb 0.0.9 @ 0123456789ab"
    append_records(tmp_path / "run" / "results.jsonl", records)
    paths = build_report([tmp_path / "run"], tmp_path / "out")
    expected = f"run by {code_version()} (2), mltb 0.0.9 @ 0123456789ab (1)"
    assert expected in paths["leaderboard"].read_text()
    assert expected in paths["index"].read_text()


SUITE = '''
def test_challenge(mltb_case, mltb_split, mltb_record, mltb_check):
    mltb_check(mltb_record)
'''


def test_resume_warns_when_it_keeps_trials_other_code_ran(pytester, tmp_path):
    pytester.makepyfile(test_challenges=SUITE)
    args = ["-p", "no:cacheprovider", "--task=spaceship-titanic", "--model=sim", "--planner=react",
            "--max-llm-calls=2", "--trials=2", f"--mltb-out={tmp_path}"]
    first = pytester.runpytest_subprocess(*args)
    results = tmp_path / "results.jsonl"
    records = list(read_records(results))
    assert len(records) == 2 and all(r.code == code_version() for r in records), first.stdout.str()

    same = pytester.runpytest_subprocess(*args, "--resume")
    assert "2 trial(s) already recorded" in same.stdout.str() and "other code" not in same.stdout.str()

    records[0].code = "mltb 0.0.9 @ 0123456789ab"
    results.write_text("".join(json.dumps(r.to_dict()) + "\n" for r in records))
    other = pytester.runpytest_subprocess(*args, "--resume")
    other.stdout.fnmatch_lines([f"mltb: warning: --resume: 1 of the 2 recorded trial(s) kept ran on other code "
                                f"(mltb 0.0.9 @ 0123456789ab (1)) than this session ({code_version()})*"])


def test_the_stamp_is_read_once_per_process(monkeypatch, repo):
    calls = []
    real = provenance._git
    monkeypatch.setattr(provenance, "_git", lambda *a: calls.append(a) or real(*a))
    git_commit.cache_clear()
    for _ in range(5):
        git_commit(repo)
    assert len(calls) == 3            # toplevel, HEAD, status: once
    git_commit.cache_clear()
