"""The model-backend interface: usage accounting, candidates, responses, tool-call parsing.

A backend turns a chat (``messages``) plus OpenAI function schemas (``tools``) into ``n``
candidate next steps. Malformed model output never raises: it becomes ``Candidate.error``,
a message the planner sends back to the model. Only infrastructure trouble raises
(:class:`InfraError`), so the harness can count it apart from planner failures.

Subclasses implement :meth:`LLMBackend._generate`; :meth:`LLMBackend.complete` adds the
response cache and keeps the running ``usage`` total.
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from mltb_core.toolkit.registry import ToolCall, ToolCallError

if TYPE_CHECKING:
    from mltb_core.llm.cache import ResponseCache

__all__ = [
    "Usage", "Candidate", "LLMResponse", "LLMBackend", "InfraError", "UnknownModelError",
    "parse_content_tool_calls", "candidate_from_message",
]


class InfraError(Exception):
    """The model API failed beyond the retry policy (outage, timeouts, crashed server).

    The harness records such a trial as an infrastructure error, never as a planner failure.
    """


class ContextOverflowError(Exception):
    """The server refused a request because the conversation is longer than the model's context window.

    The conversation is what the search built (the model's calls and their results), so this ends the
    search as its own failure, never as an infrastructure error."""


class UnknownModelError(ValueError):
    """A model string that names no backend."""


@dataclass
class Usage:
    """What calls cost. ``cached_*`` keep the original usage of responses replayed from mltb's own response
    cache; ``cached_input_tokens`` is different: the part of ``prompt_tokens`` the *server* served from its
    prompt/KV cache (OpenAI ``prompt_tokens_details.cached_tokens``, llama.cpp ``timings.cache_n``), billed
    at the price table's cached-input rate."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_input_tokens: int = 0
    calls: int = 0
    cost_usd: float = 0.0
    seconds: float = 0.0
    retries: int = 0
    cached_calls: int = 0
    cached_prompt_tokens: int = 0
    cached_completion_tokens: int = 0
    cached_cost_usd: float = 0.0

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def as_cached(self, seconds: float) -> Usage:
        """The usage to record when this response is replayed from cache: free, original kept aside."""
        return Usage(seconds=seconds, cached_calls=max(self.calls, 1), cached_prompt_tokens=self.prompt_tokens,
                     cached_completion_tokens=self.completion_tokens, cached_cost_usd=self.cost_usd)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Usage:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class Candidate:
    """One proposed next step: reasoning text, parsed tool calls, or a parse problem for the model."""

    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "tool_calls": [c.to_dict() for c in self.tool_calls], "error": self.error}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Candidate:
        return cls(data.get("text") or "", [ToolCall.from_dict(c) for c in data.get("tool_calls") or []],
                   data.get("error"))


@dataclass
class LLMResponse:
    candidates: list[Candidate]
    usage: Usage = field(default_factory=Usage)
    cached: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"candidates": [c.to_dict() for c in self.candidates], "usage": self.usage.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LLMResponse:
        return cls([Candidate.from_dict(c) for c in data["candidates"]], Usage.from_dict(data["usage"]))


class LLMBackend:
    """Base of all backends; one instance per trial.

    ``name`` is the model string (e.g. ``"openai:gpt-4o"``), ``synthetic`` is True only for the
    simulated policy, ``usage`` is the running total over every :meth:`complete` call.
    """

    name: str = "base"
    synthetic: bool = False
    # Whether _generate takes a ``call_schema`` (the JSON schema of the next call, see
    # toolkit/constraints.py); other backends ignore the schema. ``constrains_by_default``: whether
    # TrialConfig.constrained_calls=None means on (the embedded model, which cannot do without).
    accepts_call_schema: bool = False
    constrains_by_default: bool = False
    # Whether n candidates cost n requests (a server without ``n``): an LLM-call budget then caps n.
    calls_per_candidate: bool = False

    @property
    def response_identity(self) -> str:
        """What, besides the request, decides this backend's replies: the response cache's key part."""
        return self.name

    def __init__(self, name: str | None = None, *, cache: ResponseCache | None = None, seed: int = 0) -> None:
        if name is not None:
            self.name = name
        self.cache = cache
        self.seed = seed  # the trial seed: part of the cache key, seeds retry jitter
        self.usage = Usage()

    def complete(self, messages: list[dict], tools: list[dict], n: int = 1, temperature: float = 0.7,
                 seed: int | None = None, call_schema: dict | None = None) -> LLMResponse:
        """Propose ``n`` candidate next steps for the chat ``messages`` given the tool schemas ``tools``
        (and, for backends that accept one, the JSON schema ``call_schema`` a reply must follow)."""
        if n < 1:
            raise ValueError(f"n must be at least 1, got {n}")
        if not self.accepts_call_schema:
            call_schema = None
        key = None
        if self.cache is not None:
            start = time.perf_counter()
            # The schema changes the reply; folded into the tools so keys without one stay as they were.
            keyed_tools = tools if call_schema is None else [*tools, {"call_schema": call_schema}]
            key = self.cache.key(self.response_identity, messages, keyed_tools, n, temperature, seed, self.seed)
            hit = self.cache.get(key)
            if hit is not None:
                hit.usage = hit.usage.as_cached(time.perf_counter() - start)
                hit.cached = True
                self.usage = self.usage + hit.usage
                return hit
        if call_schema is None:
            response = self._generate(messages, tools, n, temperature, seed)
        else:
            response = self._generate(messages, tools, n, temperature, seed, call_schema=call_schema)
        self.usage = self.usage + response.usage
        if key is not None:
            self.cache.put(key, response)
        return response

    def _generate(self, messages: list[dict], tools: list[dict], n: int, temperature: float,
                  seed: int | None) -> LLMResponse:
        raise NotImplementedError(f"{type(self).__name__} must implement _generate() or complete()")

    def close(self) -> None:
        """Release resources (connections, a shared local server)."""

    def __enter__(self) -> LLMBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ------------------------------------------------------------------ tool-call parsing
