"""A trial's checkpoint: every answered LLM request on disk, so that ``--resume`` continues an interrupted
trial where it stopped instead of starting it again.

The file (:attr:`TrialFiles.checkpoint`) has one JSON line per request the model answered, written as the
answer arrives: the request's identity (:func:`request_identity`: a digest of everything sent and of what
else decides the reply), the reply whole with the usage it was charged (the trajectory keeps only
previews), and a check digest of the reply. A trial that finds a checkpoint of the same case in its work directory runs again from the
start with the same seed, and :class:`ReplayingBackend` answers each request from the record instead of
the model while the request is the recorded one, in order; tool calls execute again (they are
deterministic and cheap). The first request that differs, a damaged or torn line, or the record's end
stops the replay for good: the rest of the trial runs live, and the record says so (``extra.resumed``).
A trial that ends with a record removes its checkpoint, but after an infrastructure error (whose rerun
replays it); an interrupt or a killed process leaves it.

Accounting: a replayed call counts as it was charged when the model answered it (its tokens, cost, calls
and seconds), so a resumed trial's record equals the uninterrupted one; the interrupted session wrote no
record, so nothing is counted twice. The checkpoint file is hostile input (a run directory a user hands
in, a write cut by ``kill -9``): read once, bounded, and nothing in it can crash the trial or answer a
request it was not the answer to.
"""
from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, BinaryIO

from mltb_core.bench.documents import JSONShapeError, check_document_size, json_lines
from mltb_core.llm.base import Candidate, ContextOverflowError, LLMBackend, LLMResponse, Usage, admitted
from mltb_core.planners.trajectory import TrajectoryWriter
from mltb_core.toolkit.registry import ToolCallError
from mltb_core.stages.events import EventKind

__all__ = ["TrialCheckpoint", "ReplayingBackend", "request_identity", "kept_for_resume", "CHECKPOINT_VERSION"]

CHECKPOINT_VERSION = 1


def request_identity(backend: LLMBackend, messages: list[dict], tools: list[dict], n: int, temperature: float,
                     seed: int | None, call_schema: dict | None) -> str:
    """sha256 over a request and what besides it decides the reply (the backend's identity, the trial seed)."""
    payload = {"v": CHECKPOINT_VERSION, "backend": backend.response_identity, "trial_seed": backend.seed,
               "messages": messages, "tools": tools, "n": n, "temperature": temperature, "seed": seed,
               "call_schema": call_schema}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode("ascii")).hexdigest()


