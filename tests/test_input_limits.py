"""Option ranges, task slugs, spec shadowing and MLTB_* variables (issue 13, point 6).

Every bad value is a usage error naming it: ``mltb`` exits 2 with one ``mltb: error:`` line, pytest
exits 4 with one line and no traceback, and nothing runs or is written.
"""
from __future__ import annotations

import shutil
from dataclasses import fields
from pathlib import Path

import pytest

from mltb_core import cli
from mltb_core.config import FIELD_RANGES, RUN_RANGES, OptionValueError, TrialConfig, option_range
from mltb_core.bench.tasks import TASKS_DIR, TaskSpecError, get_task, load_tasks, UnknownTaskError
from pytest_mltb.options import pytest_options

pytest_plugins = ["pytester"]

TASK = "spaceship-titanic"
SUITE = '''
def test_challenge(mltb_case, mltb_split, mltb_record, mltb_check):
    mltb_check(mltb_record)
'''


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def assert_cli_usage_error(code: int, err: str, *words: str) -> None:
    assert code == cli.EXIT_USAGE, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mltb: error:"), err
    for word in words:
        assert word in err, (word, err)


def run_pytest(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    pytester.makepyfile(test_challenges=SUITE)
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", "--collect-only", f"--task={TASK}",
                                        "--model=sim", "--planner=react", *args)


def assert_pytest_usage_error(result: pytest.RunResult, *words: str) -> None:
    err = result.stderr.str()
    text = result.stdout.str() + err
    assert result.ret == pytest.ExitCode.USAGE_ERROR, text[-3000:]
    assert "Traceback" not in text and "INTERNALERROR" not in text, text[-3000:]
    assert len([line for line in err.splitlines() if line.startswith("ERROR:")]) == 1, err
    for word in words:
        assert word in err, (word, err)


# ---- the range table -------------------------------------------------------------------------------------
def test_the_range_table_covers_every_numeric_trial_config_field():
    numeric = {f.name for f in fields(TrialConfig)
               if {"int", "float"} & {word.strip() for word in str(f.type).split("|")}}
    assert numeric and numeric == set(FIELD_RANGES)


def test_every_numeric_front_end_option_has_a_range():
    # pytest options: every session-level range is an option, and a numeric default has a range
    names = {opt.name for opt in pytest_options()}
    assert set(RUN_RANGES) <= names
    assert all(option_range(opt.name) for opt in pytest_options() if isinstance(opt.default, (int, float))
               and not isinstance(opt.default, bool))
    from mltb_core.config import settings_for

    assert all(option_range(s.name) for s in settings_for("run") if isinstance(s.default, (int, float))
               and not isinstance(s.default, bool))


@pytest.mark.parametrize("field, bad", [
    ("expansion_k", 0), ("expansion_k", 21), ("expansion_k", 1_000_000), ("seed", -1), ("seed", 2**32),
    ("max_iterations", 0), ("max_iterations", -1), ("max_depth", 0), ("max_llm_calls", 0), ("max_tokens", 0),
    ("max_cost_usd", 0.0), ("max_cost_usd", -1.0), ("max_seconds", -5.0), ("exploration", -0.1),
    ("depth_penalty", -1.0), ("temperature", 2.5), ("threads", 0), ("max_features", 0), ("tool_time_limit", 0.0),
    ("rollout_depth", -1), ("subtask_depth", 0), ("subtask_iterations", 0), ("max_solutions", 0), ("trial", -1),
    ("max_iterations", 2.5), ("max_iterations", True), ("max_seconds", float("nan")), ("seed", "1"),
])
def test_trial_config_rejects_values_outside_the_range_naming_field_value_and_range(field, bad):
    with pytest.raises(OptionValueError) as caught:
        TrialConfig("react", "sim").with_(**{field: bad})   # a planner knob (expansion_k) too
    message = str(caught.value)
    assert field in message and repr(bad) in message and "expected" in message


