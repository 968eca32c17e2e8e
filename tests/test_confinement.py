"""The worker/grader split (issues 13, 20): with the expression language bypassed, a trial's tool worker
still cannot read the held-out labels or write outside its sandbox; forged pickles are refused;
tampered labels are noticed; the trial's memory budget holds across calls; a native library that
turns our time-limit alarm into KeyboardInterrupt ends one call, not the session.

"Bypassed" means: tests register tools of their own (plain Python, no expression language) and run
them inside the confined worker through the same runner and grants a trial uses.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

import mltb_core
import mltb_core.toolkit.tools  # noqa: F401  (registers the toolset)
from mltb_core.toolkit import limits
from mltb_core.runner.confine import landlock_abi
from mltb_core.bench.grading import grade_submission
from mltb_core.toolkit.registry import REGISTRY, ToolContext, execute, make_set_tool
from mltb_core.stages.rewards import StageContext
from mltb_core.toolkit.scratchpad import Scratchpad
from mltb_core.bench.splits import prepare_split
from mltb_core.bench.tasks import get_task
from mltb_core.runner.solve import ConfinementError, check_grants, prepare_agent_data, solver_paths

sys.path.insert(0, str(Path(__file__).parent))
from scripted import call, scripted_trial  # noqa: E402
from confined_child import run_confined  # noqa: E402

TASK = "spaceship-titanic"
needs_landlock = pytest.mark.skipif(not landlock_abi()[0], reason=f"no Landlock here: {landlock_abi()[1]}")


def _attempt(action) -> str:
    try:
        action()
        return "allowed"
    except PermissionError:
        return "denied"
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"


@pytest.fixture(scope="module")
def split():
    return prepare_split(get_task(TASK), seed=0)


@needs_landlock
def test_confined_solver_reads_agent_data_and_writes_only_its_sandbox(tmp_path, split):
    data_dir = prepare_agent_data(split, tmp_path)
    sandbox, scratch, other = (tmp_path / "sandboxes" / name for name in ("mine", "mine.tmp", "other"))
    for directory in (sandbox, scratch, other):
        directory.mkdir(parents=True)
    (other / "submission.csv").write_text("theirs")
    read_only, read_write = solver_paths(data_dir, sandbox, scratch)

    def probe(status):
        return {
            "status": status.label,
            "read labels": _attempt(lambda: Path(split.labels_path).read_bytes()),
            "list split dir": _attempt(lambda: os.listdir(split.dir)),
            "read raw data": _attempt(lambda: next(Path(mltb_core.bench.fixtures.FIXTURES, "data", TASK).iterdir()).read_bytes()),
            "read train": _attempt(lambda: (data_dir / "train.csv").read_bytes()),
            "read test": _attempt(lambda: (data_dir / "test.csv").read_bytes()),
            "write sandbox": _attempt(lambda: (sandbox / "m.pkl").write_bytes(b"x")),
            "write /tmp": _attempt(lambda: Path("/tmp/mltb-confine-probe").write_text("x")),
            "write run dir": _attempt(lambda: (tmp_path / "results.jsonl").write_text("x")),
            "read other sandbox": _attempt(lambda: (other / "submission.csv").read_text()),
            "write other sandbox": _attempt(lambda: (other / "submission.csv").write_text("forged")),
            "write agent data": _attempt(lambda: (data_dir / "test.csv").write_text("x")),
        }

    child = run_confined(probe, read_only=read_only, read_write=read_write)
    seen = child.payload["result"]
    assert seen == {"status": f"landlock-abi{landlock_abi()[0]}", "read labels": "denied",
                    "list split dir": "denied", "read raw data": "denied", "read train": "allowed",
                    "read test": "allowed", "write sandbox": "allowed", "write /tmp": "denied",
                    "write run dir": "denied", "read other sandbox": "denied", "write other sandbox": "denied",
                    "write agent data": "denied"}
    assert (other / "submission.csv").read_text() == "theirs"
    assert not (tmp_path / "results.jsonl").exists()


def test_without_landlock_a_run_fails_closed_unless_the_user_opts_in(monkeypatch):
    import mltb_core.runner.confine as confine_module
    from mltb_core.runner.solve import check_confinement

    monkeypatch.setattr(confine_module, "landlock_abi", lambda: (0, "no Landlock on this test's kernel"))
    with pytest.raises(ConfinementError, match="--unconfined"):
        check_confinement(False)
    assert check_confinement(True) == "none: no Landlock on this test's kernel (unconfined: opted in)"


def test_grants_that_would_expose_the_labels_are_refused(tmp_path, split):
    with pytest.raises(ConfinementError, match="test_labels.csv"):
        check_grants([str(split.dir.parent)], [split.labels_path])


# ------------------------------------------------------------------------- a trial with hostile tools
def _scripted_trial(monkeypatch, tmp_path, script, **config):
    return scripted_trial(monkeypatch, tmp_path, script, **config)


@needs_landlock
def test_trial_tools_cannot_reach_the_labels(monkeypatch, tmp_path, split, hostile_tools):
    before = split.labels_path.read_bytes()
    script = [call("probe_read_file", output="x", filepath=str(split.labels_path)),
              call("probe_write_file", output="y", filepath=str(split.labels_path)),
              call("probe_read_file", output="z", filepath="/work/.." + str(split.labels_path)),
              call("read_data", output="train", filepath="train.csv")]
    record, results = _scripted_trial(monkeypatch, tmp_path, script)
    assert record.outcome == "planner_failure" and record.extra["confinement"].startswith("landlock-abi")
    assert [r["ok"] for r in results] == [False, False, False, True]
    assert all("Permission denied" in r["content_preview"] for r in results[:3]), results
    assert split.labels_path.read_bytes() == before
    assert record.stage_reached == 1   # train loaded: the solver works otherwise


@needs_landlock
def test_trial_memory_budget_holds_across_calls(monkeypatch, tmp_path, hostile_tools):
    monkeypatch.setenv(limits.MEMORY_LIMIT_ENV, "3G")
    script = [call("hold_memory", output=f"block{i}", mebibytes=1024) for i in range(12)]
    record, results = _scripted_trial(monkeypatch, tmp_path, script)
    assert record.outcome == "planner_failure" and record.tool_calls == 12
    ok = [r["ok"] for r in results]
    assert ok[0] and 1 <= sum(ok) <= 3, ok        # at most 3 GiB kept, then every call is refused
    assert all("ran out of memory (the trial's memory budget is 3 GiB)" in r["content_preview"]
               for r in results if not r["ok"])


@needs_landlock
def test_replay_runs_confined_with_the_trial_limits(tmp_path, split, hostile_tools, monkeypatch):
    from mltb_core.runner.expert import run_calls

    monkeypatch.setenv(limits.MEMORY_LIMIT_ENV, "2G")
    calls = [call("probe_read_file", output="x", filepath=str(split.labels_path)),
             call("hold_memory", output="a", mebibytes=1536), call("hold_memory", output="b", mebibytes=1536),
             call("read_data", output="train", filepath="train.csv")]
    result = run_calls(get_task(TASK), calls, split=split, out_dir=tmp_path)
    assert result.extra["confinement"].startswith("landlock-abi")
    assert [c.ok for c in result.calls] == [False, True, False, True]
    assert "Permission denied" in result.calls[0].message and "ran out of memory" in result.calls[2].message


def test_stage_context_needs_no_labels(tmp_path, split):
    data_dir = prepare_agent_data(split, tmp_path)
    assert sorted(p.name for p in data_dir.iterdir() if not p.name.startswith(".")) == ["test.csv", "train.csv"]
    ctx = StageContext.from_agent_data(get_task(TASK), data_dir)
    labels = pd.read_csv(split.labels_path)
    assert ctx.n_test == len(labels) and list(ctx.held_out_ids) == list(labels["PassengerId"])
    assert not any(isinstance(v, pd.DataFrame) for v in vars(ctx).values())


# ------------------------------------------------------------------------- pickles by content
def test_forged_pickle_is_refused(tmp_path):
    from sklearn.linear_model import LogisticRegression

    ctx = ToolContext(sandbox=tmp_path)
    pad = Scratchpad()
    pad.set("model", LogisticRegression().fit([[0.0], [1.0]], [0, 1]))
    saved = execute(call("save_model", {"model": "model"}, filepath="m.pkl"), pad, ctx)
    assert saved.ok, saved.message
    loaded = execute(call("load_model", output="again", filepath="m.pkl"), pad, ctx)
    assert loaded.ok and pad.get("again").predict([[1.0]])[0] == 1
    marker = tmp_path / "pwned"
    forged = (b"cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR.")
    (tmp_path / "m.pkl").write_bytes(forged)
    refused = execute(call("load_model", output="evil", filepath="m.pkl"), pad, ctx)
    assert not refused.ok and "refusing to unpickle 'm.pkl'" in refused.message
    assert not marker.exists() and "evil" not in pad
    assert str(tmp_path) not in refused.message


def test_path_errors_never_show_the_sandbox_location(tmp_path):
    ctx = ToolContext(sandbox=tmp_path / "box", data_dir=tmp_path / "data")
    (tmp_path / "data").mkdir()
    pad = Scratchpad()
    for attempt in (call("read_data", output="x", filepath="/etc/passwd"),
                    call("read_data", output="x", filepath="missing.csv"),
                    call("load_model", output="x", filepath="../m.pkl")):
        result = execute(attempt, pad, ctx)
        assert not result.ok and str(tmp_path) not in result.message, result.message


# ------------------------------------------------------------------------- labels by hash
def test_tampered_labels_are_detected_and_the_split_rebuilt(tmp_path, capfd):
    task = get_task(TASK)
    split = prepare_split(task, seed=0, cache_dir=tmp_path)
    all_true = pd.DataFrame({task.id_column: pd.read_csv(split.test_path)[task.id_column], task.target: True})
    honest = grade_submission(task, all_true, split)
    labels = pd.read_csv(split.labels_path)
    labels[task.target] = True
    labels.to_csv(split.labels_path, index=False)
    capfd.readouterr()
    regraded = grade_submission(task, all_true, split)
    assert "does not match its recorded SHA-256; rebuilding" in capfd.readouterr().err
    assert regraded.score == honest.score < 1.0
    labels.to_csv(split.labels_path, index=False)
    again = prepare_split(task, seed=0, cache_dir=tmp_path)   # a reuse checks the hash too
    assert "rebuilding" in capfd.readouterr().err
    assert grade_submission(task, all_true, again).score == honest.score


# ------------------------------------------------------------------------- BaseException from native code
def _interrupting_tool(seconds: float) -> int:
    """What CatBoost does with our alarm: catch it and raise KeyboardInterrupt instead."""
    try:
        time.sleep(seconds)
    except BaseException:  # noqa: BLE001  (the alarm's exception, whatever it is)
        raise KeyboardInterrupt from None
    return 1


def test_keyboard_interrupt_after_our_alarm_is_the_calls_timeout():
    with pytest.raises(limits.ToolTimeout, match="exceeded its 0.2 s time limit"):
        limits.call_with_time_limit(_interrupting_tool, {"seconds": 5}, 0.2, label="fit")


def test_keyboard_interrupt_without_our_alarm_still_stops():
    def interrupt():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        limits.call_with_time_limit(interrupt, {}, 5.0, label="fit")


def test_system_exit_in_a_tool_is_an_error_for_the_model(tmp_path, hostile_tools):
    with REGISTRY.scoped():
        @make_set_tool(roles=("loading",))
        def exits() -> int:
            """Calls sys.exit."""
            raise SystemExit(3)

        result = execute(call("exits", output="x"), Scratchpad(), ToolContext(sandbox=tmp_path))
    assert not result.ok and "SystemExit" in result.message


SESSION = """
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, {tests!r})
import mltb_core.llm as llm_module
from mltb_core.config import TrialConfig
from mltb_core.toolkit.registry import make_set_tool
from mltb_core.bench.tasks import get_task
from mltb_core.runner.trial import run_trial
from scripted import ScriptedBackend, call


