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
from typing import Any, Iterable

__all__ = ["tree_from_steps", "tree_page", "embed_json"]

ROOT_ID = 0


def _node(nodes: dict[int, dict], node_id: int) -> dict:
    return nodes.setdefault(node_id, {"id": node_id, "parent": None, "tool": None, "args": None, "ok": None,
                                      "observation": "", "observation_length": None, "seconds": None,
                                      "feedback": [], "proposals": [], "visits": None, "value": None,
                                      "reward": None, "stage": None, "subtask": None, "dead": None,
                                      "kind": "root" if node_id == ROOT_ID else "call"})


def tree_from_steps(steps: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The viewer's data: ``nodes`` (sorted by id), ``best_path``, ``summary``, ``config``, ``errors``,
    ``subtasks`` (number → name). Unknown step types are ignored; missing fields stay None."""
    nodes: dict[int, dict] = {}
    _node(nodes, ROOT_ID)
    subtask: int | None = None
    subtasks: dict[int, str] = {}
    summary: dict[str, Any] = {}
    config: dict[str, Any] = {}
    errors: list[str] = []
    for step in steps:
        kind = step.get("step_type")
        node_id = step.get("node_id")
        if kind == "trial_start":
            config = step.get("config") or {}
        elif kind == "subtask_start":
            subtask = step.get("stage")
            subtasks[subtask] = str(step.get("name", ""))
        elif kind in ("tool_execution_initiation", "invalid_reply") and isinstance(node_id, int):
            node = _node(nodes, node_id)
            node["parent"] = step.get("parent_id", ROOT_ID)
            node["subtask"] = subtask
            if kind == "invalid_reply":
                node.update(kind="no_call", ok=False, tool="(no tool call)",
                            observation=str(step.get("content_preview", "")))
            else:
                call = (step.get("tools_to_execute") or [{}])[0]
                node["tool"] = call.get("tool_name")
                node["args"] = call.get("tool_args")
        elif kind == "tool_execution_completion" and isinstance(node_id, int):
            node = _node(nodes, node_id)
            result = (step.get("tool_results") or [{}])[0]
            node["ok"] = result.get("ok")
            node["observation"] = str(result.get("content_preview", ""))
            node["observation_length"] = result.get("content_length")
            node["seconds"] = step.get("seconds")
        elif kind == "reward_feedback" and isinstance(node_id, int):
            _node(nodes, node_id)["feedback"].append({"stage": step.get("stage"), "passed": step.get("passed"),
                                                      "feedback": step.get("feedback"),
                                                      "predicted": step.get("predicted") is True})
        elif kind == "llm_call" and isinstance(node_id, int):
            texts = [c.get("text", "") for c in step.get("candidates") or []] or [step.get("text", "")]
            _node(nodes, node_id)["proposals"].append({"purpose": step.get("purpose"),
                                                       "texts": [t for t in texts if t]})
        elif kind == "search_summary":
            summary = {k: v for k, v in step.items() if k not in ("tree", "step_number", "timestamp", "step_type")}
            for stats in step.get("tree") or []:
                if isinstance(stats, dict) and isinstance(stats.get("id"), int):
                    node = _node(nodes, stats["id"])
                    for key in ("visits", "value", "reward", "stage", "dead"):
                        node[key] = stats.get(key)
                    if stats.get("parent") is not None:
                        node["parent"] = stats["parent"]
        elif kind in ("infra_error", "solver_died"):
            errors.append(str(step.get("error") or step.get("reason") or kind))
    for node in nodes.values():
        if node["id"] != ROOT_ID and node["parent"] not in nodes:
            node["parent"] = ROOT_ID  # a node whose parent line is missing still shows, under the root
    best = [n for n in summary.get("best_path") or [] if n in nodes]
    return {"nodes": [nodes[k] for k in sorted(nodes)], "best_path": best, "summary": summary,
            "config": config, "errors": errors, "subtasks": {str(k): v for k, v in subtasks.items()}}


def embed_json(data: Any) -> str:
    """JSON safe inside a <script> element (no '</script>' or '<!--' can close it early)."""
    text = json.dumps(data, default=str, ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def tree_page(tree: dict[str, Any]) -> str:
    """The viewer's HTML fragment (controls, rows, detail panel, data and script): templates/treeview.html,
    its script templates/treeview.js."""
    from mltb_core.analysis.templating import render

    return render("treeview.html", tree=tree, tree_json=embed_json(tree))
