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
import math
import re
import time
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from mltb_core.toolkit.registry import ToolCall, ToolCallError
from mltb_core.bench.documents import JSONShapeError, clean_strings, encodable, loads_bounded
from mltb_core.toolkit.textsafety import MAX_JSON_DEPTH, cap_text

if TYPE_CHECKING:
    from mltb_core.llm.cache import ResponseCache

__all__ = [
    "Usage", "Candidate", "candidate_key", "LLMResponse", "LLMBackend", "InfraError", "UnknownModelError",
    "parse_content_tool_calls", "candidate_from_message", "admitted", "MAX_REPLY_CHARS", "MAX_ASSISTANT_CHARS",
]


# The largest count or amount a stored usage may hold: far past any real run, small enough that sums of them
# stay exact and printable.
MAX_USAGE = 10**15


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
    def from_dict(cls, data: Any) -> Usage:
        """Usage from stored JSON (a response cache entry); ValueError names a field that is not a count or an
        amount (a non-number, a bool, negative, not finite, past :data:`MAX_USAGE`). Unknown keys are dropped."""
        if not isinstance(data, dict):
            raise ValueError(f"usage is a {type(data).__name__}, not an object")
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in data:
                continue
            value = data[f.name]
            kinds = (int, float) if f.type == "float" else (int,)
            if (not isinstance(value, kinds) or isinstance(value, bool) or not math.isfinite(value)
                    or not 0 <= value <= MAX_USAGE):
                raise ValueError(f"usage field {f.name!r} is {str(value)[:40]!r}, not a "
                                 f"{'number' if f.type == 'float' else 'count'} in 0..{MAX_USAGE:.0e}")
            values[f.name] = value
        return cls(**values)


def candidate_key(call: dict[str, Any] | None, error: Any, text: Any) -> str:
    """A candidate's identity from its first tool call's dict (``ToolCall.key``'s form), or, for a reply
    without one, from its error and the opening of its text; a trajectory's recorded candidates give the same."""
    if call:
        return json.dumps(call, sort_keys=True, default=str)
    return f"reply:{error}:{str(text)[:80]}"


@dataclass
class Candidate:
    """One proposed next step: reasoning text, parsed tool calls, or a parse problem for the model."""

    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "tool_calls": [c.to_dict() for c in self.tool_calls], "error": self.error}

    def key(self) -> str:
        """Equal for candidates a planner counts as one (it keeps the first of an expansion's repeats)."""
        return candidate_key(self.tool_calls[0].to_dict() if self.tool_calls else None, self.error, self.text)

    @classmethod
    def from_dict(cls, data: Any) -> Candidate:
        """A candidate from stored JSON; ValueError (a :class:`ToolCallError` for a call) says what is wrong."""
        if not isinstance(data, dict):
            raise ValueError(f"a candidate is a {type(data).__name__}, not an object")
        text, calls, error = data.get("text", ""), data.get("tool_calls", []), data.get("error")
        if not isinstance(text, str):
            raise ValueError(f"a candidate's text is a {type(text).__name__}, not a string")
        if not isinstance(calls, list):
            raise ValueError(f"a candidate's tool_calls is a {type(calls).__name__}, not a list")
        if error is not None and not isinstance(error, str):
            raise ValueError(f"a candidate's error is a {type(error).__name__}, not a string")
        return cls(text, [ToolCall.from_dict(c) for c in calls], error)