def test_trial_config_accepts_the_edges_and_none_budgets():
    TrialConfig("react", "sim").with_(expansion_k=20, seed=2**32 - 1, temperature=2.0, exploration=0, rollout_depth=0,
                max_cost_usd=None, max_seconds=None, tool_time_limit=None, max_iterations=1)


# ---- mltb run ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("flag, value, words", [
    ("--expansion-k", "1000000", ["--expansion-k", "1000000", "from 1 to 20", "one LLM call"]),
    ("--expansion-k", "0", ["--expansion-k", "0"]),
    ("--seed", "-1", ["--seed", "-1"]),
    ("--max-iterations", "-1", ["--max-iterations", "-1", ">= 1"]),
    ("--max-seconds", "-5", ["--max-seconds", "-5", "> 0"]),
    ("--max-cost", "-1", ["--max-cost", "-1"]),
    ("--temperature", "9", ["--temperature"]),
    ("--threads", "0", ["--threads"]),
    ("--trial", "-2", ["--trial"]),
    ("--max-depth", "two", ["--max-depth", "'two'"]),
])
def test_mltb_run_rejects_out_of_range_options_before_running(capsys, tmp_path, flag, value, words):
    out = tmp_path / "run"
    code, _, err = run_cli(capsys, "run", "--task", TASK, "--planner", "react", "--model", "sim", "--out", out,
                           flag, value)
    assert_cli_usage_error(code, err, *words)
    assert not out.exists()


def test_mltb_split_rejects_a_negative_seed(capsys, tmp_path):
    code, _, err = run_cli(capsys, "split", TASK, "--out", tmp_path / "out", "--seed", "-1")
    assert_cli_usage_error(code, err, "--seed", "-1")


# ---- pytest options --------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, words", [
    (["--expansion-k=1000000"], ["--expansion-k", "1000000", "from 1 to 20"]),
    (["--expansion-k=0"], ["--expansion-k", "0"]),
    (["--seed=-1"], ["--seed", "-1"]),
    (["--max-iterations=-1"], ["--max-iterations", "-1"]),
    (["--max-seconds=-5"], ["--max-seconds", "-5"]),
    (["--max-cost=-1"], ["--max-cost", "-1"]),
    (["--run-max-cost=0"], ["--run-max-cost", "0"]),
    (["--run-max-seconds=-1"], ["--run-max-seconds"]),
    (["--infra-retries=-1"], ["--infra-retries"]),
    (["--trials=0"], ["--trials", "0"]),
])
def test_pytest_rejects_out_of_range_options_as_usage_errors(pytester, args, words):
    assert_pytest_usage_error(run_pytest(pytester, *args), *words)


def test_pytest_rejects_out_of_range_environment_options(pytester, monkeypatch):
    monkeypatch.setenv("MLTB_EXPANSION_K", "100")
    assert_pytest_usage_error(run_pytest(pytester), "MLTB_EXPANSION_K", "100")


# ---- task slugs and shadowing ------------------------------------------------------------------------------
SPEC = '''slug = "{slug}"
title = "Toy"
problem_type = "binary"
target = "y"
id_column = "id"
metric = "accuracy"
prediction = "label"
source = "bundled"
data = "labelled.csv"
summary = "A toy task."
'''


def write_spec(directory: Path, slug: str, name: str = "toy.toml") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "labelled.csv").write_text("id,x,y\n" + "".join(f"{i},{i % 7},{i % 2}\n" for i in range(40)))
    path = directory / name
    path.write_text(SPEC.format(slug=slug))
    return path


def test_builtin_slugs_are_identifiers():
    assert set(load_tasks()) == {path.stem for path in TASKS_DIR.glob("*.toml")}  # every bundled spec passes the slug rule


