"""pytester tests of the mltb plugin: collection, ids, usage errors, xdist equality, resume, gating, junitxml.

Most runs replace the trial by a fast deterministic fake: a conftest in the pytester directory (so it is
active in xdist workers too) implements the plugin's ``pytest_mltb_run_trial`` hook, as a user's conftest
would; the end-to-end runs use the real trial with the sim policy.
"""
from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest

from mltb_core.analysis.resultsfile import read_records

pytest_plugins = ["pytester"]

SUITE = '''
def test_challenge(mltb_case, mltb_split, mltb_record, mltb_check):
    mltb_check(mltb_record)
'''

# A fake trial: outcome and figures are a pure function of the trial seed, so any process
# order gives the same records. MLTB_FAKE_INFRA / MLTB_FAKE_INTERRUPT name case ids (task-planner-trial)
# that hit an infra error / a Ctrl-C; MLTB_FAKE_BROKEN makes every trial fail (an injected regression).
FAKE_CONFTEST = '''
import os
from pathlib import Path
from mltb_core.analysis.records import TrialRecord


def pytest_mltb_run_trial(task, config, out_dir):
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    key = f"{task.slug}-{config.planner}-{config.trial}"
    if key in os.environ.get("MLTB_FAKE_INTERRUPT", "").split(","):
        raise KeyboardInterrupt
    seed = config.trial_seed
    infra = key in os.environ.get("MLTB_FAKE_INFRA", "").split(",")
    valid = not infra and seed % 4 != 0 and not os.environ.get("MLTB_FAKE_BROKEN")
    trajectory = out_dir / "trajectory.jsonl"
    trajectory.write_text('{"step_type": "llm_call", "step_number": 1}\\n' * (1 + seed % 3))
    return TrialRecord(
        task=task.slug, planner=config.planner, model=config.model, trial=config.trial, seed=seed,
        config_hash=config.config_hash(), outcome="infra_error" if infra else ("valid" if valid else "planner_failure"),
        valid=valid, percentile=float(seed % 100) if valid else None, normalized=0.5 if valid else None,
        stage_reached=10 if valid else seed % 10, stage_name="submission" if valid else "cleaning",
        stop_reason="budget" if not valid else "submitted", feedback="fix the missing values",
        tokens_in=seed % 1000, tokens_out=seed % 100, llm_calls=1 + seed % 7, cost_usd=0.0,
        wall_seconds=0.0, trajectory=str(trajectory), synthetic=config.model.synthetic,
        error="server down" if infra else None)
'''

TASK = "spaceship-titanic"
COMMON = ["-p", "no:cacheprovider", "-p", "no:randomly", f"--task={TASK}", "--model=sim"]


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_challenges=SUITE)
    pytester.makeconftest(FAKE_CONFTEST)
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(*COMMON, *args)


def summary_of(result: pytest.RunResult) -> str:
    """The mltb summary section without the run directory (its own line, and the report command's argument)."""
    text = result.stdout.str()
    start = text.index("mltb summary")
    lines = text[start:].splitlines()[2:]
    end = next((i for i, line in enumerate(lines) if re.match(r"^=+ .* =+$", line)), len(lines))
    return re.sub(r"mltb report \S+ writes them", "mltb report RUN_DIR writes them", "\n".join(lines[:end]).strip())


