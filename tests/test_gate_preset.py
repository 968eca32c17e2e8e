"""The CI gate (issue 21): which planners a change gates (pytest_mltb.gating.planners_for_changes, used by
.github/workflows/mltb-gate.yml), and that the workflow and docs/gating.md run the preset."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from mltb_core.planners import PLANNERS
from pytest_mltb.gating import planners_for_changes

ROOT = Path(__file__).resolve().parents[1]
GATE_TASK = "spaceship-titanic"
pytest_plugins = ["pytester"]


@pytest.mark.parametrize("paths, planners", [
    (["mltb_core/planners/react.py"], "react"),
    # mcts.py defines the two MCTS planners and TreeSearch, the base of LATS and Hierarchical MCTS
    (["mltb_core/planners/mcts.py", "docs/architecture.md"], "lats,mcts_outcome,mcts_shaped,hierarchical_mcts"),
    (["mltb_core/planners/hierarchical.py"], "hierarchical_mcts"),      # a subclass's own module: itself alone
    (["mltb_core/planners/lats.py", "mltb_core/planners/react.py"], "react,lats"),   # in the tables' order
    (["mltb_core/planners/automind.py"], "automind,mle_star"),           # SolutionSearch is MLE-STAR's base too
    (["mltb_core/planners/base.py"], "all"),                             # Planner: every planner's base
    (["mltb_core/planners/react.py", "mltb_core/planners/tree.py"], "all"),    # shared search code
    (["mltb_core/toolkit/tools/modeling.py"], "all"),
    (["fixtures/tasks/spaceship-titanic.toml"], "all"),
    (["README.md", "tests/test_planners.py", "reports/benchmarks.md"], ""),    # nothing a result depends on
])
def test_a_change_gates_the_planners_it_touches(paths, planners):
    assert planners_for_changes(paths) == planners


def test_every_planner_module_maps_to_its_planners():
    for name, planner in PLANNERS.items():
        path = planner.__module__.replace(".", "/") + ".py"
        assert name in planners_for_changes([path]).split(","), (name, path)


def test_the_workflow_asks_the_module_on_the_command_line():
    done = subprocess.run([sys.executable, "-m", "pytest_mltb.gating", "mltb_core/planners/react.py"],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0 and done.stdout.strip() == "react", done.stderr


def test_the_workflow_and_the_gating_doc_gate_with_the_preset():
    workflow = (ROOT / ".github/workflows/mltb-gate.yml").read_text()
    gating = (ROOT / "docs/gating.md").read_text()
    assert "--gate-preset=ci" in workflow and "python -m pytest_mltb.gating" in workflow
    assert gating.count("--gate-preset=ci") >= 2 and "--save-baseline" in gating and "--compare" in gating


SUITE = '''
def test_challenge(mltb_case, mltb_split, mltb_record, mltb_check):
    mltb_check(mltb_record)
'''

# A planner change, as a user's conftest would make one: the planners MLTB_TEST_STOPPED names return before
# their first call (conftest, so it is active wherever the trials run).
STOPPED = '''
import os

from mltb_core.bench.stops import StopKind
from mltb_core.planners import PLANNERS
from mltb_core.planners.base import SearchResult

for _name in filter(None, os.environ.get("MLTB_TEST_STOPPED", "").split(",")):
    PLANNERS[_name].search = lambda self: SearchResult(self.ep.best, "returned at once", StopKind.SEARCH_COMPLETE)
'''


def test_the_preset_fails_a_planner_that_stops_submitting(pytester, tmp_path, monkeypatch):
    """The issue's case through the real trial and the sim policy, at the preset (one task, to stay quick): a
    planner that stops submitting fails the run gated alone and beside an unchanged planner; a run identical to
    the baseline is unchanged."""
    pytester.makepyfile(test_challenges=SUITE)
    pytester.makeconftest(STOPPED)
    common = ["-p", "no:cacheprovider", "-p", "no:randomly", "--gate-preset=ci", f"--task={GATE_TASK}"]
    baseline = tmp_path / "baseline.json"
    gate = [f"--compare={baseline}", "--fail-on-regression=consistency:-0.05,percentile:-2"]

    def run(out: str, planners: str, *more: str) -> tuple[int, str]:
        done = pytester.runpytest_subprocess(*common, f"--planner={planners}", f"--mltb-out={tmp_path / out}", *more)
        return done.ret, done.stdout.str()

    run("base", "react,lats", f"--save-baseline={baseline}")
    status, text = run("same", "react,lats", *gate)
    assert status == pytest.ExitCode.OK and "regression(s):" not in text and "no regression shown" in text, text
    assert re.search(rf"{GATE_TASK}\|react\|sim\s+consistency .* unchanged", text), text
    monkeypatch.setenv("MLTB_TEST_STOPPED", "react")
    for planners in ("react", "react,lats"):
        status, text = run(f"stopped-{planners}", planners, *gate)
        assert status == pytest.ExitCode.TESTS_FAILED, text
        failed = text.split("FAILED: ")[1]
        assert f"{GATE_TASK}|react|sim consistency valid" in failed and "behaviour loss" in failed, text
        assert "|lats|" not in failed
        if "lats" in planners:
            assert re.search(rf"{GATE_TASK}\|lats\|sim\s+consistency .* unchanged", text), text
