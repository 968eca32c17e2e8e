"""Planners: tree mechanics, budgets, determinism, masking, and valid submissions with a skilled sim."""
import json
from pathlib import Path

import pytest

from mltb_core.config import TrialConfig
from mltb_core.planners import PLANNERS, UnknownPlannerError, get_planner_class
from mltb_core.planners.lats import judge_score
from mltb_core.stages.masking import subtask_tools
from mltb_core.planners.tree import Node, backpropagate, uct_select
from mltb_core.stages.rewards import REWARD_STAGES
from mltb_core.bench.tasks import get_task, load_tasks
from mltb_core.planners.trajectory import read_trajectory, tool_calls_from_trajectory
from mltb_core.runner.trial import run_trial

ALL = ["react", "lats", "mcts_outcome", "mcts_shaped", "hierarchical_mcts", "automind", "mle_star", "agent_k"]


def _node(parent=None):
    node = Node(parent=parent, depth=parent.depth + 1 if parent else 0)
    if parent:
        parent.add_child(node)
    return node


def test_registry_has_the_five_planners_and_rejects_others():
    assert sorted(PLANNERS) == sorted(ALL)
    with pytest.raises(UnknownPlannerError, match="valid planners: .*mcts_shaped"):
        get_planner_class("astar")


def test_backpropagation_keeps_running_means_up_to_the_root():
    root = _node()
    child = _node(root)
    grandchild = _node(child)
    backpropagate(grandchild, 1.0)
    backpropagate(child, 0.0)
    assert (root.visits, child.visits, grandchild.visits) == (2, 2, 1)
    assert child.value == pytest.approx(0.5) and grandchild.value == 1.0


def test_uct_prefers_unvisited_then_value_plus_exploration():
    root = _node()
    root.expanded = True
    a, b = _node(root), _node(root)
    assert uct_select(root, 1.0) is a  # unexpanded leaf reached via first unvisited child
    for node, reward in ((a, 1.0), (b, 0.0)):
        node.expanded = True
        backpropagate(node, reward)
    a_child, b_child = _node(a), _node(b)
    assert uct_select(root, 0.0) is a_child           # pure exploitation
    for _ in range(30):
        backpropagate(a, 1.0)
    assert uct_select(root, 5.0) is b_child           # exploration eventually visits the neglected branch
    a.dead = b.dead = True
    assert uct_select(root, 1.0) is None and root.dead


def test_lats_score_parsing():
    assert judge_score("good progress. Score: 7") == 0.7
    assert judge_score("Score: 12") == 1.0 and judge_score("no idea") is None
    # forms a 1.5B judge wrote in the planner table instead of "Score: N" (the last grade counts)
    assert judge_score('{"reflection": "Loaded the train data.", "score": 5}') == 0.5
    assert judge_score("Each step is justified. The score is 10, a valid submission.") == 1.0
    assert judge_score("Good start (3/10 done). I would give it 6 out of 10") == 0.6
    assert judge_score("a score of 4. Score: 7") == 0.7
    assert judge_score("The features are stored on the scratchpad.\n\nGrade: 7") == 0.7
    assert judge_score("Stored 10 rows; 2 columns") is None   # the judge then counts it as UNSCORED


def test_masking_offers_each_subtask_its_tools():
    import mltb_core.toolkit.tools  # noqa: F401
    loading = subtask_tools("train_data_loading")
    assert "read_data" in loading and not any(t.startswith("fit_") for t in loading)
    modeling = subtask_tools("modeling")
    assert "fit_lightgbm_classifier" in modeling and "read_data" not in modeling
    cleaning = subtask_tools("data_cleaning")
    assert "fillna_with_median" in cleaning and "split_combined_into_train_test" not in cleaning
    assert all(subtask_tools(s.name) for s in REWARD_STAGES)


def _run(tmp_path, planner, model="sim:0.9", task="spaceship-titanic", **kw):
    cfg = TrialConfig(planner=planner, model=model, llm_cache=False).with_(**kw)   # kw: fields or planner knobs
    return run_trial(get_task(task), cfg, tmp_path)


@pytest.mark.parametrize("planner", ALL)
def test_every_planner_reaches_a_valid_submission_with_a_skilled_sim(tmp_path, planner):
    # A skilled sim still draws its proposals at random (seeded by the request's text), so any wording change
    # reshuffles which trial succeeds: the capability asked of every planner is a valid submission within
    # three trials, not on one particular seed.
    for trial in range(3):
        record = _run(tmp_path / f"t{trial}", planner, trial=trial)
        if record.outcome == "valid":
            break
    assert record.outcome == "valid", (record.stop_reason, record.feedback, record.error)
    assert record.synthetic and record.score is not None and record.percentile is not None
    assert record.stage_reached == 10 or planner == "mcts_outcome"
    assert record.tool_calls >= 10 and record.llm_calls >= 10
    summary = [s for s in read_trajectory(Path(record.trajectory)) if s["step_type"] == "search_summary"][0]
    assert summary["best_path"] and summary["nodes"] == record.tree_nodes


@pytest.mark.parametrize("planner", ["mcts_shaped", "lats"])
def test_same_seed_gives_the_identical_trajectory(tmp_path, planner):
    a = _run(tmp_path / "a", planner, model="sim:0.5", max_iterations=12)
    b = _run(tmp_path / "b", planner, model="sim:0.5", max_iterations=12)
    c = _run(tmp_path / "c", planner, model="sim:0.5", max_iterations=12, seed=1)
    calls = [json.dumps(tool_calls_from_trajectory(Path(r.trajectory), best_path_only=False)).replace(str(tmp_path / d), "RUN")
             for r, d in ((a, "a"), (b, "b"), (c, "c"))]
    assert calls[0] == calls[1]
    assert (a.outcome, a.stage_reached, a.score, a.tool_calls) == (b.outcome, b.stage_reached, b.score, b.tool_calls)
    assert calls[0] != calls[2]


