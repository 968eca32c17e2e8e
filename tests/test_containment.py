"""Containment by design (issue 20): code running in the tool worker — as if the model had escaped the
expression language — can neither reach secrets, the network, the parent or the record, nor turn its own
failure into an infrastructure error.

Each test runs a real trial (``run_trial``: the trusted process plans and grades, a fresh confined
worker runs the calls) whose scripted model calls the tools of ``hostile_tools.py``: plain Python with no
check at all, i.e. exactly what an escape would run.
"""
from __future__ import annotations

import json
import re
import signal
import socket
import sys
import time
from pathlib import Path

import pytest

from mltb_core.analysis.records import TrialRecord
from mltb_core.runner.confine import landlock_abi
from mltb_core.toolkit import limits
from mltb_core.toolkit.registry import ToolCall, ToolCallError

sys.path.insert(0, str(Path(__file__).parent))
from scripted import call, scripted_trial, spaceship_pipeline  # noqa: E402

needs_landlock = pytest.mark.skipif(not landlock_abi()[0], reason=f"no Landlock here: {landlock_abi()[1]}")
pytestmark = needs_landlock


def _contents(results):
    return [r["content_preview"] for r in results]


def test_the_worker_holds_no_secret_and_reaches_no_network(monkeypatch, tmp_path, hostile_tools):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-of-the-parent")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    try:
        record, results = scripted_trial(monkeypatch, tmp_path, [
            call("read_environment", output="key", name="OPENAI_API_KEY"),
            call("connect_tcp", output="c", port=port),
            call("read_data", output="train", filepath="train.csv")])
    finally:
        server.close()
    assert record.outcome == "planner_failure", record.error
    assert "sk-secret" not in Path(record.trajectory).read_text()
    assert "'absent'" in results[0]["content_preview"] or "absent" in results[0]["content_preview"]
    assert not results[1]["ok"] and ("Permission denied" in results[1]["content_preview"]
                                     or "Operation not permitted" in results[1]["content_preview"])
    assert results[2]["ok"] and record.stage_reached == 1   # the worker works otherwise


def test_the_worker_starts_no_process_and_signals_nobody(monkeypatch, tmp_path, hostile_tools):
    seen = []
    previous = signal.signal(signal.SIGUSR1, lambda *a: seen.append("SIGUSR1"))
    try:
        record, results = scripted_trial(monkeypatch, tmp_path, [
            call("start_process", output="p", seconds=60),
            call("fork_child", output="f"),
            call("signal_parent", output="s", signum=int(signal.SIGINT)),
            call("signal_parent", output="s2", signum=int(signal.SIGUSR1))])
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert [r["ok"] for r in results] == [False, False, False, False], _contents(results)
    assert all("Operation not permitted" in c or "Permission denied" in c for c in _contents(results))
    assert seen == [] and record.outcome == "planner_failure"   # no KeyboardInterrupt reached this process


def test_a_forged_reply_cannot_make_a_trial_valid_or_change_its_counts(monkeypatch, tmp_path, hostile_tools):
    record, _ = scripted_trial(monkeypatch, tmp_path, [call("forge_reply", output="x"),
                                                       call("read_data", output="train", filepath="train.csv")])
    # The trusted process graded whatever bytes it got, counted the calls itself, and the confinement
    # label is the one the worker reported before any model text reached it.
    # The forged reply claims stage 10 but no model prediction ("predicted": False), so the path is not a
    # submission the paper counts and ReAct goes on; the worker's genuine reply to the first call then arrives
    # as the second call's, behind the forged stage: a malformed worker reply, the trial's own failure.
    assert record.outcome == "planner_failure" and not record.valid
    assert record.extra.get("submission_reason") or "malformed step reply" in (record.error or ""), record.error
    assert record.llm_calls == 2 and record.tokens_in == 20 and record.cost_usd == 0   # both scripted calls, as sent
    assert record.extra["confinement"].startswith("landlock-abi") and "forged" not in record.extra["confinement"]


@pytest.mark.parametrize("tool, args, why", [
    ("crash_worker", {}, "the tool worker failed"),
    ("fill_disk", {"mebibytes": 8, "files": 4}, "over its quota"),
])
def test_a_worker_that_dies_or_overruns_its_quota_is_the_trials_failure(monkeypatch, tmp_path, hostile_tools,
                                                                          tool, args, why):
    monkeypatch.setenv(limits.SANDBOX_QUOTA_ENV, "16M")
    record, _ = scripted_trial(monkeypatch, tmp_path, [call(tool, output="x", **args)])
    assert record.outcome == "planner_failure", record.error
    assert why in record.stop_reason


def test_a_hung_worker_is_killed_and_the_trial_fails(monkeypatch, tmp_path, hostile_tools):
    started = time.monotonic()
    record, _ = scripted_trial(monkeypatch, tmp_path, [call("hang_worker", output="x", seconds=600)],
                               tool_time_limit=1.0)
    assert record.outcome == "planner_failure" and "did not answer" in record.stop_reason
    assert time.monotonic() - started < 120


