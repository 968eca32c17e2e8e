"""The trajectory's event kinds and their fields, declared once, and the one boundary that reads them.

A trajectory (``mltb_core.planners.trajectory``) is one JSON object per line, each an event with a
``step_type``. Every reader of a run's trajectories (report pages, the tree view, findings, ``compare``,
``replay``, AgentK's memory) takes its events from :func:`parse_events` / :func:`read_events`: an event
whose declared fields have the wrong type or range (a tree entry's ``parent`` a list, ``tool_results: 5``,
a started call without ``tool_name``, an integer of 400 digits) is reported with its line and reason and
skipped, so no reader meets one and no single line can end a report. Fields not declared here pass
unchecked (no reader may rely on them); kinds not declared pass with their envelope checked only.

The kinds are :class:`EventKind`, each declared with its fields in :data:`EVENTS`; writers and readers name
a kind by its member (``EventKind.LLM_CALL``), never by a bare string. A kind a plug-in planner writes on
its own (any string) is no member and passes with its envelope checked only.

The format has a version (:data:`TRAJECTORY_FORMAT`): :class:`~mltb_core.planners.trajectory.TrajectoryWriter`
writes it as the first event's ``format_version``, and a reader takes it from the first line that is a JSON
object (a trajectory without one is version 1, every trajectory mltb wrote before version 2). A newer
version is refused with a reason, whatever its first event looks like; an older one is brought up to date
by :data:`_MIGRATIONS`, as records are (``analysis/records.py``).
"""
from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Callable

from mltb_core.bench.documents import json_lines
from mltb_core.stages.specs import STAGE_COUNT

__all__ = ["TRAJECTORY_FORMAT", "EventKind", "EVENTS", "ENVELOPE", "Shape", "TrajectoryRead", "parse_events",
           "read_events", "check_event", "format_of", "MAX_NODE_ID", "MAX_EVENT_COUNT"]

# The trajectory format's version. Raise it when an event kind or field changes meaning, and add a step to
# _MIGRATIONS that turns an event of the version before into one of this version.
#   1: the trajectories mltb wrote before version 2 (no format_version field)
#   2: the first event carries format_version; no kind or field changed meaning
TRAJECTORY_FORMAT = 2

MAX_NODE_ID = 10**9          # node ids are a trial's node count
MAX_EVENT_COUNT = 10**15     # tokens, counts and lengths of one event


@dataclass(frozen=True)
class Shape:
    """What one JSON value may be: its types, a number's range, a list's item shape, an object's fields
    (``required`` among them), a map's value shape; ``optional`` admits null."""
    types: tuple[type, ...]
    low: int | None = None
    high: int | None = None
    items: Shape | None = None
    fields: Mapping[str, Shape] | None = None
    required: tuple[str, ...] = ()
    values: Shape | None = None
    optional: bool = False

    def problem(self, value: Any, where: str) -> str | None:
        """Why ``value`` does not fit (naming ``where``), or None."""
        if value is None:
            return None if self.optional else f"{where} is null"
        if isinstance(value, bool) and bool not in self.types or not isinstance(value, self.types):
            return f"{where} is a JSON {_json_name(value)}, not {' or '.join(map(_json_name_of, self.types))}"
        if isinstance(value, float) and not math.isfinite(value):
            return f"{where} is not a finite number"
        if isinstance(value, (int, float)) and not isinstance(value, bool) and (
                (self.low is not None and value < self.low) or (self.high is not None and value > self.high)):
            return f"{where} is {_short(value)}, not from {self.low} to {self.high}"
        if isinstance(value, list) and self.items is not None:
            return next((p for i, item in enumerate(value)
                         if (p := self.items.problem(item, f"{where}[{i}]")) is not None), None)
        if isinstance(value, dict):
            return self._object_problem(value, where)
        return None

    def _object_problem(self, value: dict, where: str) -> str | None:
        missing = [name for name in self.required if name not in value]
        if missing:
            return f"{where} lacks {', '.join(missing)}"
        for name, shape in (self.fields or {}).items():
            if name in value and (p := shape.problem(value[name], f"{where}.{name}")) is not None:
                return p
        if self.values is not None:
            return next((p for key, item in value.items()
                         if (p := self.values.problem(item, f"{where}.{key}")) is not None), None)
        return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}…({len(text)} characters)"


_JSON_NAMES = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}


def _json_name_of(kind: type) -> str:
    return _JSON_NAMES.get(kind, kind.__name__)


def _json_name(value: Any) -> str:
    return "null" if value is None else _json_name_of(type(value))


def _int(low: int = 0, high: int | None = MAX_EVENT_COUNT, optional: bool = False) -> Shape:
    return Shape((int,), low=low, high=high, optional=optional)


def _list(items: Shape, optional: bool = False) -> Shape:
    return Shape((list,), items=items, optional=optional)


