"""Where a trial's tool calls run: the scratchpads of every node, the sandbox, the stage checks.

The episode (planner side) never holds model-made objects. It asks a *workspace* to run a call below
a node and gets back :class:`StepFacts`: plain data (text, names, numbers, the submission's bytes).
:class:`LocalWorkspace` does the work in the calling process; the trial runs it in an untrusted worker
process (:mod:`mltb_core.runner.worker`), so nothing the model asked for runs where the planner, the
LLM client, the records and the grader live. The facts crossing back are checked and capped by
:func:`StepFacts.from_json` before the trusted side uses them.
"""
from __future__ import annotations

import base64
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from mltb_core.bench.tasks import SUBMISSION_FILE
from mltb_core.llm import prompts
from mltb_core.stages.rewards import (REWARD_STAGES, PathLog, Progress, StageContext, advance, check_submission,
                                        read_submission_snapshot)
from mltb_core.toolkit import cvrecord
from mltb_core.toolkit.constraints import call_schema, readable_files
from mltb_core.toolkit.registry import ToolCall, ToolContext, ToolRegistry, execute
from mltb_core.toolkit.scratchpad import Scratchpad, describe_columns, describe_object, is_object_name
from mltb_core.toolkit.textsafety import cap_text

__all__ = ["StepFacts", "Workspace", "LocalWorkspace", "MAX_OBSERVATION_CHARS", "MAX_SUBMISSION_BYTES",
           "UntrustedReply", "ModelFault"]

MAX_OBSERVATION_CHARS = 8_000        # one tool result, or a full scratchpad listing, as the model sees it
                                     # (the context window is shared)
MAX_FEEDBACK_CHARS = 2_000
MAX_NAMES = 200
MAX_SUBMISSION_BYTES = 64 * 2**20    # far above any bundled test set's submission
ROOT = 0


class ModelFault(Exception):
    """Handling what the model produced, or what the worker answered while running it, failed: the trial ends
    as the model's ``planner_failure`` with this reason, never as an infrastructure error."""


class UntrustedReply(ValueError):
    """Facts from the tool worker that do not have the promised shape (a compromised or broken worker)."""


@dataclass
class StepFacts:
    """What one executed call did, as plain data."""

    ok: bool
    message: str                                    # the tool's result and the scratchpad listing
    written: list[str] = field(default_factory=list)
    submission: bytes | None = None                 # the submission file's bytes if this call (re)wrote it
    submission_check: tuple[bool, str] = (False, "")
    progress: Progress = field(default_factory=Progress)
    cv_scores: dict[str, float] = field(default_factory=dict)   # written model -> CV score, higher is better
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        p = self.progress
        return {"ok": self.ok, "message": self.message, "written": self.written,
                "submission": None if self.submission is None else base64.b64encode(self.submission).decode(),
                "submission_check": list(self.submission_check),
                "progress": {"stage": p.stage, "reward": p.reward, "cv_quality": p.cv_quality,
                             "feedback": p.feedback, "newly_passed": list(p.newly_passed),
                             "predicted": p.predicted},
                "cv_scores": self.cv_scores, "seconds": self.seconds}

    @classmethod
    def from_json(cls, data: Any, previous: Progress) -> StepFacts:
        """Rebuild facts sent by the worker, refusing anything of the wrong type or out of range; text is
        capped. ``previous`` is the parent node's progress (stages only ever advance)."""
        if not isinstance(data, dict):
            raise UntrustedReply("the step reply is not an object")
        ok = _typed(data, "ok", bool)
        message = cap_text(_typed(data, "message", str), MAX_OBSERVATION_CHARS)
        written = _names(data.get("written"))
        raw_sub = data.get("submission")
        submission = None
        if raw_sub is not None:
            if not isinstance(raw_sub, str) or len(raw_sub) > MAX_SUBMISSION_BYTES * 4 // 3 + 4:
                raise UntrustedReply("field 'submission' is not base64 text of an allowed size")
            try:
                submission = base64.b64decode(raw_sub, validate=True)
            except ValueError:
                raise UntrustedReply("field 'submission' is not base64") from None
        check = data.get("submission_check")
        if not (isinstance(check, list) and len(check) == 2 and isinstance(check[0], bool) and isinstance(check[1], str)):
            raise UntrustedReply("field 'submission_check' is not [bool, text]")
        progress = _progress(data.get("progress"), previous)
        scores = data.get("cv_scores")
        if not isinstance(scores, dict) or len(scores) > MAX_NAMES:
            raise UntrustedReply("field 'cv_scores' is not an object")
        cv_scores = {}
        for name, value in scores.items():
            if name not in written or not _finite(value):
                raise UntrustedReply("field 'cv_scores' names an object the call did not write, or is not a number")
            cv_scores[name] = float(value)
        seconds = data.get("seconds")
        if not _finite(seconds) or seconds < 0:
            raise UntrustedReply("field 'seconds' is not a non-negative number")
        return cls(ok, message, written, submission, (check[0], cap_text(check[1], MAX_FEEDBACK_CHARS)),
                   progress, cv_scores, float(seconds))


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _typed(data: dict, name: str, kind: type) -> Any:
    value = data.get(name)
    if not isinstance(value, kind):
        raise UntrustedReply(f"field {name!r} is not {kind.__name__}")
    return value