def test_ids_order_and_k_selection(suite, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-collect-only")     # checked up front; nothing is called
    result = run(suite, "--collect-only", "-q", "--planner=react,mcts_shaped", "--model=sim,openai:gpt-4o,sim:0.6",
                 "--trials=2")
    ids = [line.split("[", 1)[1].rstrip("]") for line in result.stdout.lines if "test_challenge[" in line]
    # trial outermost (a run stopped part-way is balanced across cells), then planner and model as given
    assert ids[:3] == [f"{TASK}-react-sim-t00", f"{TASK}-react-openai-gpt-4o-t00", f"{TASK}-react-sim0.6-t00"]
    assert ids[6] == f"{TASK}-react-sim-t01" and all(i.endswith("t00") for i in ids[:6])
    assert f"{TASK}-mcts_shaped-sim0.6-t01" in ids and len(ids) == 12
    again = run(suite, "--collect-only", "-q", "--planner=react,mcts_shaped", "--model=sim,openai:gpt-4o,sim:0.6",
                "--trials=2")
    assert [line for line in again.stdout.lines if "test_challenge[" in line] == [
        line for line in result.stdout.lines if "test_challenge[" in line]  # deterministic (xdist needs it)
    picked = run(suite, "--collect-only", "-q", "--planner=all", "--trials=2", "-k", "mcts_shaped and t01")
    picked_ids = [line for line in picked.stdout.lines if "test_challenge[" in line]
    assert picked_ids == [f"test_challenges.py::test_challenge[{TASK}-mcts_shaped-sim-t01]"]


@pytest.mark.parametrize("args, words", [
    (["--planner=nope"], ["unknown planner", "'nope'", "mcts_shaped", "hierarchical_mcts"]),
    (["--model=gpt4"], ["unknown model", "'gpt4'", "openai:<model>"]),
    (["--task=no-such-task"], ["unknown task", "'no-such-task'", "spaceship-titanic"]),
    (["--trials=x"], ["bad value for --trials"]),
    (["--board=final"], ["bad value for --board", "'final'", "public, private"]),
    (["--toolset=tiny"], ["bad value for --toolset", "'tiny' is not allowed", "paper", "extended"]),
])
def test_unknown_names_are_usage_errors(suite, args, words):
    result = run(suite, "--collect-only", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    for word in words:
        assert word in result.stderr.str()


def test_env_var_sets_option(suite, monkeypatch):
    monkeypatch.setenv("MLTB_PLANNER", "lats")
    result = run(suite, "--collect-only", "-q")
    ids = [line for line in result.stdout.lines if "test_challenge[" in line]
    assert ids == [f"test_challenges.py::test_challenge[{TASK}-lats-sim-t00]"]


def test_board_env_var_is_checked(suite, monkeypatch):
    monkeypatch.setenv("MLTB_BOARD", "final")
    result = run(suite, "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.USAGE_ERROR and "bad value for MLTB_BOARD" in result.stderr.str()


def test_board_option_reaches_the_trial_config_and_its_hash():
    from pytest_mltb.collection import trial_config
    from pytest_mltb.options import Settings, pytest_options

    defaults = {opt.name: opt.default for opt in pytest_options()}
    public = trial_config(Settings(defaults), "react", "sim", 0)
    private = trial_config(Settings({**defaults, "board": "private"}), "react", "sim", 0)
    assert public.board == "public" and private.board == "private"  # the paper ranks on the public board
    assert public.config_hash() != private.config_hash()


def test_toolset_option_reaches_the_trial_config(monkeypatch):
    from pytest_mltb.collection import trial_config
    from pytest_mltb.options import Settings, pytest_options

    defaults = {opt.name: opt.default for opt in pytest_options()}
    assert trial_config(Settings(defaults), "react", "sim", 0).toolset == "paper"
    chosen = trial_config(Settings({**defaults, "toolset": "extended"}), "react", "sim", 0)
    assert chosen.toolset == "extended"
    assert chosen.config_hash() != trial_config(Settings(defaults), "react", "sim", 0).config_hash()
    assert {opt.name for opt in pytest_options() if opt.name == "toolset"} and "MLTB_TOOLSET" in {o.env for o in pytest_options()}


def test_xdist_tables_equal_serial_tables_and_junitxml(suite, tmp_path):
    args = ["--planner=react,mcts_shaped", "--trials=3", "--seed=0"]
    serial = run(suite, *args, f"--mltb-out={tmp_path / 'serial'}", "-n", "0",
                 f"--junitxml={tmp_path / 'junit.xml'}")
    parallel = run(suite, *args, f"--mltb-out={tmp_path / 'parallel'}", "-n", "2")
    assert serial.ret == parallel.ret
    assert summary_of(serial) == summary_of(parallel)
    assert "Consistency" in summary_of(serial) and "Stage funnel" in summary_of(serial)
    assert "synthetic policy, not an LLM" in summary_of(serial)
    records = list(read_records(tmp_path / "parallel" / "results.jsonl"))
    assert len(records) == 6
    for record in records:  # trajectories came back through the report, not the filesystem path
        assert (tmp_path / "parallel" / record.trajectory).read_text().startswith('{"step_type"')
    cases = ET.parse(tmp_path / "junit.xml").getroot().iter("testcase")
    props = {c.get("name"): {p.get("name"): p.get("value") for p in c.iter("property")} for c in cases}
    assert len(props) == 6
    record = json.loads(props[f"test_challenge[{TASK}-react-sim-t00]"]["mltb_record"])
    assert record["task"] == TASK and record["planner"] == "react" and "config_hash" in record


def test_infra_error_is_an_error_and_not_counted(suite, tmp_path, monkeypatch):
    monkeypatch.setenv("MLTB_FAKE_INFRA", f"{TASK}-react-0")
    result = run(suite, "--planner=react", "--trials=2", "--infra-retries=1", f"--mltb-out={tmp_path}")
    outcomes = result.parseoutcomes()
    assert outcomes.get("errors") == 1
    assert "server down" in result.stdout.str()
    assert "Infrastructure errors" in summary_of(result)
    records = list(read_records(tmp_path / "results.jsonl"))
    infra = [r for r in records if r.outcome == "infra_error"]
    assert len(infra) == 1 and infra[0].extra["attempts"] == 2


def test_resume_after_interrupt_loses_and_duplicates_nothing(suite, tmp_path, monkeypatch):
    args = ["--planner=react,lats", "--trials=2", f"--mltb-out={tmp_path}"]
    monkeypatch.setenv("MLTB_FAKE_INTERRUPT", f"{TASK}-lats-1")
    interrupted = run(suite, *args)
    assert interrupted.ret == pytest.ExitCode.INTERRUPTED
    first = list(read_records(tmp_path / "results.jsonl"))
    # trial outermost: both planners' trial 0, then react's trial 1, finished before the interrupt
    assert sorted((r.planner, r.trial) for r in first) == [("lats", 0), ("react", 0), ("react", 1)]
    monkeypatch.delenv("MLTB_FAKE_INTERRUPT")
    resumed = run(suite, *args, "--resume")
    assert "3 trial(s) already recorded" in resumed.stdout.str()
    assert f"mltb report {tmp_path} writes them" in resumed.stdout.str()   # the run's own report command
    assert "3 deselected" in resumed.stdout.str()
    records = list(read_records(tmp_path / "results.jsonl"))
    keys = [(r.planner, r.trial) for r in records]
    assert sorted(keys) == [("lats", 0), ("lats", 1), ("react", 0), ("react", 1)]


def test_compare_fails_on_injected_regression_and_passes_on_none(suite, tmp_path, monkeypatch):
    baseline = tmp_path / "baseline.json"
    args = ["--planner=react", "--trials=12", "--seed=0"]  # enough trials for a total collapse to be beyond noise
    saved = run(suite, *args, f"--mltb-out={tmp_path / 'base'}", f"--save-baseline={baseline}")
    assert baseline.is_file() and "baseline written" in saved.stdout.str()
    gate = [f"--compare={baseline}", "--fail-on-regression=consistency:-0.05,percentile:-2"]
    same = run(suite, *args, f"--mltb-out={tmp_path / 'same'}", *gate)
    assert "no regression shown" in same.stdout.str()
    assert saved.ret == pytest.ExitCode.TESTS_FAILED  # some trials fail: without a gate that fails the run
    assert same.ret == pytest.ExitCode.OK  # with the gate, planner failures are results; no regression
    # the fake is a function of the seed: every paired trial identical, which the gate states as a fact
    assert "INCONCLUSIVE" not in same.stdout.str() and "REGRESSION" not in same.stdout.str()
    assert "unchanged: 2 of 2 gated comparisons" in same.stdout.str()
    other_seeds = run(suite, "--planner=react", "--trials=12", "--seed=1", f"--mltb-out={tmp_path / 'other'}", *gate)
    assert other_seeds.ret == pytest.ExitCode.OK
    assert "INCONCLUSIVE" in other_seeds.stdout.str()  # other seeds, 12 trials: cannot decide a 0.05 drop, said loudly
    monkeypatch.setenv("MLTB_FAKE_BROKEN", "1")  # every trial now fails
    worse = run(suite, *args, f"--mltb-out={tmp_path / 'worse'}", *gate)
    assert worse.ret == pytest.ExitCode.TESTS_FAILED
    assert "REGRESSION" in worse.stdout.str() and "FAILED:" in worse.stdout.str()
    assert "spaceship-titanic|react|sim consistency" in worse.stdout.str().split("FAILED:")[1]


def test_two_identical_sim_runs_gate_as_unchanged(pytester, tmp_path):
    """No fake: the real trial with the synthetic policy, run twice on the same seeds and gated."""
    pytester.makepyfile(test_challenges=SUITE)
    baseline = tmp_path / "baseline.json"
    args = ["--planner=react", "--trials=2", "--seed=0", "--max-iterations=4"]
    run(pytester, *args, f"--mltb-out={tmp_path / 'a'}", f"--save-baseline={baseline}")
    again = run(pytester, *args, f"--mltb-out={tmp_path / 'b'}", f"--compare={baseline}",
                "--fail-on-regression=consistency:-0.05,normalized:-0.1")
    text = again.stdout.str()
    assert again.ret == pytest.ExitCode.OK and "INCONCLUSIVE" not in text
    verdicts = re.findall(r"spaceship-titanic\|react\|sim\s+(consistency|normalized)\s.*?(\S+)\s*$", text, re.M)
    assert sorted(verdicts) == [("consistency", "unchanged"), ("normalized", "unchanged")]


def test_failure_message_is_short_and_says_where_it_stopped(suite, tmp_path):
    result = run(suite, "--planner=react", "--trials=4", "--seed=0", f"--mltb-out={tmp_path}", "-rf")
    failed = [r for r in read_records(tmp_path / "results.jsonl") if r.outcome == "planner_failure"]
    assert failed, "the fake makes some trials fail for these seeds"
    text = result.stdout.str()
    from mltb_core.stages.specs import stage_label

    # the stage's name is mltb's own (the fake's records call every failed stage "cleaning")
    assert f"planner_failure: reached stage {stage_label(failed[0].stage_reached)}; stopped: budget" in text
    assert "feedback: fix the missing values" in text


def test_real_trial_end_to_end_with_the_sim_policy(pytester, tmp_path):
    """No fake: the real run_trial with the synthetic policy on spaceship-titanic."""
    pytester.makepyfile(test_challenges=SUITE)
    result = run(pytester, "--planner=react", "--trials=1", "--max-iterations=4", f"--mltb-out={tmp_path}")
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)
    (record,) = read_records(tmp_path / "results.jsonl")
    assert record.outcome in ("valid", "planner_failure") and record.synthetic and record.llm_calls > 0
    steps = (tmp_path / record.trajectory).read_text().splitlines()
    assert json.loads(steps[0])["step_type"] == "trial_start"
    from mltb_core.analysis.runstore import RunStore

    store = RunStore(tmp_path)   # the layout `mltb run` writes too (tests/test_runstore.py)
    assert record.trajectory == RunStore.trajectory_name(record).as_posix()
    assert not store.work_dir(record.case_id).exists()   # scratch once recorded (--keep-work keeps it)
    assert "Stage funnel" in summary_of(result)
    prompts = json.loads((tmp_path / "prompts.json").read_text())
    assert prompts["react_system"].startswith("You are a Data Scientist")


def without_wall_times(summary: str) -> list[str]:
    """The summary lines with the cost table's last column and the tables' 'seconds per trial' rows (wall
    seconds, never reproducible) cut off."""
    lines, in_cost = [], False
    for line in summary.splitlines():
        if line.startswith("seconds per trial"):
            continue
        in_cost = line.startswith("Cost per planner") or (in_cost and bool(line.strip()))
        lines.append(line.rsplit(None, 1)[0] if in_cost and line.strip() else line)
    return lines


def test_real_trials_give_the_same_tables_with_and_without_xdist(pytester, tmp_path):
    """Seeded sim trials are reproducible in any worker: -n 2 prints exactly the -n 0 tables."""
    pytester.makepyfile(test_challenges=SUITE)
    args = ("--planner=react,mcts_shaped", "--trials=2", "--max-iterations=6")
    serial = run(pytester, *args, f"--mltb-out={tmp_path / 'serial'}")
    parallel = run(pytester, *args, "-n", "2", f"--mltb-out={tmp_path / 'xdist'}")
    assert without_wall_times(summary_of(serial)) == without_wall_times(summary_of(parallel))
    key = lambda r: (r.task, r.planner, r.trial, r.outcome, r.score, r.stage_reached, r.tool_calls)  # noqa: E731
    assert sorted(map(key, read_records(tmp_path / "serial" / "results.jsonl"))) == \
        sorted(map(key, read_records(tmp_path / "xdist" / "results.jsonl")))


@pytest.mark.parametrize("args, words", [
    (["--compare=missing.json"], ["bad value for --compare", "missing.json", "does not exist"]),
    (["--compare=notjson.json"], ["bad value for --compare", "not JSON"]),
    (["--compare=notjson.json", "--fail-on-regression=consistency:x"], ["bad value for --fail-on-regression", "'x'"]),
    (["--fail-on-regression=consistency:-0.05"], ["--fail-on-regression", "needs --compare"]),
])
def test_bad_gate_arguments_are_one_usage_error_not_a_traceback(suite, args, words):
    (suite.path / "notjson.json").write_text("not json")
    result = run(suite, "--planner=react", *args)
    err = result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR and "Traceback" not in err + result.stdout.str()
    for word in words:
        assert word in err, (word, err)


def test_resume_with_nothing_left_exits_0_and_says_so(suite, tmp_path):
    args = ["--planner=react", "--trials=2", f"--mltb-out={tmp_path}"]
    run(suite, *args)
    again = run(suite, *args, "--resume")
    assert again.ret == pytest.ExitCode.OK, again.stdout.str()[-2000:]
    assert "nothing left to run: all 2 selected trial(s)" in again.stdout.str()


def test_the_summary_is_compact_unless_verbose(suite):
    quiet = summary_of(run(suite, "--planner=react", "--trials=2", "-p", "no:xdist"))
    assert "Consistency" in quiet and "Stage funnel" in quiet and "Cost per planner" not in quiet
    assert "pytest -v prints every table" in quiet
    verbose = summary_of(run(suite, "--planner=react", "--trials=2", "-p", "no:xdist", "-v"))
    assert "Cost per planner" in verbose and "Median normalized score" in verbose


def test_a_misspelt_planner_in_pytest_gets_a_suggestion(suite):
    result = run(suite, "--planner=mcts_shapd,react")
    assert result.ret == 4
    assert "unknown planner(s) 'mcts_shapd' (did you mean 'mcts_shaped'?)" in result.stderr.str()


REPORT_HOOK = '''

def pytest_mltb_report_sections(sections, config):
    from mltb_core.analysis.sections import Section
    sections[:] = [s for s in sections if s.name != "seconds"]
    sections.append(Section("host", "Host notes", lambda ctx: [f"- {len(ctx.records)} trial(s) on the <b>CI</b> host"]))
'''


def test_mltb_report_writes_the_run_report_with_the_conftest_sections(suite, tmp_path):
    """--mltb-report writes RUN_DIR/report/ at the end; a conftest adds and removes sections by the hook."""
    suite.makeconftest(FAKE_CONFTEST + REPORT_HOOK)
    result = run(suite, "--planner=react,mcts_shaped", "--trials=2", f"--mltb-out={tmp_path}", "--mltb-report")
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)
    index = (tmp_path / "report" / "index.html").read_text()
    assert "<h2 id='host'>Host notes</h2>" in index and "4 trial(s) on the &lt;b&gt;CI&lt;/b&gt; host" in index
    assert "<h2 id='seconds'>" not in index and "<h2 id='stop_kinds'>" in index
    assert f"report: {tmp_path / 'report' / 'index.html'}" in result.stdout.str()
