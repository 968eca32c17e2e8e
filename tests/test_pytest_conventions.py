"""pytest as users know it, on benchmark items: markers (-m, --strict-markers), the cache provider
(--lf, --sw need node ids stable across runs), extension hooks from a conftest, and no cost for a
project that collects no benchmark item.

The runs use test_plugin's fake trial (a conftest implementing ``pytest_mltb_run_trial``; outcomes are a
pure function of the trial seed), in a subprocess, with the cache provider ON.
"""
from __future__ import annotations

import pytest

from mltb_core.analysis.resultsfile import read_records
from test_plugin import FAKE_CONFTEST, SUITE, TASK, suite  # noqa: F401  (suite: the pytester project with the fake trial)

pytest_plugins = ["pytester"]

# Like test_plugin.COMMON, but the cache provider stays on: it is what --lf/--sw use.
ARGS = ["-p", "no:randomly", f"--task={TASK}", "--model=sim"]


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(*ARGS, *args)


def item_ids(result: pytest.RunResult) -> list[str]:
    return [line.split("[", 1)[1].rstrip("]") for line in result.stdout.lines if "test_challenge[" in line]


def recorded(run_dir) -> list[tuple[str, int]]:
    return sorted((r.planner, r.trial) for r in read_records(run_dir / "results.jsonl"))


def test_dash_m_planner_runs_only_that_planners_items(suite, tmp_path):
    """The done-when of issue 10: ``--model=sim --task spaceship-titanic --trials 2 -m mcts_shaped``."""
    result = run(suite, "--trials=2", "-m", "mcts_shaped", "--strict-markers", f"--mltb-out={tmp_path}")
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), result.stdout.str()[-2000:]
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) == 2
    from mltb_core.planners import PLANNERS

    assert outcomes["deselected"] == (len(PLANNERS) - 1) * 2       # the other planners x 2 trials
    assert recorded(tmp_path) == [("mcts_shaped", 0), ("mcts_shaped", 1)]


@pytest.mark.parametrize("expression, expected", [
    ("react and sim and spaceship_titanic", [f"{TASK}-react-sim-t00"]),
    ("mcts_shaped or lats", [f"{TASK}-lats-sim-t00", f"{TASK}-lats-openai-gpt-4o-t00",
                             f"{TASK}-mcts_shaped-sim-t00", f"{TASK}-mcts_shaped-openai-gpt-4o-t00"]),
    ("mcts_shaped and not sim", [f"{TASK}-mcts_shaped-openai-gpt-4o-t00"]),
    ("openai and not lats", [f"{TASK}-react-openai-gpt-4o-t00", f"{TASK}-mcts_shaped-openai-gpt-4o-t00"]),
    ("mcts_shaped and local", []),
])
def test_items_carry_planner_model_kind_and_task_markers(suite, expression, expected, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-collect-only")     # the key is checked up front; nothing is called
    result = run(suite, "--collect-only", "-q", "--strict-markers", "--planner=react,lats,mcts_shaped",
                 "--model=sim,openai:gpt-4o", "-m", expression)
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED), result.stderr.str()
    assert sorted(item_ids(result)) == sorted(expected)


def test_markers_are_registered_for_strict_markers_and_listed(suite):
    result = run(suite, "--markers", "--planner=react,mcts_shaped", "--model=sim,local")
    text = result.stdout.str()
    for name in ("react", "mcts_shaped", "sim", "local", "spaceship_titanic"):
        assert f"@pytest.mark.{name}: mltb benchmark items" in text
    # --strict-markers: a mark nobody registered is still refused (the option is on, the marks are known)
    suite.makepyfile(test_other="import pytest\n@pytest.mark.no_such_marker\ndef test_x():\n    pass\n")
    refused = run(suite, "--collect-only", "--strict-markers", "--planner=react")
    assert "'no_such_marker' not found in `markers` configuration option" in refused.stdout.str()


def test_last_failed_reruns_only_the_failed_items(suite, tmp_path):
    args = ["--planner=react", "--trials=4", "--seed=0"]
    first = run(suite, *args, f"--mltb-out={tmp_path / 'first'}")
    failed = [(r.planner, r.trial) for r in read_records(tmp_path / "first" / "results.jsonl")
              if r.outcome == "planner_failure"]
    assert first.ret == pytest.ExitCode.TESTS_FAILED and 0 < len(failed) < 4, first.stdout.str()[-2000:]
    again = run(suite, *args, "--lf", f"--mltb-out={tmp_path / 'again'}")
    assert f"run-last-failure: rerun previous {len(failed)} failure" in again.stdout.str()
    outcomes = again.parseoutcomes()
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) == len(failed)
    assert recorded(tmp_path / "again") == sorted(failed)   # exactly the failed items ran again