def test_huge_errors_and_unencodable_names_stay_the_models_problem(monkeypatch, tmp_path, hostile_tools):
    record, results = scripted_trial(monkeypatch, tmp_path, [
        call("huge_error", output="x", size=3_000_000),
        call("surrogate_frame", output="odd"),
        call("read_data", output="train", filepath="train.csv")])
    assert record.outcome == "planner_failure", record.error
    assert [r["ok"] for r in results] == [False, True, True], _contents(results)
    trajectory = Path(record.trajectory).read_text(encoding="utf-8")   # encodable throughout
    requests = [json.loads(line) for line in trajectory.splitlines()]
    assert requests and len(trajectory) < 400_000


def test_a_data_file_cannot_be_shadowed(monkeypatch, tmp_path):
    record, results = scripted_trial(monkeypatch, tmp_path, [
        call("read_data", output="test", filepath="test.csv"),
        call("save_dataframe_to_csv", {"df": "test"}, filepath="train.csv"),
        call("read_data", output="train", filepath="train.csv")])
    assert not results[1]["ok"] and "reserved for the task's own data file" in results[1]["content_preview"]
    shape = re.compile(r"shape=\((\d+), (\d+)\)")
    test_shape = shape.search(results[0]["content_preview"]).groups()
    train_shape = shape.search(results[2]["content_preview"]).groups()
    assert results[2]["ok"] and train_shape[1] == str(int(test_shape[1]) + 1)   # the real train.csv: + the target


def test_a_directory_at_the_submission_path_is_a_failed_call(monkeypatch, tmp_path):
    script = spaceship_pipeline(submit=False) + [
        call("get_features", {"df": "test"}, "ids", columns=["PassengerId"]),
        call("save_dataframe_to_csv", {"df": "ids"}, filepath="submission.csv/x.csv")]
    record, results = scripted_trial(monkeypatch, tmp_path, script)
    assert record.outcome == "planner_failure", record.error
    assert record.stop_reason != "infrastructure error"


def test_deeply_nested_call_arguments_are_a_bad_call_not_a_crash():
    deep = "[" * 5000 + "]" * 5000
    with pytest.raises(ToolCallError, match="nested more than"):
        ToolCall.from_arguments("read_data", '{"func_kwargs": {"filepath": ' + deep + "}}")
    nested: list = []
    for _ in range(5000):
        nested = [nested]
    with pytest.raises(ToolCallError, match="nested more than"):
        ToolCall.from_arguments("read_data", {"func_kwargs": {"filepath": nested}})


def test_attacks_count_as_failures_in_consistency(monkeypatch, tmp_path, hostile_tools):
    from mltb_core.analysis.results import consistency_values

    good, _ = scripted_trial(monkeypatch, tmp_path / "good", spaceship_pipeline())
    attacks = [scripted_trial(monkeypatch, tmp_path / name, script)[0] for name, script in (
        ("crash", [call("crash_worker", output="x")]),
        ("huge", [call("huge_error", output="x", size=3_000_000)]),
        ("nested", [call("surrogate_frame", output="odd")]))]
    records: list[TrialRecord] = [good, *attacks]
    assert good.outcome == "valid", good.error
    assert [r.outcome for r in attacks] == ["planner_failure"] * 3
    assert sorted(consistency_values(records)) == [0.0, 0.0, 0.0, 1.0]   # 1 of 4, not 1 of 1


def test_random_hostile_expressions_through_the_worker_change_nothing_outside(tmp_path):
    """Issue 20's fuzz, at the worker: 400 random expressions built from pandas/numpy/dunder names (the
    compiler's own fuzz test throws 10,000 at it in-process) go through the real tool inside one confined
    worker. Every reply passes the parent's checks, the worker survives all of them, and nothing appears
    outside its sandbox."""
    from mltb_core.bench.splits import prepare_split
    from mltb_core.bench.tasks import get_task
    from mltb_core.runner.solve import WorkerSettings, fresh_dirs, prepare_agent_data, start_worker
    from test_expressions_fuzz import Generator

    task = get_task("spaceship-titanic")
    split = prepare_split(task, seed=0)
    data_dir = prepare_agent_data(split, tmp_path)
    sandbox, scratch = tmp_path / "sandbox", tmp_path / "sandbox.tmp"
    fresh_dirs(sandbox, scratch)
    outside_before = sorted(p for p in tmp_path.rglob("*") if sandbox not in p.parents and scratch not in p.parents)
    worker = start_worker(task, data_dir, sandbox, scratch, [split.dir, split.labels_path],
                          WorkerSettings(toolset="paper", threads=1, seed=0, tool_time_limit=20.0))
    generator = Generator(seed=20)
    try:
        worker.step(0, 1, ToolCall("read_data", {}, {"filepath": "train.csv"}, "train"), None)
        results = []
        for node in range(2, 402):
            call = ToolCall("create_numeric_feature", {"df": "train"},
                            {"name": "f", "expression": generator.expr()}, "out")
            results.append(worker.step(1, node, call, None))
    finally:
        worker.close()
    assert len(results) == 400 and worker.proc.returncode is not None
    assert all(r.progress.stage == results[0].progress.stage for r in results)   # nothing forged a stage
    assert sum(not r.ok for r in results) > 300                                     # most are refused, cleanly
    outside_after = sorted(p for p in tmp_path.rglob("*") if sandbox not in p.parents and scratch not in p.parents)
    assert outside_after == outside_before
    assert not any(sandbox.iterdir())   # no expression wrote a file, even inside the sandbox


