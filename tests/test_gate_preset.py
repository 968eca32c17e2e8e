"""The CI gate (issue 21): which planners a change gates (pytest_mltb.gating.planners_for_changes, used by
.github/workflows/mltb-gate.yml), and that the workflow and docs/gating.md run the preset."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mltb_core.planners import PLANNERS
from pytest_mltb.gating import planners_for_changes

ROOT = Path(__file__).resolve().parents[1]


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
