"""SIGKILL the whole run (process group) half-way, then ``--resume``: every item ends with exactly one
record, and results.jsonl holds only whole lines (a torn last line would be skipped, never doubled)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from mltb_core.analysis.resultsfile import read_records
from mltb_core.analysis.results import latest_records
from tiny_model import needs_tiny_model

SUITE = '''
def test_challenge(mltb_case, mltb_split, mltb_record, mltb_check):
    mltb_check(mltb_record)
'''
TRIALS = 5


def pytest_command(run_dir: Path, *extra: str, budget: str = "--max-iterations=3", trials: int = TRIALS) -> list[str]:
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
            "--task=spaceship-titanic", "--model=sim", "--planner=react", f"--trials={trials}",
            budget, "--no-llm-cache", f"--mltb-out={run_dir}", *extra]


def record_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_sigkill_half_way_then_resume_gives_one_record_per_item(tmp_path):
    (tmp_path / "test_challenges.py").write_text(SUITE)
    run_dir = tmp_path / "run"
    results = run_dir / "results.jsonl"
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    run = subprocess.Popen(pytest_command(run_dir), cwd=tmp_path, env=env, start_new_session=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 40
        while not record_lines(results) and time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.05)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
        run.wait(timeout=10)
    killed_with = len(record_lines(results))
    assert 1 <= killed_with < TRIALS, "the run was not killed half-way"

    resumed = subprocess.run(pytest_command(run_dir, "--resume"), cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=60)
    assert resumed.returncode in (0, 1), resumed.stdout[-2000:] + resumed.stderr[-2000:]
    assert f"{killed_with} deselected" in resumed.stdout      # recorded items are not rerun

    lines = record_lines(results)
    assert all(json.loads(line) for line in lines)                 # only whole lines
    trials = sorted(json.loads(line)["trial"] for line in lines)
    assert trials == list(range(TRIALS))                             # exactly one record per item
    assert len(latest_records(read_records(results))) == TRIALS


# ---- an interrupted trial continues from its last LLM call (issue 59) ---------------------------------------
RECORD_FIELDS = ("outcome", "valid", "score", "stage_reached", "stop_reason", "stop_kind", "llm_calls", "tokens_in",
                 "tokens_out", "cost_usd", "tool_calls", "tree_nodes")
INTERRUPT_CONFTEST = '''
import os

from mltb_core.llm.sim import SimPolicy

_generate = SimPolicy._generate
_answered = [0]


def _interrupting(self, *args, **kwargs):   # Ctrl-C while the model is asked for call k + 1
    _answered[0] += 1
    if _answered[0] > int(os.environ.get("INTERRUPT_AFTER_CALLS") or 10**9):
        raise KeyboardInterrupt
    return _generate(self, *args, **kwargs)


SimPolicy._generate = _interrupting
'''


def sim_config(planner: str = "mcts_shaped", calls: int = 12):
    from mltb_core.config import TrialConfig

    return TrialConfig(planner=planner, model="sim", seed=3, max_llm_calls=calls, llm_cache=False)


def same_trial_fields(record) -> dict:
    return {name: getattr(record, name) for name in RECORD_FIELDS}


def llm_steps(trajectory: Path) -> list[dict]:
    """The trajectory's LLM calls as the model answered them (when and how long aside)."""
    steps = [json.loads(line) for line in trajectory.read_text().splitlines()]
    return [{**{k: v for k, v in s.items() if k not in ("step_number", "timestamp")},
             "usage": {**s["usage"], "seconds": None}} for s in steps if s["step_type"] == "llm_call"]


def interrupt_after(monkeypatch, calls: int) -> list[int]:
    """Ctrl-C (a KeyboardInterrupt) when the sim policy is asked for call ``calls + 1``; returns the live-call count."""
    from mltb_core.llm.sim import SimPolicy

    generate, asked = SimPolicy._generate, [0]

    def interrupting(self, *args, **kwargs):
        asked[0] += 1
        if asked[0] > calls:
            raise KeyboardInterrupt
        return generate(self, *args, **kwargs)
    monkeypatch.setattr(SimPolicy, "_generate", interrupting)
    return asked


