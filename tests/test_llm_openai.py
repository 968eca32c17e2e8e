"""OpenAI backend against the fake server: parsing, accounting, retries, n candidates, factory, prices."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from fake_openai_server import (FakeOpenAIServer, Step, connection_cut, content_reply, delay, empty_choices,
                                error, malformed_body, tool_call_reply)
from mltb_core.llm import InfraError, UnknownModelError, make_backend
from mltb_core.llm.base import MALFORMED, Usage, parse_content_tool_calls
from mltb_core.llm.openai_backend import OpenAIBackend
from mltb_core.llm.prices import PriceTableError, UnknownPriceError, load_price_table

MESSAGES = [{"role": "system", "content": "plan"}, {"role": "user", "content": "go"}]
READ_ARGS = {"bindings": {}, "func_kwargs": {"path": "train.csv"}, "output": "train"}


@pytest.fixture
def server():
    with FakeOpenAIServer() as srv:
        yield srv


def backend_for(server, model="gpt-4o", **opts):
    opts.setdefault("sleep", lambda seconds: None)
    return OpenAIBackend(model, base_url=server.base_url, api_key="test-key", **opts)


def test_native_tool_call_is_parsed(server):
    server.enqueue(tool_call_reply("read_data", READ_ARGS, content="load the data first"))
    response = backend_for(server).complete(MESSAGES, [])
    [cand] = response.candidates
    assert cand.error is None and cand.text == "load the data first"
    [call] = cand.tool_calls
    assert (call.tool_name, call.func_kwargs, call.output) == ("read_data", {"path": "train.csv"}, "train")


@pytest.mark.parametrize("content", [
    json.dumps({"tool_name": "read_data", "tool_args": READ_ARGS}),
    "I will load it.\n```json\n" + json.dumps({"tool_name": "read_data", "tool_args": READ_ARGS}) + "\n```",
    "Call: " + json.dumps({"name": "read_data", "arguments": READ_ARGS}) + " done",
])
def test_tool_call_in_content_is_parsed(server, content):
    server.enqueue(content_reply(content))
    [cand] = backend_for(server).complete(MESSAGES, []).candidates
    assert cand.error is None
    assert [c.tool_name for c in cand.tool_calls] == ["read_data"]
    assert cand.tool_calls[0].func_kwargs == {"path": "train.csv"}


def test_malformed_tool_calls_become_candidate_errors(server):
    server.enqueue(tool_call_reply("read_data", '{"func_kwargs": {"path": '),
                   content_reply('{"tool_name": "read_data", "tool_args": {"bindings": ["x"]}}'),
                   content_reply('{"tool_name": "read_data", "tool_args": {'))
    backend = backend_for(server)
    errors = [backend.complete(MESSAGES, []).candidates[0].error for _ in range(3)]
    assert all(e and e.startswith("your tool call was malformed:") for e in errors), errors
    assert "not valid JSON" in errors[0] and "bindings" in errors[1]


def test_plain_text_is_neither_call_nor_error():
    assert parse_content_tool_calls("I think we should look at the data {first}.") == ([], None)


def test_usage_and_cost_accumulate(server):
    server.enqueue(content_reply("a", prompt_tokens=1000, completion_tokens=200),
                   content_reply("b", prompt_tokens=500, completion_tokens=100))
    backend = backend_for(server, model="gpt-4o-mini")
    first = backend.complete(MESSAGES, [])
    backend.complete(MESSAGES, [])
    assert first.usage.cost_usd == pytest.approx((1000 * 0.15 + 200 * 0.60) / 1e6)
    total = backend.usage
    assert (total.prompt_tokens, total.completion_tokens, total.calls, total.retries) == (1500, 300, 2, 0)
    assert total.cost_usd == pytest.approx((1500 * 0.15 + 300 * 0.60) / 1e6)


def test_usage_addition_sums_every_field():
    a = Usage(1, 2, 3, 0.5, 1.0, 1, 1, 10, 20, 0.25)
    b = Usage(10, 20, 1, 0.5, 2.0, 2)
    assert a + b == Usage(11, 22, 4, 1.0, 3.0, 3, 1, 10, 20, 0.25)


def test_transient_failures_are_retried_and_counted(server):
    server.enqueue(error(429), error(500), error(503), malformed_body(), empty_choices(), connection_cut(),
                   delay(1.0), tool_call_reply("read_data", READ_ARGS))
    sleeps: list[float] = []
    backend = backend_for(server, max_retries=7, timeout=0.3, sleep=sleeps.append, backoff_base=0.01)
    response = backend.complete(MESSAGES, [])
    assert response.candidates[0].tool_calls[0].tool_name == "read_data"
    assert response.usage.retries == 7 and backend.usage.retries == 7 and response.usage.calls == 1
    assert len(sleeps) == 7
    # exponential: later waits are longer on average despite jitter in [0.5, 1.5)
    assert sleeps[-1] > sleeps[0] and all(0 < s <= 30 for s in sleeps)


def test_retry_budget_exhausted_raises_infra_error(server):
    server.enqueue(*[error(503)] * 3)
    backend = backend_for(server, max_retries=2)
    with pytest.raises(InfraError, match=r"gave up after 2 retries.*503"):
        backend.complete(MESSAGES, [])
    assert len(server.requests) == 3


def test_client_errors_are_not_retried(server):
    server.enqueue(error(401, "bad key"))
    with pytest.raises(InfraError, match="not retried.*401"):
        backend_for(server).complete(MESSAGES, [])
    assert len(server.requests) == 1


def test_n_candidates_in_one_request(server):
    server.enqueue(content_reply('{"tool_name": "a", "tool_args": {}}', '{"tool_name": "b", "tool_args": {}}',
                                 '{"tool_name": "c", "tool_args": {}}', fill_n=False))
    response = backend_for(server).complete(MESSAGES, [], n=3, seed=5)
    assert [c.tool_calls[0].tool_name for c in response.candidates] == ["a", "b", "c"]
    assert len(server.requests) == 1 and server.requests[0]["n"] == 3


def test_n_candidates_by_repeated_calls(server):
    server.enqueue(*(content_reply(json.dumps({"tool_name": t, "tool_args": {}})) for t in "abc"))
    response = backend_for(server, supports_n=False).complete(MESSAGES, [], n=3, seed=5)
    assert [c.tool_calls[0].tool_name for c in response.candidates] == ["a", "b", "c"]
    assert [r.get("n") for r in server.requests] == [None] * 3
    assert [r["seed"] for r in server.requests] == [5, 6, 7]  # distinct samples from a seeded server
    assert response.usage.calls == 3 and response.usage.prompt_tokens == 30


def _unseeded_request_seeds(server, trial_seed: int, calls: int = 3) -> list[int]:
    before = len(server.requests)
    server.enqueue(*(content_reply("ok") for _ in range(calls)))
    backend = backend_for(server, seed=trial_seed)
    for _ in range(calls):
        backend.complete(MESSAGES, [])  # the planners send no seed of their own
    return [r["seed"] for r in server.requests[before:]]


def test_unseeded_requests_carry_seeds_drawn_from_the_trial_seed(server):
    # A server that picks its own seed when none is sent (llama-cpp-python chains it from the previous
    # request) would otherwise give every trial the same samples.
    first = _unseeded_request_seeds(server, trial_seed=11)
    assert len(set(first)) == 3  # each request its own sample
    assert _unseeded_request_seeds(server, trial_seed=11) == first  # reproducible from the trial seed
    assert set(_unseeded_request_seeds(server, trial_seed=12)).isdisjoint(first)  # another trial, other draws


def test_server_returning_fewer_choices_is_topped_up(server):
    server.enqueue(content_reply("one", fill_n=False), content_reply("two", fill_n=False),
                   content_reply("three", fill_n=False), content_reply("four", fill_n=False))
    backend = backend_for(server)
    # a self-hosted server has not shown yet whether it honours n: each candidate may cost a call (the
    # budget caps a request at the calls left, so the top-up below stays within it)
    assert backend.supports_n is None and backend.calls_per_candidate
    response = backend.complete(MESSAGES, [], n=2)
    assert [c.text for c in response.candidates] == ["one", "two"]
    assert [r.get("n") for r in server.requests] == [2, None]
    assert response.usage.calls == 2
    # it ignores n: the rest of the trial asks one candidate per request
    assert backend.supports_n is False and backend.calls_per_candidate
    backend.complete(MESSAGES + [{"role": "user", "content": "more"}], [], n=2)
    assert [r.get("n") for r in server.requests] == [2, None, None, None]


def test_a_server_that_returns_n_choices_settles_n_on(server):
    backend = backend_for(server)
    backend.complete(MESSAGES, [], n=3)   # fill_n: the fake server returns as many as asked
    assert backend.supports_n is True and not backend.calls_per_candidate
    assert [r.get("n") for r in server.requests] == [3]


def test_n_declared_on_but_ignored_is_an_infra_error_naming_the_fix(server, monkeypatch):
    monkeypatch.setenv("MLTB_OPENAI_N", "on")
    server.enqueue(content_reply("one", fill_n=False))
    backend = backend_for(server)
    assert backend.supports_n is True and not backend.calls_per_candidate
    with pytest.raises(InfraError, match="1 of the 3 choices.*MLTB_OPENAI_N=off"):
        backend.complete(MESSAGES, [], n=3)
    assert len(server.requests) == 1   # no top-up the budget did not allow for


@pytest.mark.parametrize("mode, base_url, expected", [
    ("auto", None, True), ("auto", "https://api.openai.com/v1", True), ("auto", "http://127.0.0.1:8080/v1", None),
    ("on", "http://127.0.0.1:8080/v1", True), ("off", None, False), ("OFF", "http://127.0.0.1:8080/v1", False),
])
def test_n_handling_is_declared_per_endpoint(monkeypatch, mode, base_url, expected):
    monkeypatch.setenv("MLTB_OPENAI_N", mode)
    backend = OpenAIBackend("gpt-4o", base_url=base_url, api_key="k")
    assert backend.supports_n is expected


@pytest.mark.parametrize("variable, value", [("MLTB_OPENAI_N", "sometimes"), ("MLTB_OPENAI_CALLS", "grammar")])
def test_a_bad_server_shape_variable_is_refused_naming_it(monkeypatch, variable, value):
    from mltb_core.config import EnvironmentValueError, check_environment

    monkeypatch.setenv(variable, value)
    with pytest.raises(EnvironmentValueError, match=f"{variable}='{value}'"):
        check_environment()


def test_max_tokens_is_always_sent(server):
    from mltb_core.llm.local.models import REPLY_TOKENS

    backend_for(server).complete(MESSAGES, [])
    assert server.requests[0]["max_tokens"] == REPLY_TOKENS
    with pytest.raises(ValueError, match="max_tokens"):
        backend_for(server, max_tokens=0)


TOOLS = [{"type": "function", "function": {"name": "read_data", "description": "Read a file",
                                           "parameters": {"type": "object"}}},
         {"type": "function", "function": {"name": "describe", "description": "Summarise a frame",
                                           "parameters": {"type": "object"}}}]
CHAT = MESSAGES + [{"role": "assistant", "content": None, "tool_calls": [
    {"id": "c1", "type": "function", "function": {"name": "read_data", "arguments": json.dumps(READ_ARGS)}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "rows: 5"}]


def test_the_tools_format_sends_native_tools_and_lets_the_server_choose(server):
    backend_for(server, call_format="tools").complete(CHAT, TOOLS)
    sent = server.requests[0]
    assert sent["tools"] == TOOLS and "tool_choice" not in sent and "response_format" not in sent
    assert sent["messages"] == CHAT


def test_the_required_format_makes_the_server_call_a_tool(server, monkeypatch):
    monkeypatch.setenv("MLTB_OPENAI_CALLS", "required")
    backend_for(server).complete(CHAT, TOOLS)
    sent = server.requests[0]
    assert sent["tools"] == TOOLS and sent["tool_choice"] == "required"
    backend_for(server).complete(MESSAGES, [])      # no tools offered (an evaluation): nothing to require
    assert "tool_choice" not in server.requests[1]


@pytest.mark.parametrize("call_format", ["json_schema", "json_object"])
def test_a_json_format_puts_the_catalogue_in_the_prompt_and_holds_the_reply_to_the_call_schema(server, call_format):
    from mltb_core.llm.local.backend import call_schema, chatml_messages
    from mltb_core.llm.openai_backend import json_response_format

    server.enqueue(content_reply(json.dumps({"tool_name": "read_data", "tool_args": READ_ARGS})))
    backend = backend_for(server, call_format=call_format)
    assert backend.constrains_by_default   # one catalogue for the trial, each call narrowed by its schema
    [candidate] = backend.complete(CHAT, TOOLS).candidates
    assert candidate.tool_calls[0].tool_name == "read_data" and candidate.error is None
    sent = server.requests[0]
    assert "tools" not in sent and "tool_choice" not in sent
    assert sent["messages"] == chatml_messages(CHAT, TOOLS)
    assert "Read a file" in sent["messages"][0]["content"] and {m["role"] for m in sent["messages"]} <= {
        "system", "user", "assistant"}
    assert sent["response_format"] == json_response_format(call_format, call_schema(TOOLS))
    schema = {"type": "object", "properties": {"tool_name": {"const": "describe"}}}
    backend.complete(CHAT, TOOLS, call_schema=schema)   # a state-aware schema replaces the any-tool one
    assert server.requests[1]["response_format"] == json_response_format(call_format, schema)
    if call_format == "json_schema":
        assert sent["response_format"]["type"] == "json_schema"
        assert sent["response_format"]["json_schema"]["schema"] == call_schema(TOOLS)
    else:
        assert sent["response_format"] == {"type": "json_object", "schema": call_schema(TOOLS)}


def test_each_call_format_has_its_own_cached_replies(server, tmp_path):
    from mltb_core.llm.cache import ResponseCache

    cache = ResponseCache(tmp_path)
    server.enqueue(content_reply("native"), content_reply("json"))
    first = backend_for(server, call_format="tools", cache=cache).complete(CHAT, TOOLS)
    other = backend_for(server, call_format="json_object", cache=cache).complete(CHAT, TOOLS)
    again = backend_for(server, call_format="tools", cache=cache).complete(CHAT, TOOLS)
    assert [first.candidates[0].text, other.candidates[0].text] == ["native", "json"] and not other.cached
    assert again.cached and again.candidates[0].text == "native" and len(server.requests) == 2


def test_a_reply_a_json_format_could_not_hold_is_the_models_failure(server):
    # a server that accepts the format but does not apply it: whatever comes back is the model's reply
    server.enqueue(content_reply('{"tool_name": "read_data", "tool_args": {"bindings": '))
    [candidate] = backend_for(server, call_format="json_object").complete(CHAT, TOOLS).candidates
    assert not candidate.tool_calls and candidate.error.startswith(MALFORMED)


def test_request_carries_tools_and_settings(server):
    tools = [{"type": "function", "function": {"name": "read_data", "parameters": {"type": "object"}}}]
    backend_for(server, max_tokens=64).complete(MESSAGES, tools, temperature=0.2, seed=3)
    sent = server.requests[0]
    assert sent["tools"] == tools and sent["temperature"] == 0.2 and sent["seed"] == 3
    assert sent["max_tokens"] == 64 and sent["messages"] == MESSAGES


# ----------------------------------------------------------------------- factory
def test_make_backend_forms(server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "env-key")
    backend = make_backend("openai:gpt-4.1-nano", seed=3, sleep=lambda s: None)
    assert isinstance(backend, OpenAIBackend) and backend.name == "openai:gpt-4.1-nano"
    assert not backend.synthetic and backend.seed == 3
    assert backend.complete(MESSAGES, []).candidates[0].text == "ok"


@pytest.mark.parametrize("model,match", [
    ("gpt-4o", "no backend called 'gpt-4o'"), ("openai:", "needs a model id"), ("", "empty"),
    ("sim:high", "not a number"), ("sim:1.5", "outside"),
])
def test_make_backend_rejects_unknown_forms(model, match):
    with pytest.raises(UnknownModelError, match=match) as info:
        make_backend(model)
    assert "openai:<model>" in str(info.value) and "local:/path/model.gguf" in str(info.value)


@pytest.mark.parametrize("base_url", [None, "https://api.openai.com/v1", "https://eu.api.openai.com/v1"])
def test_no_api_key_for_openai_itself_is_an_infra_error(monkeypatch, base_url):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    backend = OpenAIBackend("gpt-4o", base_url=base_url)
    with pytest.raises(InfraError, match="OPENAI_API_KEY"):
        backend.complete(MESSAGES, [])


def test_a_self_hosted_server_runs_without_a_key(server, monkeypatch):
    # the preflight accepts OPENAI_BASE_URL alone (llama-server, vLLM); the backend must then run, not refuse
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    server.enqueue(tool_call_reply("read_csv", READ_ARGS))
    llm = make_backend("openai:my-llama-server-model")
    response = llm.complete(MESSAGES, [])
    assert response.candidates[0].tool_calls[0].tool_name == "read_csv" and response.usage.calls == 1


# ------------------------------------------------------------------------ prices
def test_bundled_prices_cover_the_paper_models():
    table = load_price_table()
    for model in ("gpt-4o", "gpt-4o-mini", "gpt-4.1", "gpt-4.1-mini", "gpt-4.1-nano", "o4-mini"):
        assert table.price(model).input_per_m > 0
    # dated snapshots use the longest matching entry
    assert table.price("gpt-4o-mini-2024-07-18") == table.price("gpt-4o-mini")


def test_bundled_prices_have_a_cached_input_rate_below_the_input_rate():
    table = load_price_table()
    for model in ("gpt-4o", "gpt-4o-mini", "gpt-4.1", "gpt-4.1-mini", "gpt-4.1-nano", "o4-mini"):
        price = table.price(model)
        assert price.cached_input_per_m is not None and 0 < price.cached_rate < price.input_per_m, model


@pytest.mark.parametrize("step_usage", [
    {"cached_tokens": 600_000},                              # OpenAI: usage.prompt_tokens_details
    {"usage_extra": {"prompt_tokens_details": {"text_tokens": None, "audio_tokens": None, "image_tokens": None,
                                               "cached_tokens": 600_000}}},   # vLLM's prompt_tokens_details
    {"usage_extra": {"input_tokens_details": {"cached_tokens": 600_000}}},    # the Responses API's name
    {"usage_extra": {"prompt_cache_hit_tokens": 600_000, "prompt_cache_miss_tokens": 400_000}},  # DeepSeek's
    {"timings": {"cache_n": 600_000, "prompt_n": 400_000}},  # llama.cpp server: timings.cache_n
])
def test_server_cached_tokens_are_counted_and_billed_at_the_cached_rate(server, step_usage):
    server.enqueue(content_reply("x", prompt_tokens=1_000_000, completion_tokens=100_000, **step_usage),
                   content_reply("y", prompt_tokens=1_000_000, completion_tokens=100_000))
    backend = backend_for(server, model="gpt-4.1-mini")
    usage = backend.complete(MESSAGES, []).usage
    assert usage.cached_input_tokens == 600_000
    # 400k fresh input at 0.40 + 600k cached at 0.10 + 100k output at 1.60 (USD per 1M)
    assert usage.cost_usd == pytest.approx(0.4 * 0.40 + 0.6 * 0.10 + 0.1 * 1.60)
    plain = backend.complete(MESSAGES + [{"role": "user", "content": "again"}], []).usage
    assert plain.cached_input_tokens == 0 and plain.cost_usd == pytest.approx(0.40 + 0.1 * 1.60)
    assert backend.usage.cached_input_tokens == 600_000


@pytest.mark.parametrize("usage_extra", [
    {},                                                     # llama_cpp.server: prompt/completion/total only
    {"prompt_tokens_details": None},                        # a server that names the field but fills nothing
    {"prompt_tokens_details": {"cached_tokens": -5}},       # nonsense is no report
    {"prompt_cache_hit_tokens": True},
])
def test_a_server_that_reports_no_cached_count_counts_zero(server, usage_extra):
    server.enqueue(content_reply("x", prompt_tokens=100, usage_extra=usage_extra))
    assert backend_for(server).complete(MESSAGES, []).usage.cached_input_tokens == 0


def test_a_cached_count_above_the_prompt_is_capped_at_the_prompt(server):
    server.enqueue(content_reply("x", prompt_tokens=100, usage_extra={"prompt_cache_hit_tokens": 900}))
    assert backend_for(server).complete(MESSAGES, []).usage.cached_input_tokens == 100


def test_a_price_without_cached_rate_bills_cached_tokens_as_input(tmp_path, monkeypatch, server):
    table = tmp_path / "mine.toml"
    table.write_text('[models."gpt-9"]\ninput = 1.0\noutput = 2.0\n')
    monkeypatch.setenv("MLTB_PRICES", str(table))
    server.enqueue(content_reply("x", prompt_tokens=1_000_000, completion_tokens=0, cached_tokens=999_999))
    usage = backend_for(server, model="gpt-9").complete(MESSAGES, []).usage
    assert usage.cached_input_tokens == 999_999 and usage.cost_usd == pytest.approx(1.0)


def test_unpriced_model_fails_at_construction():
    with pytest.raises(UnknownPriceError, match=r"'gpt-9'.*prices.toml.*MLTB_PRICES"):
        make_backend("openai:gpt-9", api_key="k")


def test_user_price_table_from_env(tmp_path, monkeypatch, server):
    table = tmp_path / "mine.toml"
    table.write_text('[models."gpt-9"]\ninput = 1.0\noutput = 2.0\n')
    monkeypatch.setenv("MLTB_PRICES", str(table))
    server.enqueue(content_reply("x", prompt_tokens=1_000_000, completion_tokens=1_000_000))
    backend = backend_for(server, model="gpt-9")
    assert backend.complete(MESSAGES, []).usage.cost_usd == pytest.approx(3.0)


@pytest.mark.parametrize("text,match", [
    ('[models."m"]\ninput = 1.0\n', r"entry 'm' must have 'input' and 'output'"),
    ('[models."m"]\ninput = 1.0\noutput = 1.0\ncache = 0.5\n', r"may have 'cached_input'"),
    ('[models."m"]\ninput = 1.0\noutput = 1.0\ncached_input = -0.5\n', r"entry 'm' field 'cached_input'"),
    ('[models."m"]\ninput = -1.0\noutput = 1.0\n', r"entry 'm' field 'input'"),
    ('[models."m"]\ninput = "cheap"\noutput = 1.0\n', r"entry 'm' field 'input'"),
    ("models = [\n", "is not TOML"),
    ("x = 1\n", "needs a"),
])
def test_malformed_price_table_names_file_and_entry(tmp_path, text, match):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(PriceTableError, match=match) as info:
        load_price_table(path)
    assert "bad.toml" in str(info.value)


def test_missing_price_table_file(tmp_path):
    with pytest.raises(PriceTableError, match="does not exist"):
        load_price_table(tmp_path / "nope.toml")


def test_retry_policy_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("MLTB_LLM_MAX_RETRIES", "1")
    monkeypatch.setenv("MLTB_LLM_TIMEOUT", "2.5")
    monkeypatch.setenv("MLTB_LLM_BACKOFF", "0.01")
    backend = OpenAIBackend("gpt-4o", base_url="http://127.0.0.1:9/v1", api_key="x")
    assert (backend.max_retries, backend.timeout, backend.backoff_base) == (1, 2.5, 0.01)
    assert OpenAIBackend("gpt-4o", base_url="http://127.0.0.1:9/v1", api_key="x", max_retries=3).max_retries == 3
    monkeypatch.setenv("MLTB_LLM_TIMEOUT", "soon")
    with pytest.raises(ValueError, match="MLTB_LLM_TIMEOUT must be a number"):
        OpenAIBackend("gpt-4o", base_url="http://127.0.0.1:9/v1", api_key="x")


def test_a_reply_cut_off_at_the_length_limit_is_reported_as_cut_off_not_malformed(server):
    # A call naming many columns runs past max_tokens; the server stops it mid-JSON. The model must learn
    # that its reply was too long, not that its JSON was broken (it would retry the same long call).
    partial = '{"tool_name": "fillna_with_median", "tool_args": {"bindings": {"df": "combined"}, "func_kwargs": {"columns": ["Elevation", "Aspect"'
    server.enqueue(Step(choices=[{"content": partial}], finish_reason="length"),
                   Step(choices=[{"content": "I would first look at the"}], finish_reason="length"),
                   Step(choices=[{"content": partial}]))
    backend = backend_for(server, max_tokens=64)
    for _ in range(2):
        [cand] = backend.complete(MESSAGES, []).candidates
        assert not cand.tool_calls
        assert "cut off at the 64-token reply limit" in cand.error and MALFORMED not in cand.error
    assert [r["max_tokens"] for r in server.requests] == [64, 64]
    [cand] = backend.complete(MESSAGES, []).candidates  # the same text, stopped by the model: malformed
    assert cand.error.startswith(MALFORMED)


def test_a_complete_call_survives_a_length_stop(server):
    # The call closed before the limit (trailing text ran on): the call stands.
    text = json.dumps({"tool_name": "read_data", "tool_args": READ_ARGS}) + " Next I will"
    server.enqueue(Step(choices=[{"content": text}], finish_reason="length"))
    [cand] = backend_for(server, max_tokens=64).complete(MESSAGES, []).candidates
    assert cand.error is None and cand.tool_calls[0].tool_name == "read_data"


# ------------------------------------------------------------- the call budget on a server without n
@pytest.mark.parametrize("ignores_n, asked, requests", [
    (True, [3, 1], 4),       # 3 candidates cost 3 requests; the last call's expansion is capped at 1
    (False, [3, 3, 3, 3], 4),  # n honoured: one request per expansion
])
def test_a_call_budget_holds_whether_or_not_the_server_honours_n(tmp_path, monkeypatch, ignores_n, asked, requests):
    """llama_cpp.server ignores ``n``: a 10-call budget made 12 requests. Here a 4-call MCTS budget with k=3
    must make exactly 4 requests, against a server that ignores n and one that honours it."""
    from mltb_core.bench.tasks import get_task
    from mltb_core.config import TrialConfig
    from mltb_core.planners.trajectory import read_trajectory
    from mltb_core.runner.trial import run_trial
    from sim_openai_server import SimOpenAIServer

    prices = tmp_path / "prices.toml"
    prices.write_text('[models."sim-gpt"]\ninput = 1.0\noutput = 2.0\n')
    monkeypatch.setenv("MLTB_PRICES", str(prices))
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    with SimOpenAIServer(skill=0.9, seed=1, ignores_n=ignores_n) as upstream:
        monkeypatch.setenv("OPENAI_BASE_URL", upstream.base_url)
        config = TrialConfig(planner="mcts_shaped", model="openai:sim-gpt", seed=7, llm_cache=False,
                             max_llm_calls=4).with_(expansion_k=3)
        record = run_trial(get_task("spaceship-titanic"), config, tmp_path)
        assert upstream.requests == requests
    assert record.llm_calls == 4 and "LLM-call budget (4)" in record.stop_reason
    trajectory = list(read_trajectory(Path(record.trajectory)))
    assert [s["n"] for s in trajectory if s["step_type"] == "llm_call"] == asked