@dataclass
class LLMResponse:
    candidates: list[Candidate]
    usage: Usage = field(default_factory=Usage)
    cached: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"candidates": [c.to_dict() for c in self.candidates], "usage": self.usage.to_dict()}

    @classmethod
    def from_dict(cls, data: Any) -> LLMResponse:
        """A response from stored JSON, checked as a fresh reply is (:func:`admitted`): ValueError says why
        ``data`` is not one (a wrong type anywhere, no candidates, a candidate past the bounds)."""
        if not isinstance(data, dict):
            raise ValueError(f"a {type(data).__name__}, not an object")
        candidates = data.get("candidates")
        if not isinstance(candidates, list) or not candidates:
            raise ValueError("no list of candidates")
        response = cls([Candidate.from_dict(c) for c in candidates], Usage.from_dict(data.get("usage")))
        if not all(carriable(c) for c in response.candidates):
            raise ValueError("a candidate is not as a backend hands it on (too long, or not encodable)")
        return response


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
    def endpoint(self) -> str | None:
        """What answers this backend's requests, as a trial record names it (a server's base URL, a local model
        file's digest); None for a policy mltb computes itself."""
        return None

    @property
    def request_settings(self) -> dict[str, Any]:
        """The backend's settings that change a reply to the same chat (reply length, sampling extras)."""
        return {}

    @property
    def response_identity(self) -> str:
        """What, besides the request, decides this backend's replies: the response cache's key part. The
        model string alone for a policy mltb computes itself; else also what answers (:meth:`answerer`) and
        the settings, so that two servers addressed by one model name never share replies."""
        answerer, settings = self.answerer, self.request_settings
        if answerer is None and not settings:
            return self.name
        return json.dumps({"model": self.name, "answerer": answerer, "settings": settings}, sort_keys=True,
                          default=str)

    @property
    def answerer(self) -> str | None:
        """The endpoint as the cache keys it: in full (a record's :meth:`endpoint` may leave parts out)."""
        return self.endpoint

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
        response = admitted(response)
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
MAX_ASSISTANT_CHARS = 4_000   # the model's own text kept (a refused reply's too): trajectory, later requests
CUT_OFF = "your reply was cut off"   # how every cut-off error starts (reports count them by it)


def cut_off_error(limit: int | None) -> str:
    """What the model is told when the server stopped its reply at the reply-length limit.

    Not "malformed": the model wrote a call longer than the harness lets a reply run (e.g. every column of a
    wide frame by name), and only a shorter call can get through.
    """
    where = f"the {limit}-token reply limit" if limit else "the server's reply limit"
    return (f"{CUT_OFF} at {where} before the tool call was complete; write one shorter tool "
            "call (for example name fewer columns, or split the work over several calls)")


_CALL_HINT = re.compile(r"\"(tool_name|name)\"\s*:")   # linear: a literal, then one run of spaces
_FENCE = "```"
_FENCE_TAGS = ("json", "JSON")
# The longest reply text mltb reads (content, a native call's arguments, a judge's reply): far more than a
# call or a grade needs, and few enough characters that every linear scan below takes milliseconds.
MAX_REPLY_CHARS = 100_000
_SPECIAL = re.compile(r'[\[\]{}"\\]')   # a character class: one character per match, no backtracking


def _fenced_blocks(text: str) -> list[str]:
    """The insides of ```-fenced blocks (a leading json tag dropped), pairing fences left to right; an
    unclosed last fence is no block. ``str.find`` only: linear in ``text``, whatever it holds."""
    marks: list[int] = []
    at = text.find(_FENCE)
    while at >= 0:
        marks.append(at)
        at = text.find(_FENCE, at + len(_FENCE))
    blocks = []
    for open_at, close_at in zip(marks[::2], marks[1::2]):
        block = text[open_at + len(_FENCE):close_at]
        for tag in _FENCE_TAGS:
            if block.startswith(tag):
                block = block[len(tag):]
                break
        blocks.append(block)
    return blocks


