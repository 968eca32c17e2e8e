"""The `mltb` command: every subcommand in-process (fast), plus one run of the real console script."""
from __future__ import annotations

import contextlib
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from mltb_core import cli
from mltb_core.toolkit.registry import KINDS, REGISTRY, TOOL_ROLES
from mltb_core.bench.splits import prepare_split
from mltb_core.bench.tasks import TASKS_DIR, get_task, load_tasks

TASK = "spaceship-titanic"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *argv: str, expect: int = 0):
    code, out, err = run(capsys, *argv, "--json")
    assert code == expect, err
    return json.loads(out)  # exactly one JSON document: json.loads rejects trailing text


def write_calls(path: Path, calls: list) -> Path:
    path.write_text("".join((c if isinstance(c, str) else json.dumps(c)) + "\n" for c in calls))
    return path


def read_call(filepath: str, output: str) -> dict:
    return {"tool_name": "read_data", "tool_args": {"bindings": {}, "func_kwargs": {"filepath": filepath},
                                                    "output": output}}


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory):
    """One short ReAct trial with the synthetic policy, shared by the run/report/replay tests."""
    out_dir = tmp_path_factory.mktemp("run")
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = cli.main(["run", "--task", TASK, "--planner", "react", "--model", "sim", "--max-iterations", "12",
                         "--out", str(out_dir), "--json"])
    return code, stdout.getvalue(), stderr.getvalue(), out_dir


# --------------------------------------------------------------------------- tools
def test_tools_json_lists_every_tool(capsys):
    import mltb_core.toolkit.tools  # noqa: F401

    document = run_json(capsys, "tools")
    assert document["count"] == len(REGISTRY) == len(document["tools"]) >= 61
    by_name = {t["name"]: t for t in document["tools"]}
    assert by_name["fillna_with_median"]["kind"] == "override"
    assert by_name["read_data"]["kind"] == "set"
    assert by_name["fit_lightgbm_classifier"]["signature"].startswith("fit_lightgbm_classifier(X_train, y_train")
    for tool in document["tools"]:
        assert tool["kind"] in KINDS and tool["roles"] and set(tool["roles"]) <= set(TOOL_ROLES)


def test_tools_text_and_selection(capsys):
    code, out, _ = run(capsys, "tools")
    assert code == 0 and "create_submission" in out and "get-set" in out
    code, out, _ = run(capsys, "tools", "read_data")
    assert code == 0 and "read_data(filepath)" in out and "1 tools" in out


def test_tools_of_one_toolset(capsys):
    code, out, _ = run(capsys, "tools", "--toolset", "paper")
    assert code == 0 and "create_submission" not in out and "save_dataframe_to_csv" in out
    assert "in the 'paper' toolset" in out
    paper = run_json(capsys, "tools", "--toolset", "paper")
    extended = run_json(capsys, "tools", "--toolset", "extended")
    extended_only = {"create_submission", "average_predictions"}
    assert paper["toolset"] == "paper" and paper["count"] == len(REGISTRY) - len(extended_only)
    assert not extended_only & {t["name"] for t in paper["tools"]}
    assert extended["count"] == len(REGISTRY)
    assert all("paper" in t["toolsets"] for t in paper["tools"])
    code, _, err = run(capsys, "tools", "--toolset", "paper", "create_submission")
    assert code == 2 and "not in this run's 'paper' toolset" in err


def test_unknown_tool_is_a_usage_error(capsys):
    code, out, err = run(capsys, "tools", "read_dat")
    assert code == 2 and out == ""
    assert "unknown tool 'read_dat'" in err and "read_data" in err


