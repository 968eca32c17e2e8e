"""The search-tree viewer of one trial: a self-contained HTML page (no network) built from its trajectory.

:func:`tree_from_steps` turns trajectory lines (see mltb_core.planners.trajectory) into a tree: one node
per tool call (or reply without one) with its call, arguments, observation, stage feedback and the
search statistics the run ended with (visits, mean value, reward, stage: the ``tree`` list of the
``search_summary`` line), the best path, and for Hierarchical MCTS the subtask each node was created
in (``subtask_start`` lines). :func:`tree_page` renders it: an indented, collapsible tree (an only
child stays at its parent's indentation, so a ReAct chain reads as a list and only real branching
indents), the best path highlighted, filters (errors only, best path only) and a detail panel that
shows a clicked node's call, arguments, observation and feedback as text. Numbers are rounded on
screen; the embedded JSON keeps them exact. The page is templates/treeview.html (Jinja2, autoescaped) with
its script templates/treeview.js.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from mltb_core.stages.events import ENVELOPE, EventKind

__all__ = ["tree_from_steps", "tree_page", "embed_json"]

ROOT_ID = 0


def _node(nodes: dict[int, dict], node_id: int) -> dict:
    return nodes.setdefault(node_id, {"id": node_id, "parent": None, "tool": None, "args": None, "ok": None,
                                      "observation": "", "observation_length": None, "seconds": None,
                                      "feedback": [], "proposals": [], "visits": None, "value": None,
                                      "reward": None, "stage": None, "subtask": None, "dead": None,
                                      "kind": "root" if node_id == ROOT_ID else "call"})


@dataclass
class _Tree:
    """The viewer's data as the events build it, one method per kind of event it reads."""
    nodes: dict[int, dict] = field(default_factory=dict)
    subtask: int | None = None       # the subtask the events now belong to (Hierarchical MCTS)
    subtasks: dict[int, str] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def trial_start(self, step: dict[str, Any]) -> None:
        self.config = step.get("config") or {}

    def subtask_start(self, step: dict[str, Any]) -> None:
        stage = self.subtask = step.get("stage")
        self.subtasks[stage] = str(step.get("name", ""))

    def search_summary(self, step: dict[str, Any]) -> None:
        self.summary = {k: v for k, v in step.items() if k != "tree" and k not in ENVELOPE}
        for stats in step.get("tree") or []:
            if isinstance(stats, dict) and isinstance(stats.get("id"), int):
                node = _node(self.nodes, stats["id"])
                for key in ("visits", "value", "reward", "stage", "dead"):
                    node[key] = stats.get(key)
                if stats.get("parent") is not None:
                    node["parent"] = stats["parent"]

    def error(self, step: dict[str, Any]) -> None:
        self.errors.append(str(step.get("error") or step.get("reason") or step.get("step_type")))

    def _placed(self, node_id: int, step: dict[str, Any]) -> dict:
        node = _node(self.nodes, node_id)
        node["parent"] = step.get("parent_id", ROOT_ID)
        node["subtask"] = self.subtask
        return node

    def tool_started(self, node_id: int, step: dict[str, Any]) -> None:
        node = self._placed(node_id, step)
        call = (step.get("tools_to_execute") or [{}])[0]
        node["tool"] = call.get("tool_name")
        node["args"] = call.get("tool_args")

    def invalid_reply(self, node_id: int, step: dict[str, Any]) -> None:
        self._placed(node_id, step).update(kind="no_call", ok=False, tool="(no tool call)",
                                           observation=str(step.get("content_preview", "")))

    def tool_completed(self, node_id: int, step: dict[str, Any]) -> None:
        node = _node(self.nodes, node_id)
        result = (step.get("tool_results") or [{}])[0]
        node["ok"] = result.get("ok")
        node["observation"] = str(result.get("content_preview", ""))
        node["observation_length"] = result.get("content_length")
        node["seconds"] = step.get("seconds")

    def reward_feedback(self, node_id: int, step: dict[str, Any]) -> None:
        _node(self.nodes, node_id)["feedback"].append({"stage": step.get("stage"), "passed": step.get("passed"),
                                                       "feedback": step.get("feedback"),
                                                       "predicted": step.get("predicted") is True})

    def llm_call(self, node_id: int, step: dict[str, Any]) -> None:
        texts = [c.get("text", "") for c in step.get("candidates") or []] or [step.get("text", "")]
        _node(self.nodes, node_id)["proposals"].append({"purpose": step.get("purpose"),
                                                        "texts": [t for t in texts if t]})

    def data(self) -> dict[str, Any]:
        for node in self.nodes.values():
            if node["id"] != ROOT_ID and node["parent"] not in self.nodes:
                node["parent"] = ROOT_ID  # a node whose parent line is missing still shows, under the root
        best = [n for n in self.summary.get("best_path") or [] if n in self.nodes]
        return {"nodes": [self.nodes[k] for k in sorted(self.nodes)], "best_path": best, "summary": self.summary,
                "config": self.config, "errors": self.errors,
                "subtasks": {str(k): v for k, v in self.subtasks.items()}}


# The events of the trial as a whole, and those of one node (passed over without an integer node_id).
_OF_TRIAL: dict[str, Callable[[_Tree, dict[str, Any]], None]] = {
    EventKind.TRIAL_START: _Tree.trial_start, EventKind.SUBTASK_START: _Tree.subtask_start,
    EventKind.SEARCH_SUMMARY: _Tree.search_summary, EventKind.INFRA_ERROR: _Tree.error,
    EventKind.SOLVER_DIED: _Tree.error}
_OF_NODE: dict[str, Callable[[_Tree, int, dict[str, Any]], None]] = {
    EventKind.TOOL_STARTED: _Tree.tool_started, EventKind.INVALID_REPLY: _Tree.invalid_reply,
    EventKind.TOOL_COMPLETED: _Tree.tool_completed, EventKind.REWARD_FEEDBACK: _Tree.reward_feedback,
    EventKind.LLM_CALL: _Tree.llm_call}


def tree_from_steps(steps: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The viewer's data: ``nodes`` (sorted by id), ``best_path``, ``summary``, ``config``, ``errors``,
    ``subtasks`` (number → name). Unknown step types are ignored; missing fields stay None."""
    tree = _Tree()
    _node(tree.nodes, ROOT_ID)
    for step in steps:
        kind = step.get("step_type")
        if not isinstance(kind, str):
            continue
        node_id = step.get("node_id")
        if kind in _OF_TRIAL:
            _OF_TRIAL[kind](tree, step)
        elif kind in _OF_NODE and isinstance(node_id, int):
            _OF_NODE[kind](tree, node_id, step)
    return tree.data()


def embed_json(data: Any) -> str:
    """JSON safe inside a <script> element (no '</script>' or '<!--' can close it early)."""
    text = json.dumps(data, default=str, ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def tree_page(tree: dict[str, Any]) -> str:
    """The viewer's HTML fragment (controls, rows, detail panel, data and script): templates/treeview.html,
    its script templates/treeview.js."""
    from mltb_core.analysis.templating import render

    return render("treeview.html", tree=tree, tree_json=embed_json(tree))