def _object(fields: Mapping[str, Shape], required: tuple[str, ...] = (), optional: bool = False) -> Shape:
    return Shape((dict,), fields=fields, required=required, optional=optional)


TEXT = Shape((str,))
OPTIONAL_TEXT = Shape((str,), optional=True)
FLAG = Shape((bool,))
OPTIONAL_FLAG = Shape((bool,), optional=True)
NUMBER = Shape((int, float))
OPTIONAL_NUMBER = Shape((int, float), optional=True)
OBJECT = Shape((dict,))
NODE = _int(0, MAX_NODE_ID)
OPTIONAL_NODE = _int(0, MAX_NODE_ID, optional=True)
STAGE = _int(0, STAGE_COUNT)
# A tool call as the trajectory records it (ToolCall.to_dict plus the call's id); bindings name frames.
CALL = _object({"tool_name": TEXT, "tool_id": TEXT,
                "tool_args": _object({"bindings": Shape((dict,), values=TEXT), "func_kwargs": OBJECT,
                                      "output": Shape((str, list), items=TEXT, optional=True)})},
               required=("tool_name",))
CANDIDATE = _object({"text": TEXT, "tool_calls": _list(CALL), "error": OPTIONAL_TEXT})
USAGE = Shape((dict,), values=Shape((int, float), low=0, high=MAX_EVENT_COUNT, optional=True))

# Every event: its place in the file and when it was written.
ENVELOPE: Mapping[str, Shape] = {"step_type": TEXT, "step_number": _int(), "timestamp": TEXT,
                                 "format_version": _int(1, None)}


class EventKind(StrEnum):
    """The kinds of event mltb writes (the ``step_type`` of a trajectory line); :data:`EVENTS` declares each
    one's fields."""
    TRIAL_START = "trial_start"
    SUBTASK_START = "subtask_start"
    TOOL_STARTED = "tool_execution_initiation"
    TOOL_COMPLETED = "tool_execution_completion"
    INVALID_REPLY = "invalid_reply"
    REWARD_FEEDBACK = "reward_feedback"
    LLM_CALL = "llm_call"
    JUDGE_SCORE = "judge_score"
    CONTEXT_TRIMMED = "context_trimmed"
    REPLAY_ENDED = "replay_ended"
    SEARCH_SUMMARY = "search_summary"
    INFRA_ERROR = "infra_error"
    SOLVER_DIED = "solver_died"
    WORKER_FAILED = "worker_failed"
    MODEL_FAULT = "model_fault"
    UNIT_TEST = "unit_test"              # AgentK's unit test of a stage
    SOLUTION = "solution"                # AutoMind's and MLE-STAR's whole solutions
    SOLUTION_UNCHANGED = "solution_unchanged"
    ABLATION = "ablation"                # MLE-STAR's ablation of a block
    ENSEMBLE = "ensemble"                # MLE-STAR's ensemble


_K = EventKind
# The event kinds and the fields a reader may rely on (the writers: planners/trajectory.py, episode.py,
# runner/trial.py, runner/checkpoint.py and the planners' own events).
EVENTS: Mapping[EventKind, Mapping[str, Shape]] = {
    _K.TRIAL_START: {"task": TEXT, "config": _object({"max_llm_calls": _int(optional=True), "knobs": Shape(
        (dict,), optional=True)}), "seed": _int(), "synthetic": FLAG, "feedback": FLAG, "prompt": OPTIONAL_TEXT},
    _K.SUBTASK_START: {"stage": STAGE, "name": TEXT, "seeds": _list(NODE)},
    _K.TOOL_STARTED: {"node_id": NODE, "parent_id": OPTIONAL_NODE, "action": TEXT,
                      "tools_to_execute": _list(CALL)},
    _K.TOOL_COMPLETED: {"node_id": NODE, "action": TEXT, "seconds": NUMBER, "tool_results": _list(
        _object({"ok": OPTIONAL_FLAG, "content_preview": TEXT, "content_length": _int(),
                 "message_type": TEXT}))},
    _K.INVALID_REPLY: {"node_id": NODE, "parent_id": OPTIONAL_NODE, "content_preview": TEXT},
    _K.REWARD_FEEDBACK: {"node_id": NODE, "stage": STAGE, "passed": _list(STAGE), "feedback": OPTIONAL_TEXT,
                         "predicted": OPTIONAL_FLAG, "shown_to_model": OPTIONAL_FLAG},
    _K.LLM_CALL: {"node_id": NODE, "purpose": TEXT, "n": _int(), "constrained": FLAG, "text": TEXT,
                  "candidates": _list(CANDIDATE), "usage": USAGE},
    _K.JUDGE_SCORE: {"node_id": NODE, "score": OPTIONAL_NUMBER, "scored": FLAG},
    _K.CONTEXT_TRIMMED: {"node_id": NODE, "reason": TEXT},
    _K.REPLAY_ENDED: {"reason": TEXT, "replayed_requests": _int(), "replayed_llm_calls": _int()},
    _K.SEARCH_SUMMARY: {"nodes": _int(), "best_node": OPTIONAL_NODE, "best_stage": STAGE, "best_depth": _int(),
                        "best_value": OPTIONAL_NUMBER, "stop_reason": TEXT, "stop_kind": TEXT,
                        "best_path": _list(NODE),
                        "tree": _list(_object({"id": NODE, "parent": OPTIONAL_NODE,
                                               "visits": _int(optional=True), "value": OPTIONAL_NUMBER,
                                               "reward": OPTIONAL_NUMBER,
                                               "stage": _int(0, STAGE_COUNT, optional=True),
                                               "ok": OPTIONAL_FLAG, "dead": OPTIONAL_FLAG}, required=("id",)))},
    _K.INFRA_ERROR: {"error": TEXT},
    _K.SOLVER_DIED: {"reason": TEXT},
    _K.WORKER_FAILED: {"reason": TEXT, "stderr": OPTIONAL_TEXT},
    _K.MODEL_FAULT: {"reason": TEXT},
    _K.UNIT_TEST: {"planner": TEXT}, _K.SOLUTION: {"planner": TEXT}, _K.SOLUTION_UNCHANGED: {"planner": TEXT},
    _K.ABLATION: {"planner": TEXT}, _K.ENSEMBLE: {"planner": TEXT},
}