def test_an_interrupted_trial_resumes_from_its_last_call_to_the_uninterrupted_record(tmp_path, monkeypatch):
    import pytest

    from mltb_core.analysis.runstore import TrialFiles
    from mltb_core.bench.tasks import get_task
    from mltb_core.runner.trial import run_trial

    task, config = get_task("spaceship-titanic"), sim_config()
    whole = run_trial(task, config, tmp_path / "whole")
    assert whole.llm_calls == 12 and whole.extra.get("resumed") is None   # nothing to resume from: no note

    with monkeypatch.context() as patch:
        interrupt_after(patch, 5)
        with pytest.raises(KeyboardInterrupt):
            run_trial(task, config, tmp_path / "cut")
    checkpoint = TrialFiles(tmp_path / "cut", whole.case_id).checkpoint
    kept = [json.loads(line) for line in checkpoint.read_text().splitlines()]
    assert len(kept) == 5
    live = interrupt_after(monkeypatch, 10**9)
    resumed = run_trial(task, config, tmp_path / "cut")
    assert resumed.wall_seconds > kept[-1]["elapsed"]       # the earlier run's seconds count too
    assert live[0] == 12 - 5                                  # the model was asked only for the calls not kept
    assert same_trial_fields(resumed) == same_trial_fields(whole)
    assert llm_steps(Path(resumed.trajectory)) == llm_steps(Path(whole.trajectory))
    assert resumed.extra["resumed"] == {"kept_requests": 5, "kept_llm_calls": 5, "replayed_requests": 5,
                                        "replayed_llm_calls": 5, "replay_stopped": "every kept request replayed"}
    steps = [json.loads(line) for line in Path(resumed.trajectory).read_text().splitlines()]
    ended = [s for s in steps if s["step_type"] == "replay_ended"]
    assert len(ended) == 1 and ended[0]["replayed_requests"] == 5
    from mltb_core.stages.events import read_events
    assert read_events(resumed.trajectory).malformed == []     # every reader takes the resumed trajectory whole
    assert steps[0]["resumed_from"] == {"kept_requests": 5, "kept_llm_calls": 5, "damaged": None}


def test_ctrl_c_keeps_the_trials_calls_and_resume_continues_from_the_last(tmp_path):
    """The main job's path: pytest, Ctrl-C after 4 of 8 calls, the line says 4 calls are kept, `--resume` replays
    them and gives the uninterrupted run's record and calls."""
    (tmp_path / "test_challenges.py").write_text(SUITE)
    (tmp_path / "conftest.py").write_text(INTERRUPT_CONFTEST)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}

    def run(run_dir: Path, *extra: str, interrupt: int | None = None) -> subprocess.CompletedProcess:
        command = pytest_command(run_dir, "-p", "no:xdist", *extra, budget="--max-llm-calls=8", trials=1)
        return subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                              env={**env, "INTERRUPT_AFTER_CALLS": str(interrupt or "")})

    whole = run(tmp_path / "whole")
    assert whole.returncode in (0, 1), whole.stdout[-2000:]
    cut = run(tmp_path / "cut", interrupt=4)
    assert cut.returncode == 2, cut.stdout[-2000:]
    assert ("mltb: interrupted: 0 of 1 trials recorded, 4 LLM calls of the unfinished trial kept; continue with "
            "`--resume`") in cut.stdout, cut.stdout[-2000:]
    resumed = run(tmp_path / "cut", "--resume")
    assert resumed.returncode in (0, 1), resumed.stdout[-2000:]
    [expected] = read_records(tmp_path / "whole" / "results.jsonl")
    [record] = read_records(tmp_path / "cut" / "results.jsonl")
    assert same_trial_fields(record) == same_trial_fields(expected)
    assert record.extra["resumed"]["replayed_llm_calls"] == 4
    assert record.outcome == "planner_failure"                      # seed 0 at 8 calls: the failure says it resumed
    assert "resumed: 4 LLM calls replayed from the interrupted run (every kept request replayed)" in resumed.stdout
    trajectory = lambda run_dir, r: run_dir / r.trajectory   # noqa: E731 - relative to the run directory
    assert llm_steps(trajectory(tmp_path / "cut", record)) == llm_steps(trajectory(tmp_path / "whole", expected))
    assert not list((tmp_path / "cut").glob("work/*/checkpoints/*.jsonl"))   # a recorded trial keeps no checkpoint