# ------------------------------------------------------------------------------------------------------------
# Issue 34: hostile replies through a whole trial (real OpenAI client, loopback fake server, cache on), hostile
# worker answers, the quota in inodes, spend kept on an infrastructure error.
def _openai_trial(monkeypatch, out_dir, planner="react", **config):
    from mltb_core.bench.tasks import get_task
    from mltb_core.config import TrialConfig
    from mltb_core.runner.trial import run_trial

    monkeypatch.setenv("MLTB_CACHE_DIR", str(out_dir / "llm-cache"))
    settings = dict(planner=planner, model="openai:gpt-4o", llm_cache=True, toolset="extended")
    return run_trial(get_task("spaceship-titanic"), TrialConfig(**{**settings, **config}), out_dir)


@pytest.fixture
def openai_server(monkeypatch):
    from fake_openai_server import FakeOpenAIServer

    with FakeOpenAIServer() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        monkeypatch.setenv("MLTB_LLM_MAX_RETRIES", "0")
        yield server


def test_hostile_replies_end_a_trial_as_the_models_failure_with_its_spend(monkeypatch, tmp_path, openai_server):
    """Every reply attack of the corpus, as a trial's first reply (then plain text, which ends a ReAct turn)."""
    from attack_corpus import REPLY_ATTACKS
    from fake_openai_server import content_reply, tool_call_reply

    for name, kind, payload in REPLY_ATTACKS:
        before = len(openai_server.requests)
        openai_server.enqueue(tool_call_reply(*payload) if kind == "native" else content_reply(payload),
                              content_reply("I am done."))
        started = time.monotonic()
        record = _openai_trial(monkeypatch, tmp_path / name, max_iterations=3)
        assert record.outcome == "planner_failure", (name, record.error)
        assert record.llm_calls == len(openai_server.requests) - before >= 1 and record.cost_usd > 0, name
        assert time.monotonic() - started < 30, name
        for line in Path(record.trajectory).read_text(encoding="utf-8").splitlines():
            json.loads(line)


def test_a_lats_judge_reply_of_spaces_is_read_in_linear_time(monkeypatch, tmp_path, openai_server):
    from fake_openai_server import Step

    openai_server.default = Step(choices=[{"content": "score" + " " * 40_000}])
    started = time.monotonic()
    record = _openai_trial(monkeypatch, tmp_path, planner="lats", max_iterations=2, knobs={"expansion_k": 1})
    assert record.outcome == "planner_failure", record.error
    assert record.llm_calls >= 2 and time.monotonic() - started < 60
    judged = [json.loads(line) for line in Path(record.trajectory).read_text().splitlines()
              if '"judge_score"' in line]
    assert judged and all(step["scored"] is False for step in judged)


def test_an_infrastructure_error_keeps_the_calls_tokens_and_cost_spent(monkeypatch, tmp_path, openai_server):
    from fake_openai_server import content_reply, error

    malformed = content_reply('{"tool_name": "read_data", "tool_args": {"bindings": ["x"]}}')   # the search goes on
    openai_server.enqueue(malformed, malformed, error(500))
    record = _openai_trial(monkeypatch, tmp_path, max_iterations=5)
    assert record.outcome == "infra_error", record.error
    assert record.llm_calls == 2 and record.tokens_in == 20 and record.cost_usd > 0


@pytest.mark.parametrize("kind", ["no_properties", "nan", "a_list"])
def test_a_malformed_call_schema_from_the_worker_is_the_trials_failure(monkeypatch, tmp_path, hostile_tools,
                                                                      openai_server, kind):
    """Code in the worker answers the next call-schema request with a schema the OpenAI backend cannot read
    (KeyError in arguments_by_tool) or encode (NaN): the trial's own failure, checked on the trusted side."""
    from fake_openai_server import tool_call_reply

    openai_server.enqueue(tool_call_reply("poison_call_schema", {"func_kwargs": {"kind": kind}, "output": "p"}))
    record = _openai_trial(monkeypatch, tmp_path, max_iterations=3, constrained_calls=True)
    assert record.outcome == "planner_failure", record.error
    assert "malformed call schema" in record.stop_reason and record.llm_calls == 1 and record.cost_usd > 0


def test_empty_directories_count_against_the_quota_and_go_with_the_trial(monkeypatch, tmp_path, hostile_tools):
    monkeypatch.setenv(limits.SANDBOX_QUOTA_ENV, "16M")
    record, _ = scripted_trial(monkeypatch, tmp_path, [call("make_directories", output="d", count=20_000)])
    assert record.outcome == "planner_failure", record.error
    assert "over its quota" in record.stop_reason
    sandbox = next((tmp_path / "sandboxes").iterdir())
    assert list(sandbox.iterdir()) == []