# --------------------------------------------------------------------------- tasks
def test_tasks_json(capsys):
    document = run_json(capsys, "tasks")
    tasks = {t["slug"]: t for t in document["tasks"]}
    assert set(tasks) == set(load_tasks()) and document["count"] == len(tasks) == len(list(TASKS_DIR.glob("*.toml")))
    spaceship = tasks[TASK]
    assert (spaceship["problem_type"], spaceship["metric"], spaceship["direction"]) == ("binary", "accuracy",
                                                                                       "higher")
    assert spaceship["source"] == "bundled" and spaceship["leaderboard_teams"] == 1967
    assert spaceship["data_origin"] == "competition" and spaceship["comparable_percentile"] is True
    assert spaceship["percentile_note"] is None
    assert tasks["nyc-taxi-trip-duration"]["direction"] == "lower"
    replica = tasks["porto-seguro-safe-driver-prediction"]
    assert replica["source"] == "replica" and replica["data_origin"] == "replica"
    assert replica["comparable_percentile"] is False and "replica" in replica["percentile_note"]
    # Real competition rows now back the two playground boards; original-data playgrounds have no board.
    for slug in ("playground-series-s3e1", "playground-series-s4e1"):
        assert tasks[slug]["data_origin"] == "competition-sample" and tasks[slug]["comparable_percentile"]
    mushrooms = tasks["playground-series-s4e8"]
    assert mushrooms["data_origin"] == "original" and mushrooms["comparable_percentile"] is False
    assert mushrooms["percentile_note"] == "original dataset; the board was scored on the competition's synthetic data"
    assert tasks["forest-cover-type-kernels-only"]["metric"] == "prior_weighted_accuracy"
    prepare_split(get_task(TASK))
    assert spaceship["rows"] == prepare_split(get_task(TASK)).meta["labelled_rows"]


def test_tasks_text(capsys):
    code, out, _ = run(capsys, "tasks")
    assert code == 0 and TASK in out and "replica" in out and "no: synthetic schema replica" in out
    assert "tasks get a leaderboard percentile" in out


# --------------------------------------------------------------------------- split
def test_split_writes_the_three_files(capsys, tmp_path):
    code, out, err = run(capsys, "split", TASK, "--out", tmp_path / "s", "--seed", 0)
    assert code == 0, err
    task = get_task(TASK)
    train = pd.read_csv(tmp_path / "s" / "train.csv")
    test = pd.read_csv(tmp_path / "s" / "test.csv")
    labels = pd.read_csv(tmp_path / "s" / "test_labels.csv")
    assert task.target in train.columns and task.target not in test.columns
    assert list(labels.columns) == [task.id_column, task.target]
    assert labels[task.id_column].tolist() == test[task.id_column].tolist()
    assert not set(train[task.id_column]) & set(test[task.id_column])
    assert "wrote" in out


def test_split_unknown_task(capsys, tmp_path):
    code, _, err = run(capsys, "split", "no-such-task", "--out", tmp_path)
    assert code == 2 and "unknown task 'no-such-task'" in err and TASK in err


def test_missing_required_option_is_a_usage_error(capsys):
    code, _, err = run(capsys, "split", TASK)
    assert code == 2 and "--out" in err


# --------------------------------------------------------------------------- score
def test_score_perfect_submission(capsys, tmp_path):
    split = prepare_split(get_task(TASK))
    perfect = tmp_path / "perfect.csv"
    shutil.copyfile(split.labels_path, perfect)
    document = run_json(capsys, "score", TASK, perfect)
    assert document["valid"] is True and document["score"] == 1.0 and document["normalized"] == 1.0
    # a perfect score ties the board's leaked perfect entries, which count half (mid-rank): just under 100
    assert 99.9 < document["percentile"] < 100.0 and document["reason"] == "ok"
    code, out, _ = run(capsys, "score", TASK, perfect)
    assert code == 0 and "valid: True" in out and "percentile (public leaderboard): 99.9" in out
    private = run_json(capsys, "score", TASK, perfect, "--board", "private")
    assert private["board"] == "private" and 99.9 < private["percentile"] < 100.0
    code, _, err = run(capsys, "score", TASK, perfect, "--board", "final")
    assert code == 2 and "public" in err and "private" in err