def test_budgets_end_the_search_cleanly(tmp_path):
    record = _run(tmp_path, "mcts_shaped", max_llm_calls=3)
    assert record.outcome == "planner_failure" and record.llm_calls == 3
    assert "LLM-call budget (3)" in record.stop_reason and record.stop_kind == "llm_call_budget"
    react = _run(tmp_path, "react", max_depth=4)
    assert react.tool_calls == 4 and "step budget (4)" in react.stop_reason
    assert react.stop_kind == "iteration_budget"


def test_a_call_budget_holds_when_each_candidate_is_a_request_of_its_own(tmp_path, one_request_per_candidate):
    """A server without ``n`` (the local model) pays one call per candidate: MCTS's k=3 expansions must
    not carry a budget of 4 calls to 6."""
    record = _run(tmp_path, "mcts_shaped", max_llm_calls=4, expansion_k=3)
    assert record.llm_calls == 4 and "LLM-call budget (4)" in record.stop_reason
    asked = [s["n"] for s in read_trajectory(Path(record.trajectory)) if s["step_type"] == "llm_call"]
    assert asked == [3, 1]


def test_hierarchical_masking_only_ever_calls_the_subtasks_tools(tmp_path):
    record = _run(tmp_path, "hierarchical_mcts", model="sim:0.6")
    steps = list(read_trajectory(Path(record.trajectory)))
    executed = [s["tools_to_execute"][0]["tool_name"] for s in steps if s["step_type"] == "tool_execution_initiation"]
    allowed = set().union(*(subtask_tools(s.name) for s in REWARD_STAGES))
    assert executed and set(executed) <= allowed
    start = steps[0]
    assert start["step_type"] == "trial_start" and start["feedback"] is True and "Spaceship" in start["prompt"]


def test_hierarchical_without_decomposition_is_plain_mcts(tmp_path):
    record = _run(tmp_path, "hierarchical_mcts", decomposition=False, max_iterations=4)
    assert "No Solution Found" not in record.stop_reason


def test_lats_reflects_on_failures_and_pays_evaluator_calls(tmp_path):
    record = _run(tmp_path, "lats", model="sim:0.2", max_iterations=10, max_depth=3)
    steps = list(read_trajectory(Path(record.trajectory)))
    purposes = [s.get("purpose") for s in steps if s["step_type"] == "llm_call"]
    assert "evaluate" in purposes and "reflect" in purposes
    assert record.llm_calls == len(purposes)


OFFLINE_TASKS = sorted(slug for slug, task in load_tasks().items() if task.has_offline_data)
# What the default sweep runs (the whole grid, 8 planners x 15 tasks, is over an hour on 2 cores):
# - every planner on three tasks that cover the task kinds (binary classification, regression, multiclass
#   with grouped scoring), so each planner's search reaches a valid submission;
# - ReAct, the cheapest planner, on every other task, so the toolset, rewards and grading carry each task.
# The santander-value replica (2,000 rows x 4,991 columns) alone took 23 minutes for ReAct under load, so it
# and the rest of the grid run with MLTB_HEAVY_TESTS=1.
EVERY_PLANNER_TASKS = ("spaceship-titanic", "playground-series-s3e1", "costa-rican-household-poverty-prediction")
HEAVY_TASKS = ("santander-value-prediction-challenge",)


def _in_default_sweep(slug: str, planner: str) -> bool:
    if slug in HEAVY_TASKS:
        return False
    return slug in EVERY_PLANNER_TASKS or planner == "react"


def _sweep():
    for slug in OFFLINE_TASKS:
        for planner in ALL:
            # the rest of the grid is not collected unless MLTB_HEAVY_TESTS=1 (tests/conftest.py)
            marks = [] if _in_default_sweep(slug, planner) else [pytest.mark.heavy]
            yield pytest.param(slug, planner, id=f"{slug}-{planner}", marks=marks)


@pytest.mark.slow
@pytest.mark.parametrize(("slug", "planner"), list(_sweep()))
def test_every_planner_solves_every_offline_task_with_a_top_skill_sim(tmp_path, slug, planner):
    """The toolset, rewards and planners carry every task to a valid submission (sim:1.0 makes no mistakes).
    One item per (task, planner), so pytest-xdist spreads the cells over its workers."""
    # sim:1.0 picks its model family at random; on an RMSLE task a family that predicts a negative value
    # fails Kaggle's rule (issue 18), so the claim is a valid submission within three trials.
    for trial in range(3):
        record = _run(tmp_path / f"t{trial}", planner, model="sim:1.0", task=slug, trial=trial)
        if record.outcome == "valid":
            break
    assert record.outcome == "valid", (planner, record.stop_reason, record.feedback, record.error)


def test_the_sweep_covers_every_offline_task_and_planner():
    cells = {(slug, planner) for slug, planner in (p.values for p in _sweep())}
    assert cells == {(slug, planner) for slug in OFFLINE_TASKS for planner in ALL}
    assert set(HEAVY_TASKS) | set(EVERY_PLANNER_TASKS) <= set(OFFLINE_TASKS)
    default = {(slug, planner) for slug, planner in cells if _in_default_sweep(slug, planner)}
    assert {planner for _, planner in default} == set(ALL)                    # every planner runs by default
    assert {slug for slug, _ in default} == set(OFFLINE_TASKS) - set(HEAVY_TASKS)  # and every light task