MALFORMED = "your tool call was malformed: "
CUT_OFF = "your reply was cut off"   # how every cut-off error starts (reports count them by it)


def cut_off_error(limit: int | None) -> str:
    """What the model is told when the server stopped its reply at the reply-length limit.

    Not "malformed": the model wrote a call longer than the harness lets a reply run (e.g. every column of a
    wide frame by name), and only a shorter call can get through.
    """
    where = f"the {limit}-token reply limit" if limit else "the server's reply limit"
    return (f"{CUT_OFF} at {where} before the tool call was complete; write one shorter tool "
            "call (for example name fewer columns, or split the work over several calls)")


_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.S)
_CALL_HINT = re.compile(r"\"(tool_name|name)\"\s*:")


def _json_values(text: str) -> list[Any]:
    """Every top-level JSON object/array embedded in ``text`` (fenced blocks first)."""
    fenced = _FENCE.findall(text)
    sources = fenced if fenced else [text]
    decoder = json.JSONDecoder()
    values: list[Any] = []
    for source in sources:
        pos = 0
        while True:
            starts = [i for i in (source.find("{", pos), source.find("[", pos)) if i >= 0]
            if not starts:
                break
            start = min(starts)
            try:
                value, end = decoder.raw_decode(source, start)
            except json.JSONDecodeError:
                pos = start + 1
                continue
            values.append(value)
            pos = end
    return values


def _looks_like_call(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("tool_name", value.get("name")), str)


def parse_content_tool_calls(text: str) -> tuple[list[ToolCall], str | None]:
    """Tool calls written as JSON in message text (small models do this instead of native calls).

    Accepts the paper format ``{"tool_name": ..., "tool_args": {...}}`` and the OpenAI-ish
    ``{"name": ..., "arguments": ...}``, alone, in a list, or in ```json fences. Returns the calls
    and an error for the model when the text tries to call a tool but cannot be parsed.
    """
    if not text or ("{" not in text):
        return [], None
    calls: list[ToolCall] = []
    problems: list[str] = []
    for value in _json_values(text):
        items = value if isinstance(value, list) else [value]
        for item in items:
            if not _looks_like_call(item):
                continue
            try:
                calls.append(ToolCall.from_dict(item))
            except ToolCallError as exc:
                problems.append(str(exc))
    if problems:
        return calls, MALFORMED + "; ".join(problems)
    if not calls and _CALL_HINT.search(text):
        return [], (MALFORMED + "could not parse a JSON object with 'tool_name' and 'tool_args' from your "
                    "message; write exactly one JSON object like "
                    '{"tool_name": "...", "tool_args": {"bindings": {}, "func_kwargs": {}, "output": "..."}}')
    return calls, None


def candidate_from_message(content: str | None, native_calls: list[tuple[str, Any]]) -> Candidate:
    """Build a candidate from a chat message: native ``(name, arguments)`` calls, else JSON in the text."""
    text = content or ""
    if native_calls:
        calls: list[ToolCall] = []
        problems: list[str] = []
        for name, arguments in native_calls:
            try:
                calls.append(ToolCall.from_arguments(name, arguments))
            except ToolCallError as exc:
                problems.append(str(exc))
        return Candidate(text, calls, MALFORMED + "; ".join(problems) if problems else None)
    calls, error = parse_content_tool_calls(text)
    return Candidate(text, calls, error)
