"""treeview.py: trajectories of ReAct (a chain), MCTS and Hierarchical MCTS become the viewer's tree."""
import json
from pathlib import Path

import pytest

from mltb_core.planners.trajectory import read_trajectory
from mltb_core.analysis.treeview import tree_from_steps, tree_page

from test_reports import steps_for


def call(node, parent, tool, ok=True, text="done"):
    return [{"step_type": "tool_execution_initiation", "node_id": node, "parent_id": parent,
             "tools_to_execute": [{"tool_name": tool, "tool_args": {}}]},
            {"step_type": "tool_execution_completion", "node_id": node,
             "tool_results": [{"ok": ok, "content_preview": text}]}]


def test_mcts_tree_has_final_statistics_and_best_path():
    tree = tree_from_steps(steps_for("mcts_shaped", {}, True))
    nodes = {n["id"]: n for n in tree["nodes"]}
    assert nodes[3]["parent"] == 1 and nodes[3]["ok"] is False and nodes[2]["visits"] == 3
    assert nodes[2]["feedback"][0]["feedback"] == "Next: engineer features" and tree["best_path"] == [1, 2]


def test_react_chain_and_a_reply_without_a_call():
    steps = call(1, 0, "read_data") + call(2, 1, "read_data") + [
        {"step_type": "invalid_reply", "node_id": 3, "parent_id": 2, "content_preview": "No tool call"}]
    tree = tree_from_steps(steps)
    assert [n["parent"] for n in tree["nodes"]] == [None, 0, 1, 2]
    assert tree["nodes"][3]["kind"] == "no_call" and tree["nodes"][3]["ok"] is False
    assert tree["summary"] == {} and "No search summary" in tree_page(tree)


def test_hierarchical_nodes_carry_their_subtask():
    steps = ([{"step_type": "subtask_start", "stage": 1, "name": "train_data_loading", "seeds": [0]}] + call(1, 0, "read_data")
             + [{"step_type": "subtask_start", "stage": 2, "name": "test_data_loading", "seeds": [1]}] + call(2, 1, "read_data"))
    tree = tree_from_steps(steps)
    assert [n["subtask"] for n in tree["nodes"]] == [None, 1, 2]
    assert tree["subtasks"] == {"1": "train_data_loading", "2": "test_data_loading"}


def test_hostile_text_cannot_close_the_script():
    steps = call(1, 0, "read_data", text="</script><script>alert(1)</script>")
    page = tree_page(tree_from_steps(steps))
    data = page.split("id='tree-data'>")[1].split("</script>")[0]
    assert json.loads(data)["nodes"][1]["observation"] == "</script><script>alert(1)</script>"


def test_orphans_and_junk_steps_do_not_break_it():
    steps = call(5, 4, "read_data") + [{"step_type": "tool_execution_completion", "node_id": "x"}, {"step_type": None}]
    tree = tree_from_steps(steps)
    assert tree["nodes"][1]["parent"] == 0   # its parent's line is missing: shown under the root


@pytest.mark.parametrize("planner", ["mcts_shaped", "hierarchical_mcts"])
def test_real_planner_trajectories_carry_node_statistics(tmp_path, planner):
    """The planners write every node's final visits/value/reward/stage/parent, and Hierarchical MCTS its
    subtask starts, so the viewer has what it shows."""
    from test_planners import _run

    record = _run(tmp_path, planner, max_iterations=6)
    tree = tree_from_steps(read_trajectory(Path(record.trajectory)))
    nodes = tree["nodes"]
    assert len(nodes) == record.tree_nodes + 1 and nodes[0]["visits"] > 0
    assert all(n["visits"] is not None and n["stage"] is not None for n in nodes)
    assert all(n["parent"] in {m["id"] for m in nodes} for n in nodes[1:])
    assert tree["best_path"] and all(n in {m["id"] for m in nodes} for n in tree["best_path"])
    # R is the reward the search backed up for a node (issue 59: every node showed R 0, the valid one too)
    assert nodes[0]["reward"] is None                        # the root is never evaluated
    assert all(n["reward"] is not None for n in nodes[1:] if n["visits"])
    if planner == "mcts_shaped":
        best = nodes[tree["best_path"][-1]]
        assert best["stage"] > 0 and best["reward"] > 0      # its stage rewards less 0.1 per level
        assert len({n["reward"] for n in nodes[1:] if n["visits"]}) > 1
    if planner == "hierarchical_mcts":
        assert tree["subtasks"]["1"] == "train_data_loading" and nodes[1]["subtask"] == 1