def _names(value: Any) -> list[str]:
    if not isinstance(value, list) or len(value) > MAX_NAMES:
        raise UntrustedReply("field 'written' is not a list of names")
    if not all(is_object_name(n) for n in value):   # the scratchpad's own rule: a worker cannot have written it
        raise UntrustedReply("field 'written' holds something that is not an object name")
    return list(value)


def _progress(value: Any, previous: Progress) -> Progress:
    if not isinstance(value, dict):
        raise UntrustedReply("field 'progress' is not an object")
    stage, reward, quality = value.get("stage"), value.get("reward"), value.get("cv_quality")
    passed, feedback = value.get("newly_passed"), value.get("feedback")
    if not (isinstance(stage, int) and not isinstance(stage, bool) and previous.stage <= stage <= len(REWARD_STAGES)):
        raise UntrustedReply("field 'progress.stage' is not a stage at or after the parent's")
    if not _finite(reward) or not 0 <= reward <= len(REWARD_STAGES):
        raise UntrustedReply("field 'progress.reward' is out of range")
    if quality is not None and not (_finite(quality) and 0 <= quality <= 1):
        raise UntrustedReply("field 'progress.cv_quality' is out of range")
    if not isinstance(feedback, str):
        raise UntrustedReply("field 'progress.feedback' is not text")
    if passed != list(range(previous.stage + 1, stage + 1)):
        raise UntrustedReply("field 'progress.newly_passed' does not match the stages passed")
    predicted = value.get("predicted")
    if not isinstance(predicted, bool) or (predicted and stage != len(REWARD_STAGES) - 1):
        raise UntrustedReply("field 'progress.predicted' is not a bool, or is true before the last stage")
    return Progress(stage, float(reward), None if quality is None else float(quality),
                    cap_text(feedback, MAX_FEEDBACK_CHARS), tuple(passed), predicted)


class Workspace(Protocol):
    """The narrow interface between a planner's episode and the place its tool calls run. Node ids are the
    episode's; the root is node 0."""

    def step(self, parent: int, node: int, call: ToolCall, allowed: list[str] | None) -> StepFacts: ...
    def call_schema(self, node: int, allowed: list[str] | None) -> dict[str, Any] | None: ...
    def listing(self, node: int) -> str: ...
    def close(self) -> None: ...


@dataclass
class _State:
    pad: Scratchpad
    log: PathLog = field(default_factory=PathLog)
    progress: Progress = field(default_factory=Progress)
    found: dict[str, Any] = field(default_factory=dict)