def test_mltb_split_of_a_path_like_slug_is_an_unknown_task_and_writes_nothing(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(capsys, "split", "../../evil", "--out", tmp_path / "out")
    assert_cli_usage_error(code, err, "unknown task", "'../../evil'")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(UnknownTaskError):
        get_task("../" + TASK)


@pytest.mark.parametrize("slug", ["../../evil", "a/b", "UPPER", "-dash", "x" * 81, ""])
def test_a_spec_whose_slug_is_not_an_identifier_is_rejected(capsys, tmp_path, monkeypatch, slug):
    spec = write_spec(tmp_path / "tasks", slug)
    with pytest.raises(TaskSpecError, match="slug"):
        load_tasks([tmp_path / "tasks"])
    monkeypatch.setenv("MLTB_CACHE", str(tmp_path / "cache"))
    code, _, err = run_cli(capsys, "split", "--tasks-dir", tmp_path / "tasks", "--out", tmp_path / "out", "--",
                           slug or "x")
    assert_cli_usage_error(code, err, str(spec))
    assert not (tmp_path / "out").exists() and not (tmp_path / "evil").exists()


def test_a_user_spec_shadowing_a_builtin_task_is_an_error_naming_both_files(capsys, tmp_path, monkeypatch):
    user = tmp_path / "tasks"
    user.mkdir()
    shadow = user / f"{TASK}.toml"
    shutil.copy(TASKS_DIR / f"{TASK}.toml", shadow)
    with pytest.raises(TaskSpecError) as caught:
        load_tasks([user])
    assert str(shadow) in str(caught.value) and str((TASKS_DIR / f"{TASK}.toml").resolve()) in str(caught.value)
    monkeypatch.setenv("MLTB_TASKS_DIR", str(user))  # the same through the environment and the CLI
    code, _, err = run_cli(capsys, "tasks")
    assert_cli_usage_error(code, err, str(shadow), "overrides = true")


def test_a_user_spec_may_override_a_builtin_task_when_it_says_so(tmp_path):
    user = tmp_path / "tasks"
    user.mkdir()
    shadow = user / f"{TASK}.toml"
    shadow.write_text("overrides = true\n" + (TASKS_DIR / f"{TASK}.toml").read_text())
    assert load_tasks([user])[TASK].spec_path == shadow.resolve()
    assert load_tasks([user, user])[TASK].spec_path == shadow.resolve()  # a directory named twice is read once


def test_pytest_reports_a_shadowing_spec_as_a_usage_error(pytester, tmp_path):
    user = tmp_path / "tasks"
    user.mkdir()
    shutil.copy(TASKS_DIR / f"{TASK}.toml", user / f"{TASK}.toml")
    assert_pytest_usage_error(run_pytest(pytester, f"--tasks-dir={user}"), str(user / f"{TASK}.toml"))


# ---- MLTB_* environment variables ----------------------------------------------------------------------
@pytest.mark.parametrize("name, value", [
    ("MLTB_TOOL_MEMORY_LIMIT", "lots"), ("MLTB_THREADS", "many"), ("MLTB_THREADS", "0"),
    ("MLTB_LLM_TIMEOUT", "soon"), ("MLTB_LLM_MAX_RETRIES", "2.5"), ("MLTB_DATA_SOURCE", "cloud"),
    ("MLTB_DRAFT_TOKENS", "4.5"),
])
def test_a_malformed_environment_variable_is_a_start_up_error(capsys, pytester, monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    code, _, err = run_cli(capsys, "tasks")
    assert_cli_usage_error(code, err, name, value)
    assert_pytest_usage_error(run_pytest(pytester), name, value)


def test_mltb_run_into_a_results_path_that_is_a_directory_is_a_usage_error(capsys, tmp_path):
    (tmp_path / "run" / "results.jsonl").mkdir(parents=True)
    code, _, err = run_cli(capsys, "run", "--task", TASK, "--planner", "react", "--model", "sim", "--out",
                           tmp_path / "run", "--max-iterations", "1")
    assert_cli_usage_error(code, err, "results.jsonl is not a regular file")
