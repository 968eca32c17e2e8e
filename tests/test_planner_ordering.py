"""The paper's ordering with the synthetic policy at medium skill: shaped MCTS beats ReAct.

Fully seeded, so this is not flaky: a failure means a planner, reward or sim change moved
the ordering. The bigger study (20 seeds x 3 tasks x 5 planners) is benchmarks/planner_ordering.py.
"""
import pytest

from mltb_core.config import TrialConfig
from mltb_core.tasks import get_task
from mltb_core.trial import run_trial

SEEDS = 10


@pytest.mark.slow
def test_mcts_shaped_is_clearly_more_consistent_than_react(tmp_path):
    task = get_task("spaceship-titanic")
    consistency = {}
    for planner in ("react", "mcts_shaped"):
        records = [run_trial(task, TrialConfig(planner=planner, model="sim:0.5", trial=t, llm_cache=False), tmp_path)
                   for t in range(SEEDS)]
        assert not [r for r in records if r.outcome == "infra_error"]
        consistency[planner] = sum(r.valid for r in records) / SEEDS
    print(f"consistency at sim:0.5 over {SEEDS} seeds: {consistency}")
    assert consistency["mcts_shaped"] >= 0.9
    assert consistency["mcts_shaped"] - consistency["react"] >= 0.2
