"""JSONL trajectories in the shape of the paper's Appendix I.

Each line is one step: an LLM call (with usage), a tool execution started (full
call arguments) and completed (result preview and length), reward feedback, and
at the end the search tree's summary and best path. The first line carries the
format's version (``format_version``); the kinds and their fields are declared in
:mod:`mltb_core.stages.events`. ``mltb replay`` re-executes the tool calls of a
trajectory file.
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

from mltb_core.stages.events import TRAJECTORY_FORMAT, EventKind, read_events

__all__ = ["TrajectoryWriter", "read_trajectory", "tool_calls_from_trajectory", "PREVIEW_CHARS"]

PREVIEW_CHARS = 300


class TrajectoryWriter:
    """Appends steps to a JSONL file (or keeps them in memory when path is None); the first carries the
    format's version (:data:`~mltb_core.stages.events.TRAJECTORY_FORMAT`)."""

    def __init__(self, path: Path | None):
        self.path = Path(path) if path else None
        self.steps = 0
        self._fh = None
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.path, "w", encoding="utf-8")

    def write(self, step_type: EventKind | str, **fields: Any) -> None:
        """One event of kind ``step_type`` (an :class:`EventKind`; a plug-in planner's own kind is any other
        string, read with its envelope checked only)."""
        self.steps += 1
        version = {"format_version": TRAJECTORY_FORMAT} if self.steps == 1 else {}
        record = {**version, "step_number": self.steps, "timestamp": datetime.now(timezone.utc).isoformat(),
                  "step_type": step_type, **fields}
        if self._fh:
            self._fh.write(json.dumps(record, default=str) + "\n")
            self._fh.flush()

    def tool_started(self, node_id: int, parent_id: int | None, call: dict[str, Any], tool_id: str) -> None:
        self.write(EventKind.TOOL_STARTED, action="tool_execution_started", node_id=node_id,
                   parent_id=parent_id,
                   tools_to_execute=[{**call, "tool_id": tool_id}])

    def tool_completed(self, node_id: int, ok: bool, message: str, seconds: float) -> None:
        self.write(EventKind.TOOL_COMPLETED, action="tool_execution_completed", node_id=node_id,
                   tool_results=[{"message_type": "ToolMessage", "ok": ok,
                                  "content_preview": message[:PREVIEW_CHARS], "content_length": len(message)}],
                   seconds=round(seconds, 4))

    def close(self) -> None:
        if self._fh:
            self._fh.close()
            self._fh = None


def read_trajectory(path: Path) -> Iterator[dict[str, Any]]:
    """The events of a trajectory file (bounded: depth, size; each checked against its kind's declared fields,
    :mod:`mltb_core.stages.events`); ValueError ``file:line: reason`` at the first bad line (a replay runs a
    trajectory whole or not at all)."""
    read = read_events(path)
    if read.malformed:
        lineno, reason = read.malformed[0]
        raise ValueError(f"{path}:{lineno}: not a trajectory event: {reason}")
    yield from read.events


def tool_calls_from_trajectory(path: Path, best_path_only: bool = True) -> list[dict[str, Any]]:
    """The tool calls of a trajectory: the best path's when recorded, else every started call in order."""
    steps = list(read_trajectory(path))
    calls: dict[int, dict[str, Any]] = {}
    order: list[int] = []
    best: list[int] | None = None
    for step in steps:
        if step.get("step_type") == EventKind.TOOL_STARTED:
            for call in step.get("tools_to_execute", []):
                calls[step.get("node_id", len(order))] = {"tool_name": call["tool_name"],
                                                          "tool_args": call.get("tool_args", {})}
                order.append(step.get("node_id", len(order)))
        elif step.get("step_type") == EventKind.SEARCH_SUMMARY:
            best = step.get("best_path")
    ids = best if (best_path_only and best is not None) else order
    return [calls[i] for i in ids if i in calls]