def _bracket_spans(source: str, strings: bool) -> list[tuple[int, int, int]]:
    """``(start, end, height)`` of every balanced ``{...}``/``[...]`` in ``source`` (end exclusive, height
    the bracket nesting inside it); one pass, a stack of open brackets. With ``strings``, brackets inside
    JSON strings are ignored (quotes count only inside brackets, as in JSON); without, quotes are ignored,
    which finds a call after a stray quote in bracketed prose. A closer of the wrong kind abandons the
    brackets open."""
    spans: list[tuple[int, int, int]] = []
    stack: list[list[Any]] = []   # [position, kind, height of its deepest child]
    in_string = escaped = False
    previous = -2
    for match in _SPECIAL.finditer(source):   # one character each: only these change the state
        i, ch = match.start(), match.group()
        if in_string:
            if escaped and i == previous + 1:
                escaped = False
            elif ch == "\\":
                escaped, previous = True, i
            elif ch == '"':
                in_string = escaped = False
            else:
                escaped = False
        elif ch == '"':
            in_string = strings and bool(stack)
        elif ch in "[{":
            stack.append([i, ch, 0])
        elif ch in "]}" and stack:
            start, kind, inner = stack.pop()
            if (kind == "[") != (ch == "]"):
                stack.clear()
                continue
            height = inner + 1
            spans.append((start, i + 1, height))
            if stack and stack[-1][2] < height:
                stack[-1][2] = height
    return spans


def _json_values(text: str) -> tuple[list[Any], list[str]]:
    """Every top-level JSON object/array embedded in ``text`` (fenced blocks first), strings made encodable,
    and why bracketed spans that may have been calls were refused (too deep, an integer too long).

    Linear in ``text``: the balanced brackets are found in two passes; a span nested deeper than a tool call
    may be is skipped unparsed; a span that is not JSON (prose in brackets, an integer past the digit limit)
    is passed over for the values inside it, as a decoder restarted one character on would find them."""
    fenced = _fenced_blocks(text)
    values: list[Any] = []
    refused: list[str] = []
    for source in fenced if fenced else [text]:
        resume = 0
        spans = set(_bracket_spans(source, strings=True)) | set(_bracket_spans(source, strings=False))
        for start, end, height in sorted(spans):
            if start < resume:
                continue
            if height > MAX_JSON_DEPTH:
                _note(refused, f"JSON nested more than {MAX_JSON_DEPTH} levels deep")
                continue
            try:
                value = json.loads(source[start:end])
            except json.JSONDecodeError:
                continue
            except (ValueError, RecursionError) as exc:   # the integer digit limit
                _note(refused, cap_text(str(exc), 200))
                continue
            values.append(clean_strings(value))
            resume = end
    return values, refused


def _note(notes: list[str], note: str) -> None:
    if note not in notes and len(notes) < 3:
        notes.append(note)


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
    values, refused = _json_values(text)
    for value in values:
        items = value if isinstance(value, list) else [value]
        for item in items:
            if not _looks_like_call(item):
                continue
            try:
                calls.append(_encodable_call(ToolCall.from_dict(item)))
            except ToolCallError as exc:
                problems.append(encodable(str(exc)))
    if problems:
        return calls, MALFORMED + "; ".join(problems)
    if not calls and _CALL_HINT.search(text):
        why = f" ({'; '.join(refused)})" if refused else ""
        return [], (MALFORMED + "could not parse a JSON object with 'tool_name' and 'tool_args' from your "
                    f"message{why}; write exactly one JSON object like "
                    '{"tool_name": "...", "tool_args": {"bindings": {}, "func_kwargs": {}, "output": "..."}}')
    return calls, None


def _too_long(what: str, size: int) -> str:
    return (f"{MALFORMED}{what} has {size:,} characters (at most {MAX_REPLY_CHARS:,}); write one short "
            "tool call")


def _native_call(name: Any, arguments: Any) -> ToolCall:
    """A native ``(name, arguments)`` call, its JSON parsed with the bounds and strings made encodable."""
    if not isinstance(name, str) or not name:
        raise ToolCallError("a native tool call has no function name")
    name = encodable(name)
    if isinstance(arguments, str):
        if len(arguments) > MAX_REPLY_CHARS:
            raise ToolCallError(f"the arguments of {name!r} have {len(arguments):,} characters "
                                f"(at most {MAX_REPLY_CHARS:,})")
        try:
            arguments = loads_bounded(arguments, MAX_JSON_DEPTH, MAX_REPLY_CHARS) if arguments.strip() else {}
        except JSONShapeError as exc:
            raise ToolCallError(f"arguments of {name!r} refused: {exc}") from None
        except ValueError as exc:
            raise ToolCallError(f"arguments of {name!r} are not valid JSON: {exc}") from None
    return _encodable_call(ToolCall.from_arguments(name, arguments))


