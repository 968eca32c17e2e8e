"""OpenAI Chat Completions backend (also the transport of the local llama.cpp backend).

Retries are ours, not the client's (``max_retries=0`` on the client), so every retry is counted
in ``Usage.retries``: exponential backoff with seeded jitter on timeouts, connection errors, 429,
5xx and malformed/empty responses. Past the budget, :class:`InfraError` carries the cause.
"""
from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from mltb_core.environment import default as environment_default, read as read_environment
from mltb_core.llm.base import (Candidate, ContextOverflowError, InfraError, LLMBackend, LLMResponse, Usage,
                                candidate_from_message, cut_off_error)
from mltb_core.llm.cache import ResponseCache
from mltb_core.llm.local.models import REPLY_TOKENS
from mltb_core.llm.chatml import call_schema, chatml_messages
from mltb_core.llm.prices import Price, PriceTable, load_price_table

__all__ = ["OpenAIBackend", "RetryableResponseError", "RETRY_ENV", "check_retry_env", "server_cached_tokens",
           "OPENAI_API_HOST", "OPENAI_API_URL", "public_url", "is_custom_server", "KEYLESS_SERVER_KEY",
           "CALL_FORMATS", "JSON_CALL_FORMATS", "N_MODES", "check_server_env", "call_format_setting", "n_mode_setting",
           "json_response_format"]

OPENAI_API_HOST = "api.openai.com"
OPENAI_API_URL = f"https://{OPENAI_API_HOST}/v1"   # the client's own default base URL
# Sent as the key to a self-hosted server when no key is set: the client refuses to run without one, and a
# server started without a key (llama-server, vLLM, Ollama by default) accepts any.
KEYLESS_SERVER_KEY = "no-key"


def is_custom_server(base_url: str | None) -> bool:
    """Whether ``base_url`` is a server other than OpenAI's own (vLLM, llama.cpp, a proxy); None is OpenAI's."""
    if not base_url or not base_url.strip():
        return False
    from urllib.parse import urlparse

    host = (urlparse(base_url.strip()).hostname or "").lower()
    return not (host == OPENAI_API_HOST or host.endswith("." + OPENAI_API_HOST))


# How a request asks the server for a tool call: a declared per-endpoint choice (MLTB_OPENAI_CALLS), since
# servers accept different shapes (docs/local-model.md lists which server takes which):
#   tools        native tool definitions, the server decides whether to call one (OpenAI's default);
#   required     native tools and tool_choice "required": the server must call one (its grammar from the start);
#   json_schema  mltb's tool catalogue in the prompt, the reply held to the call's JSON schema by
#                response_format {"type": "json_schema", ...} (OpenAI's form: vLLM, llama-server, Ollama);
#   json_object  the same, as response_format {"type": "json_object", "schema": ...} (llama-cpp-python's form,
#                the only schema-constrained one llama_cpp.server applies; llama-server takes it too).
CALL_FORMATS = ("tools", "required", "json_schema", "json_object")
JSON_CALL_FORMATS = ("json_schema", "json_object")
# Whether the server returns n choices for one request (MLTB_OPENAI_N): on, off (one request per candidate), or
# auto: on for OpenAI's API; for another server, unproven until a request shows it (see OpenAIBackend._generate).
N_MODES = ("auto", "on", "off")


def _choice_env(name: str, raw: str | None, allowed: tuple[str, ...], default: str) -> str:
    raw = (raw or "").strip().lower().replace("-", "_")
    if not raw:
        return default
    if raw not in allowed:
        raise ValueError(f"{name}={raw!r}: expected one of {', '.join(allowed)}")
    return raw


def call_format_setting() -> str:
    """The declared call format (``MLTB_OPENAI_CALLS``, default ``tools``); ValueError naming a bad value."""
    return _choice_env("MLTB_OPENAI_CALLS", read_environment("MLTB_OPENAI_CALLS"), CALL_FORMATS, "tools")


def n_mode_setting() -> str:
    """The declared ``n`` handling (``MLTB_OPENAI_N``, default ``auto``); ValueError naming a bad value."""
    return _choice_env("MLTB_OPENAI_N", read_environment("MLTB_OPENAI_N"), N_MODES, "auto")