def test_stepwise_stops_at_the_first_failure_and_resumes_there(suite, tmp_path):
    args = ["--planner=react", "--trials=4", "--seed=0", "--sw"]
    first = run(suite, *args, f"--mltb-out={tmp_path / 'first'}")
    assert first.ret == pytest.ExitCode.INTERRUPTED                  # pytest's --sw stop
    records = list(read_records(tmp_path / "first" / "results.jsonl"))
    assert records[-1].outcome == "planner_failure" and len(records) < 4   # stopped at the first failure
    second = run(suite, *args, f"--mltb-out={tmp_path / 'second'}")
    assert second.ret == pytest.ExitCode.INTERRUPTED                 # the same trial fails again
    resumed = list(read_records(tmp_path / "second" / "results.jsonl"))
    assert resumed[0].trial == records[-1].trial              # --sw starts again at that item


def test_node_ids_are_stable_across_runs_and_processes(suite, monkeypatch):
    from mltb_core.planners import PLANNERS

    monkeypatch.setenv("OPENAI_API_KEY", "sk-collect-only")     # checked up front; nothing is called
    gguf = suite.path / "models" / "x.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF")                                   # only its existence is checked at collection
    args = ["--collect-only", "-q", "--planner=all", f"--model=sim,sim:0.6,openai:gpt-4o,local:{gguf}", "--trials=2"]
    first, second = run(suite, *args), run(suite, *args)
    assert item_ids(first) == item_ids(second) and len(item_ids(first)) == len(PLANNERS) * 4 * 2
    assert len(set(item_ids(first))) == len(item_ids(first))


RECORDING_CONFTEST = FAKE_CONFTEST + '''

def pytest_mltb_trial_config(case, config):
    if case.planner == "lats":
        return config.with_(max_iterations=3)


def pytest_mltb_record_written(record, run_dir):
    with open(run_dir / "written.txt", "a") as out:
        out.write(f"{record.planner} {record.trial} {record.config_hash}\\n")
'''


def test_extension_hooks_adjust_configs_and_see_every_written_record(pytester, tmp_path):
    pytester.makepyfile(test_challenges=SUITE)
    pytester.makeconftest(RECORDING_CONFTEST)
    args = ["--planner=react,lats", "--trials=2", f"--mltb-out={tmp_path}", "-p", "no:cacheprovider"]
    result = run(pytester, *args, "-n", "2")
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), result.stdout.str()[-2000:]
    records = list(read_records(tmp_path / "results.jsonl"))
    written = sorted((tmp_path / "written.txt").read_text().split("\n")[:-1])
    assert written == sorted(f"{r.planner} {r.trial} {r.config_hash}" for r in records) and len(records) == 4
    hashes = {r.planner: r.config_hash for r in records}
    assert hashes["lats"] != hashes["react"]      # the hook's config is the one the trial ran and recorded
    summary = result.stdout.str().split("mltb summary", 1)[1]
    assert "4 record(s)" in summary               # both configurations belong to this run
    resumed = run(pytester, *args, "--resume")
    assert "4 trial(s) already recorded" in resumed.stdout.str() and "4 deselected" in resumed.stdout.str()


def test_a_project_without_benchmark_items_imports_no_heavy_core_module(pytester):
    """The plugin is loaded in every pytest run of the environment: without benchmark items or mltb
    options it must not import the core's heavy modules (planners, analysis, the ML libraries)."""
    pytester.makepyfile(test_plain="def test_x():\n    pass\n")
    pytester.makeconftest('''
import sys

def pytest_sessionfinish(session):
    heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("pandas", "sklearn", "lightgbm", "numpy")
                   or m.startswith(("mltb_core.planners", "mltb_core.analysis", "mltb_core.bench.metrics")))
    print("HEAVY", heavy)
''')
    result = pytester.runpytest_subprocess("-s", "-p", "no:xdist", "-p", "no:benchmark")
    assert result.ret == pytest.ExitCode.OK
    assert "HEAVY []" in result.stdout.str(), [line for line in result.stdout.lines if "HEAVY" in line]
    assert "mltb: run directory" not in result.stdout.str()     # no header for a project not using it