@needs_tiny_model
def test_a_resumed_trial_on_the_tiny_model_sends_the_server_none_of_the_recorded_calls(tmp_path, monkeypatch):
    """The real llama.cpp server (local:smollm2): interrupted at its third call, the trial resumes with the first
    two answered from the checkpoint; the server's request log shows only the calls made live."""
    import pytest

    import mltb_core.llm as llm_module
    from mltb_core.bench.tasks import get_task
    from mltb_core.config import TrialConfig
    from mltb_core.llm.local.backend import release_process_servers, request_log
    from mltb_core.llm.openai_backend import OpenAIBackend
    from mltb_core.runner.trial import run_trial

    built = []
    make_backend = llm_module.make_backend
    monkeypatch.setattr(llm_module, "make_backend", lambda *a, **k: built.append(make_backend(*a, **k)) or built[-1])
    generate, asked = OpenAIBackend._generate, [0]

    def interrupting(self, *args, **kwargs):
        asked[0] += 1
        if asked[0] == 3:
            raise KeyboardInterrupt
        return generate(self, *args, **kwargs)

    task = get_task("spaceship-titanic")
    config = TrialConfig(planner="react", model="local:smollm2", max_llm_calls=4, llm_cache=False)
    try:
        with monkeypatch.context() as patch:
            patch.setattr(OpenAIBackend, "_generate", interrupting)
            with pytest.raises(KeyboardInterrupt):
                run_trial(task, config, tmp_path)
        log = built[0].server.log_path
        served = len(request_log(log))
        resumed = run_trial(task, config, tmp_path)
        live = request_log(log)[served:]
    finally:
        release_process_servers()
    assert built[1].server.log_path == log                  # the same server answered both runs
    assert resumed.outcome in ("valid", "planner_failure"), resumed.error
    assert resumed.extra["resumed"]["replayed_llm_calls"] == 2
    assert resumed.llm_calls >= 3 and len(live) == resumed.llm_calls - 2
    calls = [json.loads(line) for line in Path(resumed.trajectory).read_text().splitlines()]
    assert sum(s["step_type"] == "llm_call" for s in calls) == resumed.llm_calls


def test_a_checkpoint_replays_answers_and_context_overflows_counted_as_charged(tmp_path):
    """The unit under the trial: what the model answered (a reply, or a refusal of a request longer than its
    window) is replayed as it was, charged as it was; the first request not recorded goes to the model."""
    import pytest

    from mltb_core.llm.base import Candidate, ContextOverflowError, LLMBackend, LLMResponse, Usage
    from mltb_core.planners.trajectory import TrajectoryWriter
    from mltb_core.runner.checkpoint import ReplayingBackend, TrialCheckpoint

    class Scripted(LLMBackend):
        def __init__(self):
            super().__init__("scripted")
            self.asked = 0

        def _generate(self, messages, tools, n, temperature, seed):
            self.asked += 1
            if len(messages) > 1:
                raise ContextOverflowError("the request is longer than the window")
            return LLMResponse([Candidate(f"reply {self.asked}")], Usage(prompt_tokens=50, completion_tokens=5, calls=1,
                                                                          cost_usd=0.25))

    short, long_ = [{"role": "user", "content": "a"}], [{"role": "user", "content": "a"}] * 2
    path = tmp_path / "checkpoint.jsonl"
    first = ReplayingBackend(Scripted(), TrialCheckpoint(path), TrajectoryWriter(None))
    assert first.complete(short, []).candidates[0].text == "reply 1"
    with pytest.raises(ContextOverflowError):
        first.complete(long_, [])
    first.close()

    model = Scripted()
    again = ReplayingBackend(model, TrialCheckpoint(path), TrajectoryWriter(tmp_path / "trajectory.jsonl"))
    assert again.complete(short, []).candidates[0].text == "reply 1"
    with pytest.raises(ContextOverflowError, match="longer than the window"):
        again.complete(long_, [])
    assert model.asked == 0                                        # both answered from the record
    assert again.complete([{"role": "user", "content": "b"}], []).candidates[0].text == "reply 1"   # live
    again.close()
    assert model.asked == 1
    assert (again.usage.calls, again.usage.prompt_tokens, again.usage.cost_usd) == (2, 100, 0.5)
    assert again.checkpoint.summary() == {"kept_requests": 2, "kept_llm_calls": 1, "replayed_requests": 2,
                                          "replayed_llm_calls": 1, "replay_stopped": "every kept request replayed"}
    ended = [json.loads(line) for line in (tmp_path / "trajectory.jsonl").read_text().splitlines()]
    assert [s["step_type"] for s in ended] == ["replay_ended"]
    assert TrialCheckpoint(path).kept == 3                         # the live answer joined the record
