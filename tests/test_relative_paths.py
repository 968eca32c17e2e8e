"""Relative paths and a worker that cannot start (issue 59).

``mltb run --out relrun`` once recorded every trial as the model's failure ("the worker ended while answering
start [model_fault]", exit 0): the run directory reached the tool worker, which starts in ``/``, as a relative
path. Every path setting and path variable is now made absolute where it is read (mltb_core.config,
mltb_core.environment), and a worker that ends before its start report is an infrastructure error with its
cause, never a model fault. Real trials (the sim policy, one cheap task) in a real confined worker.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

import mltb_core
from mltb_core.config import SETTINGS_BY_NAME, resolve_settings, settings_for
from mltb_core.environment import absolute_path, absolute_paths, read
from mltb_core.runner.confine import landlock_abi

ROOT = Path(mltb_core.__file__).resolve().parents[1]
TASK = "spaceship-titanic"
needs_landlock = pytest.mark.skipif(not landlock_abi()[0], reason=f"no Landlock here: {landlock_abi()[1]}")
pytest_plugins = ["pytester"]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


# ---- the settings and variables resolve their paths once -----------------------------------------------
def test_path_settings_are_absolute_from_every_source(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    settings = [SETTINGS_BY_NAME[name] for name in ("out", "tasks_dir", "compare")]
    cli = {"out": "relrun", "tasks_dir": None, "compare": None}
    env = {"tasks_dir": os.pathsep.join(["specs", "~/more"])}
    ini = {"mltb_compare": "base/line.json"}
    values, sources = resolve_settings(settings, cli, env, ini.get, ini_dir=tmp_path / "project")
    assert values["out"] == str(tmp_path / "relrun") and sources["out"] == "cli"
    assert values["tasks_dir"].split(os.pathsep) == [str(tmp_path / "specs"), os.path.expanduser("~/more")]
    # an ini file's path is read from the ini file's directory, as pytest reads its own
    assert values["compare"] == str(tmp_path / "project" / "base" / "line.json") and sources["compare"] == "ini"
    # an absolute path stays itself; a setting that is not a path is left alone
    assert SETTINGS_BY_NAME["out"].parse("/runs/a", "--out") == "/runs/a"
    assert SETTINGS_BY_NAME["task"].parse("spaceship-titanic", "--task") == "spaceship-titanic"


def test_path_variables_read_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLTB_CACHE", "cache")
    monkeypatch.setenv("MLTB_TASKS_DIR", os.pathsep.join(["a", "", "/b"]))
    monkeypatch.setenv("MLTB_OUT", "runs/x")           # a setting's own variable (declared by the settings table)
    monkeypatch.setenv("MLTB_LLM_TIMEOUT", "30")       # not a path: as set
    assert read("MLTB_CACHE") == str(tmp_path / "cache")
    assert read("MLTB_TASKS_DIR") == os.pathsep.join([str(tmp_path / "a"), "/b"])
    assert read("MLTB_OUT") == str(tmp_path / "runs" / "x")
    assert read("MLTB_LLM_TIMEOUT") == "30"
    assert absolute_path("x/../y", "/base") == "/base/y" and absolute_paths("", "/base") == ""
    # every path setting of both front ends is declared as one
    for front_end in ("pytest", "run"):
        for setting in settings_for(front_end):
            if setting.name in ("out", "tasks_dir", "save_baseline", "compare"):
                assert setting.path is not None, setting.name


def test_a_worker_is_never_handed_a_relative_path(tmp_path):
    from mltb_core.runner.worker import WorkerInit

    with pytest.raises(ValueError, match="WorkerInit.sandbox holds a relative path 'relrun/sandbox'"):
        WorkerInit(task=None, toolset="paper", data_dir=str(tmp_path), sandbox="relrun/sandbox", scratch=str(tmp_path),
                   read_only=[], read_write=[], max_features=10, threads=1, seed=0, tool_time_limit=None,
                   memory_budget=None, disk_quota=None)


# ---- the command, from another directory ----------------------------------------------------------
@needs_landlock
def test_mltb_run_with_a_relative_out_from_another_directory_is_valid(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run([sys.executable, "-m", "mltb_core.cli", "run", "--model", "sim", "--task", TASK,
                           "--planner", "react", "--out", "relrun", "--json"],
                          cwd=elsewhere, env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    assert record["outcome"] == "valid", (record["stop_reason"], record["error"])
    assert record["llm_calls"] > 0 and record["tool_calls"] > 0
    # the run directory is where the user named it: relative to the directory the command ran in
    assert Path(record["results"]) == elsewhere / "relrun" / "results.jsonl"
    lines = (elsewhere / "relrun" / "results.jsonl").read_text().splitlines()
    assert [json.loads(line)["outcome"] for line in lines] == ["valid"]


@needs_landlock
def test_pytest_with_a_relative_run_directory_from_another_directory_is_valid(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", _env()["PYTHONPATH"])
    pytester.makepyfile(test_challenges="def test_challenge(mltb_case, mltb_record, mltb_check):\n"
                                        "    mltb_check(mltb_record)\n")
    (pytester.path / "specs").mkdir()   # a relative --tasks-dir too (no task of its own: the bundled task runs)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", f"--task={TASK}", "--model=sim",
                                           "--planner=react", "--mltb-out=relrun", "--tasks-dir=specs")
    assert result.ret == 0, result.stdout.str()
    records = [json.loads(line) for line in (pytester.path / "relrun" / "results.jsonl").read_text().splitlines()]
    assert [r["outcome"] for r in records] == ["valid"], records


# ---- a worker that cannot start ----------------------------------------------------------------------------
def _init(tmp_path, task, sandbox: Path):
    from mltb_core.bench.splits import prepare_split
    from mltb_core.runner.solve import prepare_agent_data, solver_paths
    from mltb_core.runner.worker import WorkerInit

    split = prepare_split(task, seed=0)
    data_dir = prepare_agent_data(split, tmp_path)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    read_only, read_write = solver_paths(data_dir, sandbox, scratch)
    return WorkerInit(task=task, toolset="paper", data_dir=str(data_dir), sandbox=str(sandbox), scratch=str(scratch),
                      read_only=read_only, read_write=read_write, max_features=100, threads=1, seed=0,
                      tool_time_limit=30.0, memory_budget=None, disk_quota=None)


class NotImportableThere:
    """Defined in this test module, which the worker cannot import: unpickling its trial fails there."""


def test_a_worker_that_fails_to_start_is_an_infrastructure_error_with_its_cause(tmp_path):
    from mltb_core.bench.tasks import get_task
    from mltb_core.stages.workspace import ModelFault
    from mltb_core.runner.worker import WorkerStartFailed, WorkerWorkspace

    # its setup fails (the sandbox does not exist): the start report says why
    with pytest.raises(WorkerStartFailed) as failed:
        WorkerWorkspace(_init(tmp_path, get_task(TASK), tmp_path / "missing-sandbox"))
    assert "the worker could not start: FileNotFoundError" in str(failed.value)
    assert "missing-sandbox" in str(failed.value)
    assert not isinstance(failed.value, ModelFault)
    # it ends before any start report (its trial does not unpickle there): the cause is the end of its stderr
    (tmp_path / "sandbox").mkdir()
    init = replace(_init(tmp_path / "b", get_task(TASK), tmp_path / "sandbox"), task=NotImportableThere())
    with pytest.raises(WorkerStartFailed, match="the worker ended while answering start; its stderr ends: "
                                                "ModuleNotFoundError: No module named 'test_relative_paths'"):
        WorkerWorkspace(init)


@needs_landlock
def test_a_trial_whose_worker_cannot_start_is_an_infra_error_not_a_model_fault(tmp_path, monkeypatch):
    from mltb_core.analysis.records import Outcome
    from mltb_core.bench.stops import StopKind
    from mltb_core.bench.tasks import get_task
    from mltb_core.config import TrialConfig
    from mltb_core.runner import solve
    from mltb_core.runner.trial import run_trial

    real = solve.fresh_dirs
    # the sandbox is not made (the scratch directory is): the real worker cannot enter it
    monkeypatch.setattr(solve, "fresh_dirs", lambda *dirs: real(*[d for d in dirs if d.name.endswith(".tmp")]))
    record = run_trial(get_task(TASK), TrialConfig(planner="react", model="sim", llm_cache=False), tmp_path / "run")
    assert record.outcome == Outcome.INFRA_ERROR and record.stop_kind == StopKind.ERROR
    assert record.error.startswith("WorkerStartFailed: the worker could not start: FileNotFoundError"), record.error
    assert record.llm_calls == 0 and record.tool_calls == 0