def _check(value: Any) -> str:
    """A line's check digest of what it records (a reply or an overflow): an edited or rotten line is refused."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode("ascii")).hexdigest()


def _calls(usage: Usage) -> int:
    """The LLM calls a reply stands for (a reply from mltb's response cache counts its original calls)."""
    return usage.calls + usage.cached_calls


def _usage(data: Any) -> Usage:
    """A recorded usage, every field a finite, non-negative number (ValueError otherwise)."""
    if not isinstance(data, dict):
        raise ValueError("its usage is not an object")
    values: dict[str, Any] = {}
    for f in fields(Usage):
        value = data.get(f.name, 0)
        whole = f.type in (int, "int")
        if (isinstance(value, bool) or not isinstance(value, int if whole else (int, float))
                or not math.isfinite(value) or value < 0):
            raise ValueError(f"its usage field {f.name!r} is not a non-negative {'integer' if whole else 'number'}")
        values[f.name] = value if whole else float(value)
    return Usage(**values)


@dataclass(frozen=True)
class _Entry:
    """One recorded request: its identity and either the reply or the context overflow it met."""

    request: str
    offset: int                     # where its line starts in the file (the replay cuts the file there)
    elapsed: float                  # the trial's seconds when the answer arrived
    response: LLMResponse | None
    overflow: str | None

    @classmethod
    def parse(cls, value: Any, offset: int) -> _Entry:
        """ValueError naming what is wrong with a line that is not a recorded request."""
        if not isinstance(value, dict) or value.get("v") != CHECKPOINT_VERSION:
            raise ValueError(f"not a version-{CHECKPOINT_VERSION} checkpoint line")
        request = value.get("request")
        if not isinstance(request, str) or len(request) != 64:
            raise ValueError("no request identity")
        elapsed = value.get("elapsed")
        if isinstance(elapsed, bool) or not isinstance(elapsed, (int, float)) or not 0 <= elapsed < 1e9:
            raise ValueError("no elapsed seconds")
        recorded = value.get("overflow", value.get("reply"))
        if value.get("check") != _check(recorded):
            raise ValueError("its check digest does not match what it records")
        if isinstance(value.get("overflow"), str):
            return cls(request, offset, float(elapsed), None, value["overflow"][:2_000])
        reply = value.get("reply")
        if not isinstance(reply, dict) or not isinstance(reply.get("candidates"), list) or not reply["candidates"]:
            raise ValueError("no reply with candidates")
        try:
            candidates = [Candidate.from_dict(c) for c in reply["candidates"]]
        except (AttributeError, KeyError, TypeError, ValueError, ToolCallError) as exc:
            raise ValueError(f"a candidate cannot be read ({type(exc).__name__})") from None
        if not all(isinstance(c.text, str) and (c.error is None or isinstance(c.error, str)) for c in candidates):
            raise ValueError("a candidate's text or error is not a string")
        return cls(request, offset, float(elapsed), admitted(LLMResponse(candidates, _usage(reply.get("usage")))), None)


class TrialCheckpoint:
    """The checkpoint of one trial attempt at ``path``: the entries an earlier, unfinished run left there
    (read once, up to the first damaged line), then the requests of this run, appended as they are answered.

    While replaying nothing is written: the replayed lines are on disk already. When the replay stops, the
    file is cut where the first entry not replayed starts (a stale or damaged tail), and from then on each
    live answer is appended and flushed, so an interrupt loses at most the request in flight.
    """

    def __init__(self, path: Path | None, started: float | None = None):
        self.path = Path(path) if path else None
        self.started = time.monotonic() if started is None else started   # the trial's start (monotonic clock)
        self._last_replay: tuple[float, float] | None = None   # (the trial's seconds it records, when replayed)
        self.entries: list[_Entry] = []
        self.damaged: str | None = None    # why reading stopped before the file's end
        self.end = 0                       # the byte after the last entry read (its newline included)
        self.size = 0                      # the file's size when read
        self.replayed = 0                  # entries answered from the record
        self.replayed_calls = 0            # the LLM calls they stand for
        self.stopped: str | None = None    # why the replay stopped (None: still replaying, or nothing to replay)
        self._fh: BinaryIO | None = None
        if self.path is not None and self.path.is_file():
            self._read()

    def _read(self) -> None:
        assert self.path is not None
        try:
            check_document_size(self.path)
            data = self.path.read_bytes()
            self.size = len(data)
        except (OSError, ValueError) as exc:
            self.damaged = f"the checkpoint could not be read ({type(exc).__name__}: {exc})"
            return
        offsets = [0]
        for line in data.split(b"\n"):
            offsets.append(offsets[-1] + len(line) + 1)
        try:
            for lineno, value, reason in json_lines(self.path, data):
                if reason is None:
                    try:
                        self.entries.append(_Entry.parse(value, offsets[lineno - 1]))
                        self.end = offsets[lineno]
                        continue
                    except ValueError as exc:
                        reason = str(exc)
                self.damaged = f"{self.path.name}:{lineno}: {reason}"
                return
        except JSONShapeError as exc:
            self.damaged = f"the checkpoint could not be read ({exc})"

    @property
    def kept(self) -> int:
        """How many requests an earlier run left to replay."""
        return len(self.entries)

    @property
    def kept_calls(self) -> int:
        return sum(_calls(e.response.usage) for e in self.entries if e.response is not None)

    @property
    def replaying(self) -> bool:
        return self.stopped is None and (bool(self.entries) or self.damaged is not None)

    def kept_summary(self) -> dict[str, Any]:
        """What an earlier run left: requests, the LLM calls they stand for, and why reading stopped short."""
        return {"kept_requests": self.kept, "kept_llm_calls": self.kept_calls, "damaged": self.damaged}

    def summary(self) -> dict[str, Any] | None:
        """What the record says of a resumed trial (None: there was nothing to resume from)."""
        if not self.entries and self.damaged is None:
            return None
        return {"kept_requests": self.kept, "kept_llm_calls": self.kept_calls, "replayed_requests": self.replayed,
                "replayed_llm_calls": self.replayed_calls, "replay_stopped": self.stopped or self.damaged}

    def answer(self, request: str) -> _Entry | None:
        """The recorded entry for ``request`` when it is the next one recorded, else None (and the replay ends)."""
        if not self.replaying:
            return None
        if self.replayed < len(self.entries):
            entry = self.entries[self.replayed]
            if entry.request == request:
                self.replayed += 1
                self._last_replay = (entry.elapsed, time.monotonic())
                if entry.response is not None:
                    self.replayed_calls += _calls(entry.response.usage)
                return entry
            self.stop(f"request {self.replayed + 1} differs from the recorded one: live from there")
        else:
            self.stop(f"{self.damaged}: live from there" if self.damaged else "every kept request replayed")
        return None

    def stop(self, reason: str) -> None:
        self.stopped = reason

    def seconds(self) -> float:
        """The trial's wall seconds so far: after a replay, the earlier run's seconds at the last answer replayed
        plus the time since (the earlier run's call in flight and this run's restart are not counted)."""
        if self._last_replay is None:
            return time.monotonic() - self.started
        recorded, replayed_at = self._last_replay
        return recorded + time.monotonic() - replayed_at

    def record(self, request: str, response: LLMResponse | None = None, overflow: str | None = None) -> None:
        """Append a live answer (or the context overflow a request met)."""
        if self.path is None:
            return
        if self._fh is None:
            self._open()
        line: dict[str, Any] = {"v": CHECKPOINT_VERSION, "request": request, "elapsed": round(self.seconds(), 3)}
        if overflow is not None:
            line["overflow"] = overflow
        else:
            assert response is not None
            line["reply"] = json.loads(json.dumps(response.to_dict(), default=str))   # as it will read back
        line["check"] = _check(line.get("overflow", line.get("reply")))
        assert self._fh is not None
        self._fh.write(json.dumps(line, default=str).encode("ascii") + b"\n")
        self._fh.flush()

    def _open(self) -> None:
        """Open for appending after the replayed entries: the entries not replayed and any damage are cut."""
        assert self.path is not None
        cut = self.entries[self.replayed].offset if self.replayed < len(self.entries) else self.end
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "r+b" if self.path.is_file() else "wb")
        self._fh.truncate(min(cut, self.size))
        self._fh.seek(min(cut, self.size))
        if cut > self.size:   # the last entry kept lost only its newline
            self._fh.write(b"\n")

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def discard(self) -> None:
        """The trial ended with its record: nothing is left to resume, and a checkpoint left behind would
        replay into the next trial of this case in the same directory."""
        self.close()
        if self.path is not None:
            self.path.unlink(missing_ok=True)


