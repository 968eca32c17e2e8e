"""--resume over a damaged results.jsonl (issue 13, point 7): never INTERNALERROR, never a lost record.

The pytest runs use test_plugin's fake trial runner (a pure function of the trial seed), in a subprocess.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mltb_core.analysis.resultsfile import ResultsFileWarning, read_records
from mltb_core.analysis.results import latest_records
from test_plugin import COMMON, FAKE_CONFTEST, SUITE

pytest_plugins = ["pytester"]

TRIALS = 3


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_challenges=SUITE)
    pytester.makeconftest(FAKE_CONFTEST)
    return pytester


def run(pytester: pytest.Pytester, run_dir, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(*COMMON, "--planner=react", f"--trials={TRIALS}", f"--mltb-out={run_dir}",
                                         *args)


def trials_recorded(path) -> list[int]:
    return sorted(r.trial for r in latest_records(read_records(path)))


def test_resume_skips_unreadable_lines_with_a_warning_and_reruns_only_what_is_missing(suite, tmp_path):
    run_dir = tmp_path / "run"
    assert run(suite, run_dir).ret in (0, 1)
    results = run_dir / "results.jsonl"
    lines = results.read_bytes().splitlines(keepends=True)
    assert len(lines) == TRIALS
    record = json.loads(lines[0])
    damage = [b"\xff\xfe\x00 not utf-8\n", b'["a", "json", "list"]\n', b'"a json string"\n',
              json.dumps({**record, "trial": "abc"}).encode() + b"\n",
              json.dumps({**record, "trial": None}).encode() + b"\n", bytes(range(11, 256)) + b"\n",
              # issue 34: nesting past the parser's stack, an integer past the digit limit, a surrogate escape
              b"[" * 100_000 + b"]" * 100_000 + b"\n", b'{"trial": ' + b"9" * 5_000 + b"}\n",
              json.dumps({**record, "task": "\udc80"}).encode() + b"\n"]
    # damage the file: unreadable lines in the middle, and the last record torn half-way
    results.write_bytes(lines[0] + b"".join(damage) + lines[1] + lines[2][: len(lines[2]) // 2])

    resumed = run(suite, run_dir, "--resume")
    text = resumed.stdout.str() + resumed.stderr.str()
    assert resumed.ret in (0, 1), text[-3000:]
    assert "INTERNALERROR" not in text
    for lineno in range(2, 2 + len(damage)):                         # file:line and why, for each
        assert f"{results}:{lineno}: skipped, not a trial record" in text
    assert "2 deselected" in text                                     # trials 0 and 1 are not rerun
    with pytest.warns(ResultsFileWarning):                            # the damaged lines stay, reported
        assert trials_recorded(results) == list(range(TRIALS))         # the torn trial ran again
    again = run(suite, run_dir, "--resume")
    assert f"{TRIALS} deselected" in again.stdout.str()                # nothing is rerun a second time
    assert len(list(tmp_path.glob("run/results.jsonl.torn-*"))) == 1  # the torn bytes were kept


def test_results_file_that_is_a_directory_is_a_usage_error(pytester, tmp_path):
    pytester.makepyfile(test_challenges=SUITE)  # in process: the error comes before any trial
    run_dir = tmp_path / "run"
    (run_dir / "results.jsonl").mkdir(parents=True)
    for args in (["--resume"], []):
        result = pytester.runpytest_inprocess(*COMMON, f"--mltb-out={run_dir}", *args)
        text = result.stdout.str() + result.stderr.str()
        assert result.ret == pytest.ExitCode.USAGE_ERROR, text[-3000:]
        assert "INTERNALERROR" not in text and "Traceback" not in text
        assert f"{run_dir / 'results.jsonl'} is not a regular file" in text


def test_a_second_session_on_a_run_directory_is_refused_naming_the_owner(suite, tmp_path):
    """Issue 34: two sessions on one --mltb-out interleaved records and recreated each other's live sandboxes.
    The directory is held here as a running session holds it; a second session is a one-line usage error
    naming the owner, writes nothing, and the directory is free again once the owner ends."""
    import os

    from pytest_mltb.bookkeeping import RunBook

    run_dir = tmp_path / "run"
    owner = RunBook(run_dir)
    owner.claim()
    try:
        second = run(suite, run_dir)
        text = second.stdout.str() + second.stderr.str()
        assert second.ret == pytest.ExitCode.USAGE_ERROR, text[-3000:]
        assert f"is in use by another session (pid {os.getpid()} on " in text and "INTERNALERROR" not in text
        assert not (run_dir / "results.jsonl").exists()
    finally:
        owner.release()
    assert run(suite, run_dir, "-n", "2").ret in (0, 1)   # free again; xdist workers share the controller's claim
    assert trials_recorded(run_dir / "results.jsonl") == list(range(TRIALS))


@pytest.mark.parametrize("content", [b"[" * 100_000 + b"]" * 100_000, b'{"cells": ' + b"9" * 5_000 + b"}"])
def test_a_hostile_compare_baseline_is_a_usage_error(pytester, tmp_path, content):
    """Issue 34: a --compare baseline of nested brackets was an INTERNALERROR (RecursionError)."""
    pytester.makepyfile(test_challenges=SUITE)   # in process: the error comes before any trial
    baseline = tmp_path / "baseline.json"
    baseline.write_bytes(content)
    result = pytester.runpytest_inprocess(*COMMON, f"--mltb-out={tmp_path / 'run'}", f"--compare={baseline}")
    text = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, text[-3000:]
    assert "INTERNALERROR" not in text and "Traceback" not in text and f"baseline file {baseline}" in text


# ---- a damaged trial checkpoint (issue 59): replay only what is intact and asked for, then go live ----------
def _edited_reply(line: bytes) -> bytes:
    entry = json.loads(line)
    entry["reply"]["candidates"][0]["text"] += " (edited)"     # the check digest no longer matches
    return json.dumps(entry).encode()


def _other_request(line: bytes) -> bytes:
    entry = json.loads(line)
    entry["request"] = "0" * 64                                 # a well-formed identity the planner never sends
    return json.dumps(entry).encode()


def _string_tokens(line: bytes) -> bytes:
    from mltb_core.runner.checkpoint import _check

    entry = json.loads(line)
    entry["reply"]["usage"]["prompt_tokens"] = "many"          # its check digest recomputed: only the shape is wrong
    entry["check"] = _check(entry["reply"])
    return json.dumps(entry).encode()


# (how line 4 of a 6-line checkpoint is damaged, the requests replayed, what the record says stopped the replay)
DAMAGE = {
    "torn by kill -9": (lambda line: line[: len(line) // 2], 3, "not JSON"),
    "not UTF-8": (lambda line: b"\xff\xfe not utf-8", 3, "not UTF-8"),
    "a JSON list": (lambda line: b'["a", "list"]', 3, "not a version-1 checkpoint line"),
    "nested past the bound": (lambda line: b"[" * 100_000 + b"]" * 100_000, 3, "refused"),
    "an edited reply": (_edited_reply, 3, "check digest"),
    "another request": (_other_request, 3, "request 4 differs"),
    "a usage that is not a number": (_string_tokens, 3, "usage field 'prompt_tokens'"),
}


@pytest.fixture(scope="module")
def whole_trial(tmp_path_factory):
    """An uninterrupted sim trial of 12 calls, and the checkpoint the same trial leaves when Ctrl-C comes at call 7."""
    from mltb_core.analysis.runstore import TrialFiles
    from mltb_core.bench.tasks import get_task
    from mltb_core.runner.trial import run_trial
    from test_resume_kill import interrupt_after, sim_config

    out = tmp_path_factory.mktemp("whole")
    record = run_trial(get_task("spaceship-titanic"), sim_config("react"), out / "whole")
    assert not TrialFiles(out / "whole", record.case_id).checkpoint.exists()   # a finished trial keeps none
    with pytest.MonkeyPatch.context() as patch:
        interrupt_after(patch, 6)
        with pytest.raises(KeyboardInterrupt):
            run_trial(get_task("spaceship-titanic"), sim_config("react"), out / "cut")
    return record, TrialFiles(out / "cut", record.case_id).checkpoint.read_bytes().splitlines(keepends=True)


@pytest.mark.parametrize("damage", DAMAGE, ids=list(DAMAGE))
def test_a_damaged_checkpoint_replays_its_intact_prefix_then_the_trial_goes_on_live(whole_trial, tmp_path, damage):
    from mltb_core.analysis.runstore import TrialFiles
    from mltb_core.bench.tasks import get_task
    from mltb_core.runner.trial import run_trial
    from test_resume_kill import llm_steps, same_trial_fields, sim_config

    whole, lines = whole_trial
    assert len(lines) == 6
    damaged, replayed, why = DAMAGE[damage]
    path = TrialFiles(tmp_path, whole.case_id).checkpoint
    path.parent.mkdir(parents=True)
    torn = damage == "torn by kill -9"
    path.write_bytes(b"".join(lines[:3]) + damaged(lines[3].rstrip(b"\n")) + (b"" if torn else b"\n" + b"".join(lines[4:6])))

    resumed = run_trial(get_task("spaceship-titanic"), sim_config("react"), tmp_path)
    assert resumed.outcome != "infra_error", resumed.error
    assert same_trial_fields(resumed) == same_trial_fields(whole)          # the same trial, never a wrong one
    assert llm_steps(Path(resumed.trajectory)) == llm_steps(Path(whole.trajectory))
    note = resumed.extra["resumed"]
    assert note["replayed_requests"] == replayed and note["replayed_llm_calls"] == replayed
    assert why in note["replay_stopped"] and "live from there" in note["replay_stopped"]
    assert not path.exists()                          # the trial ended with its record: nothing left to resume


def test_an_empty_checkpoint_is_a_fresh_start(whole_trial, tmp_path):
    from mltb_core.analysis.runstore import TrialFiles
    from mltb_core.bench.tasks import get_task
    from mltb_core.runner.trial import run_trial
    from test_resume_kill import same_trial_fields, sim_config

    whole, _ = whole_trial
    path = TrialFiles(tmp_path, whole.case_id).checkpoint
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")
    resumed = run_trial(get_task("spaceship-titanic"), sim_config("react"), tmp_path)
    assert same_trial_fields(resumed) == same_trial_fields(whole) and "resumed" not in resumed.extra


def test_a_torn_checkpoint_is_cut_where_it_tore_and_a_second_interrupt_keeps_both_runs_calls(whole_trial, tmp_path):
    from mltb_core.analysis.runstore import TrialFiles
    from mltb_core.bench.tasks import get_task
    from mltb_core.runner.checkpoint import TrialCheckpoint
    from mltb_core.runner.trial import run_trial
    from test_resume_kill import interrupt_after, llm_steps, same_trial_fields, sim_config

    whole, lines = whole_trial
    path = TrialFiles(tmp_path, whole.case_id).checkpoint
    path.parent.mkdir(parents=True)
    path.write_bytes(b"".join(lines[:3]) + lines[3][:40])                    # kill -9 while writing call 4
    with pytest.MonkeyPatch.context() as patch:
        interrupt_after(patch, 2)                                           # 3 replayed, 2 live, Ctrl-C at call 6
        with pytest.raises(KeyboardInterrupt):
            run_trial(get_task("spaceship-titanic"), sim_config("react"), tmp_path)
    kept = TrialCheckpoint(path)
    assert kept.damaged is None and kept.kept == 5 and path.read_bytes().startswith(b"".join(lines[:3]))
    resumed = run_trial(get_task("spaceship-titanic"), sim_config("react"), tmp_path)
    assert resumed.extra["resumed"]["replayed_requests"] == 5
    assert same_trial_fields(resumed) == same_trial_fields(whole)
    assert llm_steps(Path(resumed.trajectory)) == llm_steps(Path(whole.trajectory))