@make_set_tool(roles=("modeling",))
def raw_catboost_fit(rows: int) -> object:
    \"\"\"A plain CatBoost fit (CatBoost turns a signal handler's exception into KeyboardInterrupt).\"\"\"
    import catboost

    X = np.random.default_rng(0).normal(size=(rows, 40))
    model = catboost.CatBoostClassifier(iterations=100000, thread_count=1, verbose=0, allow_writing_files=False)
    return model.fit(X, (X[:, 0] > 0).astype(int))


def test_catboost_past_its_time_limit_in_a_trial(tmp_path, monkeypatch):
    script = [call("raw_catboost_fit", output="m", rows=5000)]
    monkeypatch.setattr(llm_module, "make_backend", lambda *a, **k: ScriptedBackend(script))
    config = TrialConfig(planner="react", model="scripted", llm_cache=False, toolset="extended", max_iterations=2, tool_time_limit=0.5)
    record = run_trial(get_task("spaceship-titanic"), config, tmp_path)
    assert record.outcome == "planner_failure", record.error
    steps = [json.loads(line) for line in Path(record.trajectory).read_text().splitlines()]
    results = [r for s in steps if s["step_type"] == "tool_execution_completion" for r in s["tool_results"]]
    assert "exceeded its 0.5 s time limit" in results[0]["content_preview"], results


def test_session_goes_on():
    assert True
"""


def test_catboost_timeout_does_not_end_the_session(tmp_path):
    """Issue 13 point 5: 4 of 4 sessions died here. The second test must run and pass."""
    pytest.importorskip("catboost")
    (tmp_path / "test_session.py").write_text(SESSION.format(tests=str(Path(__file__).parent)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(mltb_core.__file__).parent.parent),
                                                         os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
                           str(tmp_path / "test_session.py")], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300)
    assert "2 passed" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]