class LocalWorkspace:
    """Runs calls in this process: per-node path-local scratchpads, the trial's sandbox and the stage checks.

    Every failure while executing, observing or rewarding a call is that call's failure (text for the
    model), never an exception out of :meth:`step`: what the model asked for cannot stop the trial.
    """

    def __init__(self, stage_ctx: StageContext, tool_ctx: ToolContext, registry: ToolRegistry):
        self.stage_ctx, self.tool_ctx, self.registry = stage_ctx, tool_ctx, registry
        self._states: dict[int, _State] = {ROOT: _State(Scratchpad())}

    def step(self, parent: int, node: int, call: ToolCall, allowed: list[str] | None = None) -> StepFacts:
        base = self._states[parent]
        pad = base.pad.child()
        sandbox = Path(self.tool_ctx.sandbox)
        before = _mtime(sandbox / SUBMISSION_FILE)
        result = execute(call, pad, self.tool_ctx, self.registry, allowed=allowed)
        message, ok, written = result.message, result.ok, list(result.written)
        try:
            snapshot = read_submission_snapshot(sandbox, before) if ok else None
            if snapshot is not None and len(snapshot) > MAX_SUBMISSION_BYTES:
                raise ValueError(f"the submission file is larger than {MAX_SUBMISSION_BYTES // 2**20} MiB")
            check = check_submission(self.stage_ctx, snapshot) if snapshot is not None else None
            log = base.log.extend(call, ok, written, snapshot, check, before=base.pad)
            progress, found = advance(self.stage_ctx, base.progress, pad, log, base.found)
            metric = getattr(self.tool_ctx.task, "metric", None)
            cv_scores = {n: s for n in written if (s := _cv_score(pad.get(n), metric)) is not None}
        except Exception as exc:  # noqa: BLE001 - checking the model's result failed: the call failed
            pad, ok, written, snapshot, check, log = base.pad.child(), False, [], None, None, base.log
            progress, found, cv_scores = base.progress, base.found, {}
            message = f"Error: the result of {call.tool_name} could not be checked ({type(exc).__name__}: {exc})."
        self._states[node] = _State(pad, log, progress, found)
        if pad.local_names:
            listing = "\n".join(self._line(pad, n) for n in pad.names())
            message = f"{message}\n\n{prompts.scratchpad_note(listing)}"
        return StepFacts(ok, cap_text(message, MAX_OBSERVATION_CHARS), written, snapshot,
                         check or (False, ""), progress, cv_scores, result.seconds)

    def call_schema(self, node: int, allowed: list[str] | None = None) -> dict[str, Any] | None:
        allowed_set = set(allowed) if allowed is not None else None
        tools = [t for t in self.registry if allowed_set is None or t.name in allowed_set]
        return call_schema(tools, self._states[node].pad,
                           readable_files(self.tool_ctx.data_dir, self.tool_ctx.sandbox))

    def listing(self, node: int) -> str:
        pad = self._states[node].pad
        return "\n".join(self._line(pad, n, columns=True) for n in pad.names())

    def close(self) -> None:
        self._states.clear()

    @staticmethod
    def _line(pad: Scratchpad, name: str, columns: bool = False) -> str:
        """One listing line; columns only for what this step wrote (keeps the context short) or if asked."""
        obj = pad.get(name)
        line = f"- {name}: {describe_object(obj)}"
        if columns or name in pad.local_names:
            cols = describe_columns(obj)
            line += f" {cols}" if cols else ""
        return line


def _cv_score(model: Any, metric: str | None) -> float | None:
    """The CV score a model-fitting tool attached to its model, oriented so that higher is better; None when
    it is in another metric than ``metric`` (the task's): scores in two metrics do not rank solutions."""
    record = cvrecord.read(model)
    if record is None or (metric is not None and record.metric is not None and record.metric != metric):
        return None
    return record.oriented


def _mtime(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except (FileNotFoundError, NotADirectoryError):
        return None