def test_score_on_a_non_comparable_task_prints_why_there_is_no_percentile(capsys, tmp_path, monkeypatch):
    # The original California housing rows were not what the s3e1 board was scored on.
    monkeypatch.setenv("MLTB_DATA_SOURCE", "original")
    slug = "playground-series-s3e1"
    split = prepare_split(get_task(slug))
    assert split.meta["data_source"] == "original"
    perfect = tmp_path / "perfect.csv"
    shutil.copyfile(split.labels_path, perfect)
    document = run_json(capsys, "score", slug, perfect)
    assert document["valid"] is True and document["score"] == 0.0 and document["normalized"] == 1.0
    assert document["percentile"] is None and document["medal"] is None
    assert document["percentile_note"] == "original dataset; the board was scored on the competition's synthetic data"
    code, out, _ = run(capsys, "score", slug, perfect)
    assert code == 0 and "percentile: none (original dataset; the board was scored on the competition's" in out


def test_score_corrupt_csv_is_invalid_with_a_reason(capsys, tmp_path):
    corrupt = tmp_path / "corrupt.csv"
    corrupt.write_bytes(b"\xa3\x00\xff garbage \x10\x80")
    document = run_json(capsys, "score", TASK, corrupt, expect=1)  # graded, printed, and exit 1: invalid
    assert document["valid"] is False and "CSV" in document["reason"] and document["score"] is None
    wrong_columns = tmp_path / "wrong.csv"
    wrong_columns.write_text("a,b\n1,2\n")
    document = run_json(capsys, "score", TASK, wrong_columns, expect=1)
    assert document["valid"] is False and "PassengerId" in document["reason"]


def test_score_missing_file_and_unknown_task(capsys, tmp_path):
    code, _, err = run(capsys, "score", TASK, tmp_path / "nope.csv")
    assert code == 2 and "does not exist" in err
    code, _, err = run(capsys, "score", "nope", tmp_path / "nope.csv")
    assert code == 2 and "valid slugs" in err


# --------------------------------------------------------------------------- replay
def test_replay_runs_calls_and_reports_a_failing_call(capsys, tmp_path):
    calls = write_calls(tmp_path / "calls.jsonl", [
        read_call("train.csv", "train_df"),
        {"tool_name": "fillna_with_median", "tool_args": {"bindings": {"df": "missing_frame"}, "func_kwargs": {}}},
        {"tool_name": "get_missing_summary", "tool_args": {"bindings": {"df": "train_df"}, "func_kwargs": {}}},
    ])
    code, out, err = run(capsys, "replay", TASK, calls)
    assert code == 0, err
    assert "[  1] ok  read_data" in out and "[  2] ERR fillna_with_median" in out and "missing_frame" in out
    assert "3 calls, 1 failed" in out and "submission: none written" in out
    document = run_json(capsys, "replay", TASK, calls)
    assert [c["ok"] for c in document["calls"]] == [True, False, True]
    assert document["grade"] is None and document["all_ok"] is False


PAPER_FINISH = Path(__file__).parent / "data" / "spaceship-titanic-paper-finish.jsonl"


def test_replay_of_the_models_own_path_ending_in_the_papers_finish_is_valid_and_scored(capsys):
    """Issue 33: the local model's own calls to a fitted model, then save_dataframe_to_csv(df=<predict_target
    output>) as the paper's agents finish (appendix I): a valid submission, graded with test.csv's row order."""
    document = run_json(capsys, "replay", TASK, PAPER_FINISH)
    calls = document["calls"]
    assert [c["tool_name"] for c in calls[-2:]] == ["predict_target", "save_dataframe_to_csv"]
    assert calls[-1]["ok"] and "1739 rows x 1 columns" in calls[-1]["message"]
    grade = document["grade"]
    assert grade["valid"] is True, grade["reason"]
    assert 0.7 < grade["score"] < 0.85 and grade["normalized"] > 0.3 and grade["percentile"] is not None


def test_replay_concatenating_train_with_itself_is_a_failed_call_naming_test_csv(capsys, tmp_path):
    calls = write_calls(tmp_path / "twice.jsonl", [
        read_call("train.csv", "train"),
        {"tool_name": "concatenate_train_test", "tool_args": {"bindings": {"train_df": "train", "test_df": "train"},
                                                              "func_kwargs": {}, "output": "combined"}}])
    document = run_json(capsys, "replay", TASK, calls)
    failed = document["calls"][1]
    assert failed["ok"] is False and "test.csv" in failed["message"] and "read_data" in failed["message"]