def check_server_env() -> None:
    """ValueError naming the variable when a server-shape variable has an unknown value (run at start-up)."""
    call_format_setting()
    n_mode_setting()


def json_response_format(call_format: str, schema: dict[str, Any]) -> dict[str, Any]:
    """The ``response_format`` that holds a reply to ``schema`` in a JSON call format."""
    if call_format == "json_object":
        return {"type": "json_object", "schema": schema}
    if call_format == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": "tool_call", "schema": schema}}
    raise ValueError(f"{call_format!r} is not a JSON call format ({', '.join(JSON_CALL_FORMATS)})")


def public_url(url: str) -> str:
    """``url`` without its user, password, query and fragment (where keys and tokens may be), for records."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = f"{host}:{port}" if port is not None else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class RetryableResponseError(Exception):
    """The server answered, but with nothing usable (no choices, no message)."""


def _retryable_errors() -> tuple[type[BaseException], ...]:
    import openai

    return (openai.APITimeoutError, openai.APIConnectionError, openai.RateLimitError,
            openai.InternalServerError, openai.APIResponseValidationError, RetryableResponseError,
            json.JSONDecodeError)


def _is_retryable(exc: BaseException) -> bool:
    import openai

    if isinstance(exc, _retryable_errors()):
        return True
    # Some gateways send 5xx codes the client has no class for (e.g. 520, 529).
    return isinstance(exc, openai.APIStatusError) and (exc.status_code >= 500 or exc.status_code == 429)


_OVERFLOW_WORDS = ("context_length_exceeded", "context length", "context window", "context size", "n_ctx",
                   "maximum context", "too many tokens", "exceeds the available context")


def _is_context_overflow(exc: Exception) -> bool:
    """A 400 that says the prompt does not fit the model (OpenAI's code, llama.cpp's and vLLM's wording)."""
    text = f"{getattr(exc, 'code', '') or ''} {exc}".lower()
    return any(word in text for word in _OVERFLOW_WORDS)


def _describe(exc: BaseException) -> str:
    status = getattr(exc, "status_code", None)
    return f"{type(exc).__name__}" + (f" (HTTP {status})" if status else "") + f": {exc}"


class OpenAIBackend(LLMBackend):
    """Chat Completions with function tools.

    Parameters: ``model`` (API model id), ``base_url``/``api_key`` (default ``OPENAI_BASE_URL`` /
    ``OPENAI_API_KEY``), ``max_retries`` (our retries per request), ``timeout`` (seconds per request),
    ``backoff_base``/``backoff_max`` (seconds), ``price`` (overrides the price table),
    ``sleep`` (injectable for tests), ``strict_tools`` (send state-aware call schemas as strict
    function schemas; off by default: OpenAI's strict mode wants every property required),
    ``call_format`` (one of :data:`CALL_FORMATS`; default ``MLTB_OPENAI_CALLS``).

    ``supports_n``: True (the server returns n choices per request), False (one request per candidate),
    None (``MLTB_OPENAI_N``; ``auto`` is True for OpenAI's API and unproven for another server).
    ``max_tokens`` (default :data:`~mltb_core.llm.local.models.REPLY_TOKENS`, the embedded model's bound)
    is sent with every request: a server without it decodes until its context is full.
    """

    accepts_call_schema = True

    def __init__(self, model: str, *, name: str | None = None, base_url: str | None = None,
                 api_key: str | None = None, seed: int = 0, cache: ResponseCache | None = None,
                 price_table: PriceTable | str | os.PathLike | None = None, price: Price | None = None,
                 max_retries: int | None = None, timeout: float | None = None, supports_n: bool | None = None,
                 max_tokens: int | None = None, backoff_base: float | None = None, backoff_max: float = 30.0,
                 extra_body: dict[str, Any] | None = None, sleep: Callable[[float], None] = time.sleep,
                 strict_tools: bool = False, call_format: str | None = None) -> None:
        super().__init__(name or f"openai:{model}", cache=cache, seed=seed)
        # The retry policy is tunable per deployment (a flaky proxy, a slow local server) without code.
        max_retries = _retry_env("MLTB_LLM_MAX_RETRIES") if max_retries is None else max_retries
        timeout = _retry_env("MLTB_LLM_TIMEOUT") if timeout is None else timeout
        backoff_base = _retry_env("MLTB_LLM_BACKOFF") if backoff_base is None else backoff_base
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        max_tokens = REPLY_TOKENS if max_tokens is None else max_tokens
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"max_tokens must be a positive integer, got {max_tokens!r}")
        call_format = call_format_setting() if call_format is None else call_format
        if call_format not in CALL_FORMATS:
            raise ValueError(f"call_format {call_format!r} is not one of {', '.join(CALL_FORMATS)}")
        self.model = model
        # Fail at construction, not after a paid run, when the model has no price.
        if price is None:
            table = price_table if isinstance(price_table, PriceTable) else load_price_table(price_table)
            price = table.price(model)
        self.price = price
        self.max_retries = max_retries
        self.timeout = timeout
        self.max_tokens = max_tokens
        self.call_format = call_format
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.extra_body = dict(extra_body or {})
        self.strict_tools = strict_tools
        self._sleep = sleep
        self._jitter = random.Random(seed)
        # Sampler seeds of requests the caller left unseeded: a stream of the trial seed (see _generate).
        self._sampler_seeds = random.Random(f"sampler:{seed}")
        self.base_url = base_url or read_environment("OPENAI_BASE_URL") or None
        self.api_key = api_key or read_environment("OPENAI_API_KEY") or None
        if self.api_key is None and is_custom_server(self.base_url):
            self.api_key = KEYLESS_SERVER_KEY  # the preflight lets a custom server run without a key: so must we
        if supports_n is None:
            mode = n_mode_setting()
            supports_n = {"on": True, "off": False}.get(mode, None if is_custom_server(self.base_url) else True)
        # True: one request returns n choices; False: one request per candidate; None: not yet seen either way.
        self.supports_n: bool | None = supports_n
        self._declared_n = supports_n   # the key's part: supports_n itself settles as replies show it (auto)
        self._client = None

    @property
    def calls_per_candidate(self) -> bool:
        """Whether each candidate may cost a request of its own: without ``n``, and while a server has not yet
        shown that it honours ``n`` (the budget then caps a request's candidates at the calls left, so topping
        up a short reply never runs past the budget)."""
        return self.supports_n is not True

    @property
    def constrains_by_default(self) -> bool:
        # A JSON call format keeps one catalogue in the prompt and narrows each call by its schema alone, as the
        # embedded model does; native tools change the prompt with the offered tools (docs/local-model.md).
        return self.call_format in JSON_CALL_FORMATS

    @property
    def answerer(self) -> str:
        """The base URL requests go to, in full (OpenAI's API when none is set)."""
        return (self.base_url or OPENAI_API_URL).strip().rstrip("/")

    @property
    def endpoint(self) -> str:
        """The base URL without what may be secret (user, password, query): the record names the server."""
        return public_url(self.answerer)

    @property
    def request_settings(self) -> dict[str, Any]:
        # another call format sends another request for the same chat: its replies are not the default's
        return {"max_tokens": self.max_tokens, "extra_body": self.extra_body, "supports_n": self._declared_n,
                "strict_tools": self.strict_tools, "call_format": self.call_format}

    # ------------------------------------------------------------------ transport
    @property
    def client(self):
        if self._client is None:
            import openai

            if not self.api_key:
                raise InfraError(f"{self.name}: no API key; set OPENAI_API_KEY (or pass api_key=, or point "
                                 "OPENAI_BASE_URL at a self-hosted server)")
            self._client = openai.OpenAI(base_url=self.base_url, api_key=self.api_key,
                                         max_retries=0, timeout=self.timeout)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _request(self, messages: list[dict], tools: list[dict], n: int, temperature: float,
                 seed: int | None, schema: dict[str, Any] | None = None) -> dict[str, Any]:
        """Keyword arguments of one ``chat.completions.create`` call (subclasses adapt the request).

        With a state-aware call ``schema``, only the tools it allows are sent, each with its
        state-aware arguments schema as the function's parameters.
        """
        response_format = None
        if self.call_format in JSON_CALL_FORMATS:
            if tools:
                response_format = json_response_format(self.call_format, schema or call_schema(tools))
            messages, tools = chatml_messages(messages, tools), []
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": temperature}
        if tools and schema is not None:
            tools = self._constrained_tools(tools, schema)
        if tools:
            kwargs["tools"] = tools
            if self.call_format == "required":
                kwargs["tool_choice"] = "required"
        if response_format is not None:
            kwargs["response_format"] = response_format
        if n > 1:
            kwargs["n"] = n
        if seed is not None:
            kwargs["seed"] = seed
        kwargs["max_tokens"] = self.max_tokens
        if self.extra_body:
            kwargs["extra_body"] = self.extra_body
        return kwargs

    def _constrained_tools(self, tools: list[dict], schema: dict[str, Any]) -> list[dict]:
        from mltb_core.toolkit.constraints import arguments_by_tool

        arguments = arguments_by_tool(schema)
        out = []
        for tool in tools:
            function = tool.get("function", tool)
            if function.get("name") in arguments:
                function = {**function, "parameters": arguments[function["name"]]}
                if self.strict_tools:
                    function["strict"] = True
                out.append({"type": "function", "function": function})
        return out

    def _backoff(self, attempt: int) -> float:
        return min(self.backoff_max, self.backoff_base * 2 ** attempt) * (0.5 + self._jitter.random())

    def _call_with_retries(self, kwargs: dict[str, Any], usage: Usage) -> Any:
        """One request; retries counted into ``usage``; InfraError when the budget is spent."""
        for attempt in range(self.max_retries + 1):
            try:
                response = self.client.chat.completions.create(**kwargs)
                if not getattr(response, "choices", None) or response.choices[0].message is None:
                    raise RetryableResponseError("the response has no choices")
                return response
            except Exception as exc:  # noqa: BLE001 - classified below
                if not _is_retryable(exc):
                    import openai

                    if isinstance(exc, openai.BadRequestError) and _is_context_overflow(exc):
                        raise ContextOverflowError(f"{self.name}: {_describe(exc)}") from exc
                    if isinstance(exc, openai.APIError):
                        raise InfraError(f"{self.name}: request rejected, not retried: {_describe(exc)}") from exc
                    raise
                if attempt == self.max_retries:
                    raise InfraError(f"{self.name}: gave up after {self.max_retries} retries; "
                                     f"last error {_describe(exc)}") from exc
                usage.retries += 1
                self._sleep(self._backoff(attempt))
        raise AssertionError("unreachable")

    # ----------------------------------------------------------------- generation
    def _generate(self, messages: list[dict], tools: list[dict], n: int, temperature: float,
                  seed: int | None, call_schema: dict[str, Any] | None = None) -> LLMResponse:
        start = time.perf_counter()
        usage = Usage()
        candidates: list[Candidate] = []
        request_index = 0
        if seed is None:
            # The trial seed must reach the sampler. Given no seed, llama-cpp-python seeds a request from
            # the one before it (or from a restored prompt prefix), so trials with different seeds drew
            # the same samples: the planner table's replicate trials came out token-for-token identical.
            seed = self._sampler_seeds.randrange(2**31)
        while len(candidates) < n:
            wanted = n - len(candidates) if self.supports_n is not False else 1
            # Repeated requests get distinct seeds, else a seeded server returns the same sample.
            response = self._call_with_retries(self._request(messages, tools, wanted, temperature,
                                                             seed + request_index, call_schema),
                                                 usage)
            request_index += 1
            usage.calls += 1
            if wanted > 1:
                self._saw_choices(len(response.choices), wanted)
            if response.usage is not None:
                usage.prompt_tokens += response.usage.prompt_tokens or 0
                usage.completion_tokens += response.usage.completion_tokens or 0
            usage.cached_input_tokens += server_cached_tokens(response)
            candidates.extend(self._candidate(choice.message, getattr(choice, "finish_reason", None))
                              for choice in response.choices[:wanted])
        usage.cost_usd = self.price.cost(usage.prompt_tokens, usage.completion_tokens, usage.cached_input_tokens)
        usage.seconds = time.perf_counter() - start
        return LLMResponse(candidates, usage)

    def _saw_choices(self, got: int, wanted: int) -> None:
        """What a request for ``wanted`` choices that returned ``got`` says about the server's ``n``.

        Unproven (``supports_n`` None), the budget capped ``wanted`` at the calls left, so the requests that top
        up a short reply stay within it; a short reply then settles ``n`` off for the trial (the server ignores
        it: llama_cpp.server, Ollama), a full one on. Declared on, a short reply would top up past the budget
        the planner counted on: the declaration is wrong, an infrastructure error that says how to fix it."""
        if got >= wanted:
            if self.supports_n is None:
                self.supports_n = True
            return
        if self.supports_n is None:
            self.supports_n = False
            return
        raise InfraError(f"{self.name}: the server returned {got} of the {wanted} choices asked for (n), but n is "
                         "declared supported (MLTB_OPENAI_N=on, or OpenAI's API); for a server that ignores n set "
                         "MLTB_OPENAI_N=off (one request per candidate) or auto")

    def _candidate(self, message: Any, finish_reason: str | None = None) -> Candidate:
        native = [(call.function.name, call.function.arguments)
                  for call in (message.tool_calls or []) if getattr(call, "function", None) is not None]
        candidate = candidate_from_message(message.content, native)
        if finish_reason == "length" and (candidate.error or not candidate.tool_calls):
            # A reply stopped at the length limit reads as broken JSON; say what really happened.
            candidate.error = cut_off_error(self.max_tokens)
        return candidate