class ReplayingBackend(LLMBackend):
    """``inner`` with a checkpoint in front: a request the checkpoint recorded next is answered from it, every
    other goes to ``inner`` and its answer is recorded. Its usage is the replayed calls' plus ``inner``'s."""

    def __init__(self, inner: LLMBackend, checkpoint: TrialCheckpoint, trajectory: TrajectoryWriter):
        # not LLMBackend.__init__: no cache of its own (inner has it), and usage is a sum (below)
        self.inner, self.checkpoint, self.trajectory = inner, checkpoint, trajectory
        self.name, self.synthetic, self.seed, self.cache = inner.name, inner.synthetic, inner.seed, None
        self.accepts_call_schema = inner.accepts_call_schema
        self.replayed_usage = Usage()

    @property
    def usage(self) -> Usage:   # type: ignore[override]  # read-only here: LLMBackend.complete, its writer, is replaced
        return self.replayed_usage + self.inner.usage

    # What LLMBackend declares as properties would never reach __getattr__: each is inner's, read when asked (an
    # openai: backend settles calls_per_candidate as its server's replies show whether it honours n).
    @property
    def response_identity(self) -> str:
        return self.inner.response_identity

    @property
    def endpoint(self) -> str | None:
        return self.inner.endpoint

    @property
    def answerer(self) -> str | None:
        return self.inner.answerer

    @property
    def request_settings(self) -> dict[str, Any]:
        return self.inner.request_settings

    @property
    def calls_per_candidate(self) -> bool:  # type: ignore[override]
        return self.inner.calls_per_candidate

    @property
    def constrains_by_default(self) -> bool:  # type: ignore[override]
        return self.inner.constrains_by_default

    def __getattr__(self, name: str) -> Any:   # a backend's own attributes (a plug-in planner may read them)
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def complete(self, messages: list[dict], tools: list[dict], n: int = 1, temperature: float = 0.7,
                 seed: int | None = None, call_schema: dict | None = None) -> LLMResponse:
        if not self.accepts_call_schema:
            call_schema = None
        request = request_identity(self.inner, messages, tools, n, temperature, seed, call_schema)
        checkpoint = self.checkpoint
        was_replaying = checkpoint.replaying
        entry = checkpoint.answer(request)
        if entry is not None:
            if entry.overflow is not None:
                raise ContextOverflowError(entry.overflow)
            assert entry.response is not None
            self.replayed_usage = self.replayed_usage + entry.response.usage
            return LLMResponse(list(entry.response.candidates), entry.response.usage)
        if was_replaying:
            self.trajectory.write(EventKind.REPLAY_ENDED, reason=checkpoint.stopped,
                                  replayed_requests=checkpoint.replayed, replayed_llm_calls=checkpoint.replayed_calls)
        try:
            response = self.inner.complete(messages, tools, n=n, temperature=temperature, seed=seed,
                                           call_schema=call_schema)
        except ContextOverflowError as exc:
            checkpoint.record(request, overflow=str(exc))
            raise
        checkpoint.record(request, response)
        return response

    def close(self) -> None:
        self.checkpoint.close()
        self.inner.close()


def kept_for_resume(paths: list[Path]) -> tuple[int, int]:
    """``(LLM calls, trials)`` the checkpoints at ``paths`` keep for a resume (unreadable ones keep nothing)."""
    calls = trials = 0
    for path in paths:
        kept = TrialCheckpoint(path).kept_calls
        if kept:
            calls, trials = calls + kept, trials + 1
    return calls, trials