def test_replay_malformed_line_names_the_line(capsys, tmp_path):
    calls = write_calls(tmp_path / "bad.jsonl", [read_call("train.csv", "t"), "",
                                                 '{"tool_name": "read_data", "tool_args": '])
    code, out, err = run(capsys, "replay", TASK, calls)
    assert code == 2 and out == "" and "bad.jsonl:3" in err and "not valid JSON" in err


def test_replay_unknown_tool_names_the_line(capsys, tmp_path):
    calls = write_calls(tmp_path / "typo.jsonl", [read_call("train.csv", "t"), {"tool_name": "read_dat"}])
    code, _, err = run(capsys, "replay", TASK, calls)
    assert code == 2 and "typo.jsonl:2" in err and "unknown tool 'read_dat'" in err


@pytest.mark.parametrize("first_line", [b'{"tool_name": "read_data"}', b'{"step_type": "trial_start"}'])
def test_replay_of_a_file_that_is_not_utf8_is_a_usage_error(first_line, capsys, tmp_path):
    """Containment round 5: a non-UTF-8 calls file (or trajectory) exited 1 with a UnicodeDecodeError."""
    calls = tmp_path / "latin1.jsonl"
    calls.write_bytes(first_line + b"\n" + b'{"tool_name": "read_data", "note": "caf\xe9"}\n')
    code, out, err = run(capsys, "replay", TASK, str(calls))
    assert code == 2 and out == "" and "latin1.jsonl: not UTF-8 text" in err and "Traceback" not in err


def test_replay_of_a_trial_trajectory_reproduces_its_grade(capsys, sim_run):
    code, out, _, run_dir = sim_run
    record = json.loads(out)
    assert code == 0
    document = run_json(capsys, "replay", TASK, record["trajectory"])
    assert len(document["calls"]) > 0
    if record["valid"]:
        assert document["grade"]["valid"] and document["grade"]["score"] == pytest.approx(record["score"])


# --------------------------------------------------------------------------- expert
def test_expert_json(capsys):
    document = run_json(capsys, "expert", TASK)
    assert document["task"] == TASK and document["all_ok"] is True
    assert document["grade"]["valid"] is True and document["grade"]["normalized"] > 0.2
    assert document["wall_seconds"] > 0 and document["peak_mib"] >= 0


def test_expert_text_and_unknown_task(capsys):
    code, out, _ = run(capsys, "expert", TASK)
    assert code == 0 and "0 failed" in out and "valid: True" in out and "wall" in out
    code, _, err = run(capsys, "expert", "no-such-task")
    assert code == 2 and "unknown task" in err


# --------------------------------------------------------------------------- run
def test_run_sim_trial(sim_run):
    code, out, err, run_dir = sim_run
    assert code == 0, err
    record = json.loads(out)
    assert record["task"] == TASK and record["planner"] == "react" and record["model"] == "sim"
    assert record["synthetic"] is True and record["synthetic_label"] == cli.SYNTHETIC_LABEL
    assert record["outcome"] in ("valid", "planner_failure")
    assert 1 <= record["tool_calls"] and record["llm_calls"] >= 1
    assert record["board"] == "public" and record["percentile_note"] is None  # spaceship has a comparable board
    assert Path(record["trajectory"]).is_file()
    assert (run_dir / "results.jsonl").is_file() and (run_dir / "prompts.json").is_file()