def server_cached_tokens(response: Any) -> int:
    """Prompt tokens the server took from its prompt cache, as far as it says.

    Read, first found: ``usage.prompt_tokens_details.cached_tokens`` (OpenAI; vLLM started with
    ``--enable-prompt-tokens-details``; llama.cpp's server since early 2026; Ollama once it reports them),
    ``usage.input_tokens_details.cached_tokens`` (the Responses API's name, which some gateways put here),
    ``usage.prompt_cache_hit_tokens`` (DeepSeek's API and servers copying it), llama.cpp's non-standard
    top-level ``timings.cache_n``. A server that says none of them counts as 0: llama-cpp-python's
    ``llama_cpp.server`` reuses its prompt prefix but reports no count of it (its reply's usage has
    prompt, completion and total tokens only). Never more than ``prompt_tokens``; a value that is not a
    non-negative integer is no report."""
    usage = getattr(response, "usage", None)
    found = None
    if usage is not None:
        for details in ("prompt_tokens_details", "input_tokens_details"):
            found = _count(_field(_field(usage, details), "cached_tokens"))
            if found is not None:
                break
        if found is None:
            found = _count(_field(usage, "prompt_cache_hit_tokens"))
    if found is None:
        found = _count(_field(_field(response, "timings"), "cache_n"))
    if found is None:
        return 0
    prompt = _count(_field(usage, "prompt_tokens"))
    return min(found, prompt) if prompt is not None else found


def _field(value: Any, name: str) -> Any:
    """``value.name`` of a response object, its extra fields (``model_extra``) or a plain dict included."""
    if value is None:
        return None
    if isinstance(value, dict):
        return value.get(name)
    found = getattr(value, name, None)
    if found is None:
        found = (getattr(value, "model_extra", None) or {}).get(name)
    return found


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


# The retry policy's environment variables: name -> number type (defaults: the environment table's).
RETRY_ENV: dict[str, type] = {"MLTB_LLM_MAX_RETRIES": int, "MLTB_LLM_TIMEOUT": float, "MLTB_LLM_BACKOFF": float}


def _retry_env(name: str) -> Any:
    return _env_number(name, RETRY_ENV[name], RETRY_ENV[name](environment_default(name)))


def check_retry_env() -> None:
    """ValueError naming the variable when a retry-policy variable is not a number (run at start-up)."""
    for name in RETRY_ENV:
        _retry_env(name)


def _env_number(name: str, kind: type, default: float) -> Any:
    raw = read_environment(name)
    if raw is None or not raw.strip():
        return default
    try:
        return kind(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number, got {raw!r}") from None