def _encodable_call(call: ToolCall) -> ToolCall:
    """``call`` with every string made encodable (JSON's ``\\udc80`` escapes decode to lone surrogates);
    its arguments' depth is bounded already (``ToolCall.from_arguments``)."""
    return ToolCall(encodable(call.tool_name), clean_strings(call.bindings), clean_strings(call.func_kwargs),
                    clean_strings(call.output))


def candidate_from_message(content: Any, native_calls: list[tuple[Any, Any]]) -> Candidate:
    """The one boundary for what a model writes: a chat message's text and native ``(name, arguments)`` calls
    (else JSON calls in the text) become a :class:`Candidate` that is safe to carry — bounded, encodable,
    every string checked. Whatever it cannot accept is the model's malformed reply (``Candidate.error``),
    never an exception: text too long, JSON too deep, an integer past the digit limit, a lone surrogate."""
    text = content if isinstance(content, str) else ""
    if len(text) > MAX_REPLY_CHARS:
        return Candidate(cap_text(text, MAX_ASSISTANT_CHARS), [], _too_long("your reply", len(text)))
    text = encodable(text)
    try:
        if native_calls:
            calls: list[ToolCall] = []
            problems: list[str] = []
            for name, arguments in native_calls:
                try:
                    calls.append(_native_call(name, arguments))
                except ToolCallError as exc:
                    problems.append(encodable(str(exc)))
            return Candidate(text, calls, MALFORMED + "; ".join(problems) if problems else None)
        calls, error = parse_content_tool_calls(text)
    except (ValueError, TypeError, RecursionError, MemoryError) as exc:   # the model's reply, not mltb's fault
        return Candidate(cap_text(text, MAX_ASSISTANT_CHARS), [],
                         f"{MALFORMED}{type(exc).__name__}: {cap_text(str(exc), 300)}")
    return Candidate(text, calls, error)


def carriable(candidate: Candidate) -> bool:
    """Whether ``candidate`` is as :func:`admitted` hands it on: its text a string within the bound, the
    whole encodable as UTF-8 JSON."""
    if not isinstance(candidate.text, str) or len(candidate.text) > MAX_REPLY_CHARS:
        return False
    try:
        json.dumps(candidate.to_dict(), ensure_ascii=False).encode("utf-8")
    except (ValueError, TypeError, RecursionError):
        return False
    return True


def admitted(response: LLMResponse) -> LLMResponse:
    """``response`` as every backend must hand it on (checked in :meth:`LLMBackend.complete`): each candidate's
    text and calls bounded and encodable, so the cache, trajectory and prompts can carry them. A backend
    that builds its candidates with :func:`candidate_from_message` passes unchanged."""
    out = []
    for candidate in response.candidates:
        if carriable(candidate):
            out.append(candidate)
            continue
        text = candidate.text if isinstance(candidate.text, str) else ""
        native = [(call.tool_name, {"bindings": call.bindings, "func_kwargs": call.func_kwargs,
                                    **({"output": call.output} if call.output is not None else {})})
                  for call in candidate.tool_calls]
        try:
            out.append(candidate_from_message(text, native))
        except (ValueError, TypeError, RecursionError):   # a native value no bound could check
            out.append(Candidate(cap_text(text, MAX_ASSISTANT_CHARS), [], MALFORMED + "the reply could not be read"))
        if candidate.error and out[-1].error is None:
            out[-1].error = cap_text(candidate.error, 2_000)
    response.candidates = out
    return response