# An object without a step_type is no event any reader looks at: it passes, as an unknown kind does.
_EVENT_SHAPES: dict[str, Shape] = {kind: _object({**ENVELOPE, **fields}) for kind, fields in EVENTS.items()}
_ANY_KIND = _object(ENVELOPE)


def _from_1(event: dict[str, Any]) -> dict[str, Any]:
    return event     # version 2 only put the version on the first line: a version-1 event means the same


# version n → the step that makes an event of version n one of version n + 1
_MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _from_1}


def check_event(event: Any) -> str | None:
    """Why ``event`` (a parsed JSON line) is not a well-formed trajectory event, or None."""
    if not isinstance(event, dict):
        return f"a JSON {_json_name(event)}, not an event object"
    kind = event.get("step_type")
    shape = _EVENT_SHAPES.get(kind, _ANY_KIND) if isinstance(kind, str) else _ANY_KIND
    return shape.problem(event, "the event")


@dataclass
class TrajectoryRead:
    """A trajectory's well-formed events, in order, and ``(line number, reason)`` per line that was skipped."""
    events: list[dict[str, Any]] = field(default_factory=list)
    malformed: list[tuple[int, str]] = field(default_factory=list)

    def note(self, limit: int = 3) -> str:
        """One sentence on the skipped lines ('' when none were)."""
        if not self.malformed:
            return ""
        shown = "; ".join(f"line {n}: {why}" for n, why in self.malformed[:limit]) + \
            ("; …" if len(self.malformed) > limit else "")
        return f"{len(self.malformed)} trajectory line(s) were malformed and are not shown ({shown})"


def format_of(value: Any) -> int:
    """The format version a trajectory's first JSON object declares (``format_version``; 1 without one, or
    when it is no version number, which :func:`check_event` reports)."""
    version = value.get("format_version", 1) if isinstance(value, dict) else 1
    return version if isinstance(version, int) and not isinstance(version, bool) and version >= 1 else 1


def parse_events(lines: Iterable[tuple[int, Any, str | None]]) -> TrajectoryRead:
    """The events of ``lines`` (:func:`mltb_core.bench.documents.json_lines`' triples), each checked against
    its kind's declaration and migrated to :data:`TRAJECTORY_FORMAT`; a bad line is recorded and skipped.
    The version is the first JSON object's (:func:`format_of`), read before its shape is checked: a newer
    format is refused whole, with the reason, even when its events no longer fit today's declaration."""
    read = TrajectoryRead()
    version: int | None = None
    for lineno, value, reason in lines:
        if version is None and reason is None and isinstance(value, dict):
            version = format_of(value)
            if version > TRAJECTORY_FORMAT:
                read.malformed.append((lineno, f"a trajectory of format {version}, written by a newer mltb "
                                               f"(this one reads up to {TRAJECTORY_FORMAT})"))
                return read
        problem = reason if reason is not None else check_event(value)
        if problem is not None:
            read.malformed.append((lineno, problem))
            continue
        event = value
        for step in range(version or 1, TRAJECTORY_FORMAT):
            event = _MIGRATIONS[step](event)
        read.events.append(event)
    return read


def read_events(path: str | os.PathLike) -> TrajectoryRead:
    """The events of the trajectory file at ``path`` (bounded: size, depth, the integer digit limit);
    ``OSError`` when it cannot be read, ``ValueError`` when it is too large."""
    return parse_events(json_lines(path))