def test_expert_markdown_report_has_one_row_per_task(capsys, tmp_path):
    report = tmp_path / "reports" / "expert.md"
    code, _, err = run(capsys, "expert", "playground-series-s4e8", "--markdown", report)
    assert code == 0, err
    text = report.read_text()
    header = "| task | data origin | metric | score | percentile | medal | normalized | scored rows | board |"
    assert header in text and "Percentile on 0 of 1 tasks" in text
    row = next(line for line in text.splitlines() if line.startswith("| playground-series-s4e8 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1:3] == ["original", "mcc"] and cells[4].startswith("none: original dataset")
    assert cells[7] == "2000" and cells[8] == "public"


def test_expert_on_an_original_dataset_says_why_there_is_no_percentile(capsys):
    document = run_json(capsys, "expert", "playground-series-s4e8", "--board", "private")
    grade = document["grade"]
    assert grade["valid"] and grade["board"] == "private" and grade["percentile"] is None and grade["medal"] is None
    assert grade["percentile_note"] == "original dataset; the board was scored on the competition's synthetic data"


def test_run_text_labels_the_synthetic_policy(capsys, tmp_path):
    code, out, err = run(capsys, "run", "--task", TASK, "--planner", "react", "--model", "sim:0.9",
                         "--max-iterations", "3", "--out", tmp_path)
    assert code == 0, err
    assert cli.SYNTHETIC_LABEL in out and "stage reached" in out and "trajectory:" in out


def test_run_refuses_a_run_directory_another_session_holds(capsys, tmp_path):
    """Issue 34: `mltb run --out` took no lock, so it could append to a directory a pytest session (or another
    `mltb run`) was writing. Held, it is a one-line usage error naming the owner and writes nothing; after a
    normal run the directory is free again."""
    import os

    from mltb_core.analysis.runstore import RunStore

    store = RunStore(tmp_path)
    lock = store.claim()
    try:
        code, _, err = run(capsys, "run", "--task", TASK, "--planner", "react", "--model", "sim",
                           "--max-iterations", "3", "--out", tmp_path)
        assert code == 2 and f"is in use by another session (pid {os.getpid()} on " in err, err
        assert "--out" in err and not store.results_path.exists()
    finally:
        store.release(lock)
    code, _, err = run(capsys, "run", "--task", TASK, "--planner", "react", "--model", "sim",
                       "--max-iterations", "3", "--out", tmp_path)
    assert code == 0, err
    store.release(store.claim())   # released at the end of the run: claimable again
    assert not store.session_owner_path.exists()


def test_run_with_a_toolset_records_it_in_the_trial_config(capsys, tmp_path):
    code, out, err = run(capsys, "run", "--task", TASK, "--planner", "react", "--model", "sim:1.0",
                         "--max-iterations", "3", "--toolset", "extended", "--out", tmp_path, "--json")
    assert code == 0, err
    trajectory = tmp_path / json.loads(out)["trajectory"]
    start = next(s for s in map(json.loads, trajectory.read_text().splitlines()) if s["step_type"] == "trial_start")
    assert start["config"]["toolset"] == "extended"
    code, _, err = run(capsys, "run", "--task", TASK, "--planner", "react", "--model", "sim", "--toolset", "tiny",
                       "--out", tmp_path)
    assert code == 2 and "bad value for --toolset: 'tiny'" in err and "paper, extended" in err


@pytest.mark.parametrize("option, value, message", [
    ("--planner", "nope", "valid planners"),
    ("--model", "gpt9", "Valid forms"),
    ("--task", "nope", "valid slugs"),
])
def test_run_usage_errors(capsys, tmp_path, option, value, message):
    argv = {"--task": TASK, "--planner": "react", "--model": "sim"}
    argv[option] = value
    code, _, err = run(capsys, "run", *[x for kv in argv.items() for x in kv], "--out", tmp_path)
    assert code == 2 and message in err


# --------------------------------------------------------------------------- report / prompts
def test_report_writes_the_report_and_prints_its_tables(capsys, sim_run, tmp_path):
    run_dir = sim_run[3]
    code, out, err = run(capsys, "report", run_dir, "--out", tmp_path / "report")
    assert code == 0, err
    assert (tmp_path / "report" / "index.html").is_file()
    assert f"leaderboard: {tmp_path / 'report' / 'leaderboard.md'}" in out and "react" in out


def test_report_of_a_directory_that_is_not_a_run_is_a_usage_error(capsys, tmp_path):
    code, out, err = run(capsys, "report", tmp_path)
    assert code == 2 and "is not an mltb run directory" in err and not (tmp_path / "report").exists()
    code, out, err = run(capsys, "report", "--help")
    assert code == 0 and "--out" in out and "--compare-runs" not in out


def test_prompts(capsys):
    from mltb_core.llm.prompts import all_prompts

    document = run_json(capsys, "prompts")
    assert document == json.loads(json.dumps(all_prompts()))
    code, out, _ = run(capsys, "prompts")
    assert code == 0 and "===== react_system =====" in out


def test_help_and_no_command(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "replay" in out
    code, _, err = run(capsys)
    assert code == 2 and ("COMMAND" in err or "required" in err)


# --------------------------------------------------------------------------- the real console script
def test_console_script_end_to_end(tmp_path):
    exe = shutil.which("mltb")
    command = [exe] if exe else [sys.executable, "-m", "mltb_core.cli"]
    done = subprocess.run([*command, "tasks", "--json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["count"] == 15
    bad = subprocess.run([*command, "score", "no-such-task", str(tmp_path / "x.csv")], capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 2 and "unknown task" in bad.stderr and bad.stdout == ""


# --------------------------------------------------------------------------- rough edges (issue 10)
def test_version_is_written_once_and_read_by_every_front(capsys):
    """--version, the records and the report read mltb_core.__version__; the package metadata is built from it."""
    import tomllib
    from importlib.metadata import version

    import mltb_core
    from mltb_core.analysis.provenance import code_version

    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.strip() == f"mltb {mltb_core.__version__}"
    assert code_version().startswith(f"mltb {mltb_core.__version__}")
    project = tomllib.loads((Path(mltb_core.__file__).parents[1] / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "mltb_core.__version__"}
    assert version("mltb") == mltb_core.__version__             # the installed metadata: the same string


@pytest.mark.parametrize("argv, named", [
    (["bogus"], "'bogus'"),
    (["run", "--task", TASK, "--planner", "react", "--model", "sim", "--max-iterations", "0"], "--max-iterations"),
    (["run", "--task", TASK, "--planner", "react", "--model", "sim", "--temperature", "hot"], "'hot'"),
    (["split", TASK, "--out", "x", "--seed", "-1"], "-1"),
])
def test_a_bad_argument_is_one_usage_error_line_with_one_prefix(capsys, argv, named):
    code, out, err = run(capsys, *argv)
    assert code == cli.EXIT_USAGE and out == "" and named in err
    assert err.count("mltb:") == 1 and err.startswith("mltb: error: ") and len(err.splitlines()) == 1, err


def test_score_exits_1_on_an_invalid_submission_and_0_on_a_valid_one(capsys, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("wrong,columns\n1,2\n")
    code, out, _ = run(capsys, "score", TASK, bad)
    assert code == cli.EXIT_FAILED and "valid: False" in out
    assert "exit codes:" in cli.build_parser().format_help()


def test_run_has_every_ablation_switch_both_ways_and_the_shared_cache_flag(capsys, tmp_path):
    code, out, err = run(capsys, "run", "--task", TASK, "--planner", "react", "--model", "sim:1.0", "--max-iterations",
                         "2", "--reward-shaping", "--no-tool-masking", "--no-llm-cache", "--out", tmp_path, "--json")
    assert code == 0, err
    trajectory = tmp_path / json.loads(out)["trajectory"]
    start = next(s for s in map(json.loads, trajectory.read_text().splitlines()) if s["step_type"] == "trial_start")
    assert (start["config"]["reward_shaping"], start["config"]["tool_masking"], start["config"]["llm_cache"]) == \
        (True, False, False)


def test_the_grading_commands_take_board_tasks_dir_and_seed_from_the_settings_table(capsys):
    """--board, --tasks-dir and --seed mean what the settings table says (one declaration, not a second):
    the same flags, choices and defaults; --tasks-dir also takes an os.pathsep list, as MLTB_TASKS_DIR."""
    import os

    from mltb_core.config import SETTINGS_BY_NAME

    parser = cli.build_parser()
    args = parser.parse_args(["score", "--tasks-dir", f"a{os.pathsep}b", "--tasks-dir", "c", TASK, "s.csv"])
    # made absolute where they are read, as the setting's values are (issue 59)
    assert args.tasks_dir == [os.path.join(os.getcwd(), name) for name in "abc"]
    assert args.board == SETTINGS_BY_NAME["board"].default and args.seed == SETTINGS_BY_NAME["seed"].default
    code, _, err = run(capsys, "score", "--board", "final", TASK, "s.csv")
    assert code == 2 and "'final'" in err and "public" in err
    code, _, err = run(capsys, "split", "--seed", "-1", TASK, "--out", "x")
    assert code == 2 and "--seed" in err


HEAVY_MODULES = ("pandas", "sklearn", "scipy", "xgboost", "lightgbm", "catboost")


@pytest.mark.parametrize("command", [["--version"], ["--help"], ["models"], ["tools", "--help"]],
                         ids=lambda c: " ".join(c))
def test_fast_commands_import_no_dataframe_or_model_library(command):
    """`mltb --version` took 18-28 s on a loaded box when every command imported pandas, scikit-learn and the
    boosters (issue 35): the commands that list or describe import them only where a command needs them."""
    assert heavy_imports(command) == "0 []"


def test_listing_the_tasks_reads_their_boards_but_imports_no_model_library():
    """`mltb tasks` reads every leaderboard (pandas) to count its teams, but splitting (scikit-learn, 1.3 s of
    its 2.9 s) only happens when a trial or `mltb split` prepares data."""
    assert heavy_imports(["tasks"]) == "0 ['pandas']"


def heavy_imports(command: list[str]) -> str:
    """``<exit code> [heavy modules imported]`` of ``mltb COMMAND`` in a fresh interpreter."""
    probe = ("import contextlib, io, sys\nfrom mltb_core.cli import main\n"
             "with contextlib.redirect_stdout(io.StringIO()): code = main(sys.argv[1:])\n"
             f"print(code, sorted(m for m in {HEAVY_MODULES!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe, *command], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def test_run_help_still_lists_the_planners_and_their_knobs():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["run", "--help"]) == 0
    assert "--num-drafts" in out.getvalue() and "mcts_shaped" in out.getvalue()


def test_the_install_line_matches_how_mltb_is_installed(monkeypatch, tmp_path):
    """Issue 35: `mltb models` suggested pip install 'mltb[local]' from a checkout, where it is wrong."""
    import importlib.metadata

    import mltb_core.bench.fixtures as fixtures

    root = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(root)
    assert cli.install_command("local") == 'pip install -e ".[local]"'      # this checkout
    monkeypatch.chdir(tmp_path)
    assert cli.install_command("local") == f'pip install -e "{root}[local]"'

    class Wheel:
        def __init__(self, url):
            self.url = url

        def read_text(self, name):
            return json.dumps({"url": self.url, "archive_info": {}}) if self.url else None

    monkeypatch.setattr(fixtures, "source_tree", lambda: None)
    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: Wheel("file:///opt/w/mltb-0.1.0-py3-none-any.whl"))
    assert cli.install_command("local") == 'pip install "/opt/w/mltb-0.1.0-py3-none-any.whl[local]"'
    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: Wheel(None))   # from an index
    assert cli.install_command("local") == "pip install 'mltb[local]'"


@pytest.mark.parametrize("argv, suggestion", [
    (["--task", "spaceship-titanc", "--planner", "react", "--model", "sim"], "(did you mean 'spaceship-titanic'?)"),
    (["--task", "spaceship-titanic", "--planner", "mcts_shapd", "--model", "sim"], "(did you mean 'mcts_shaped'?)"),
    (["--task", "spaceship-titanic", "--planner", "react", "--model", "opnai:gpt-4o"], "(did you mean 'openai'?)"),
], ids=["task", "planner", "model"])
def test_a_misspelt_name_gets_a_suggestion(capsys, argv, suggestion):
    code, _, err = run(capsys, "run", *argv)
    assert code == 2 and suggestion in err and "valid" in err.lower()


def test_a_name_like_nothing_gets_no_suggestion(capsys):
    code, _, err = run(capsys, "run", "--task", "spaceship-titanic", "--planner", "zzzzzz", "--model", "sim")
    assert code == 2 and "did you mean" not in err
