"""Response cache: hits are free and keep the original usage; corrupt files are rebuilt; off means off."""
from __future__ import annotations

import copy
import json

import pytest

from fake_openai_server import FakeOpenAIServer, content_reply
from mltb_core.llm import make_backend
from mltb_core.llm.base import Candidate, LLMResponse, Usage
from mltb_core.llm.cache import ResponseCache
from mltb_core.llm.openai_backend import OpenAIBackend
from mltb_core.toolkit.registry import ToolCall

MESSAGES = [{"role": "user", "content": "go"}]
CALL = '{"tool_name": "read_data", "tool_args": {"func_kwargs": {"path": "a.csv"}, "output": "df"}}'


@pytest.fixture
def server():
    with FakeOpenAIServer(default=content_reply(CALL, prompt_tokens=100, completion_tokens=20)) as srv:
        yield srv


def backend(server, cache, seed=0):
    return OpenAIBackend("gpt-4o", base_url=server.base_url, api_key="k", cache=cache, seed=seed)


def test_hit_is_free_and_keeps_original_usage(server, tmp_path):
    cache = ResponseCache(tmp_path)
    first = backend(server, cache)
    miss = first.complete(MESSAGES, [], seed=1)
    second = backend(server, cache)
    hit = second.complete(MESSAGES, [], seed=1)
    assert len(server.requests) == 1 and not miss.cached and hit.cached
    assert [c.to_dict() for c in hit.candidates] == [c.to_dict() for c in miss.candidates]
    assert (hit.usage.prompt_tokens, hit.usage.completion_tokens, hit.usage.cost_usd, hit.usage.calls) == (0, 0, 0, 0)
    assert (hit.usage.cached_calls, hit.usage.cached_prompt_tokens, hit.usage.cached_completion_tokens) == (1, 100, 20)
    assert hit.usage.cached_cost_usd == pytest.approx(miss.usage.cost_usd) and miss.usage.cost_usd > 0
    assert second.usage.cached_calls == 1 and second.usage.prompt_tokens == 0
    files = list((tmp_path / "llm").glob("*/*.json"))
    assert len(files) == 1 and files[0].parent.name == files[0].stem[:2]


@pytest.mark.parametrize("change", [
    {"messages": [{"role": "user", "content": "other"}]}, {"n": 2}, {"temperature": 0.1}, {"seed": 2},
    {"tools": [{"type": "function", "function": {"name": "t"}}]},
])
def test_any_request_difference_misses(server, tmp_path, change):
    cache = ResponseCache(tmp_path)
    base = {"messages": MESSAGES, "tools": [], "n": 1, "temperature": 0.7, "seed": 1}
    backend(server, cache).complete(**base)
    backend(server, cache).complete(**{**base, **change})
    assert len(server.requests) == 2


def test_trial_seed_is_part_of_the_key(server, tmp_path):
    cache = ResponseCache(tmp_path)
    backend(server, cache, seed=0).complete(MESSAGES, [])
    backend(server, cache, seed=1).complete(MESSAGES, [])
    backend(server, cache, seed=1).complete(MESSAGES, [])
    assert len(server.requests) == 2


def test_corrupt_file_is_ignored_with_warning_and_rebuilt(server, tmp_path):
    cache = ResponseCache(tmp_path)
    backend(server, cache).complete(MESSAGES, [])
    [path] = (tmp_path / "llm").glob("*/*.json")
    path.write_text('{"candidates": [')
    with pytest.warns(RuntimeWarning, match="corrupt LLM cache entry"):
        again = backend(server, cache).complete(MESSAGES, [])
    assert not again.cached and len(server.requests) == 2
    assert json.loads(path.read_text())["candidates"][0]["tool_calls"][0]["tool_name"] == "read_data"
    assert backend(server, cache).complete(MESSAGES, []).cached


def test_disabled_cache_never_reads_or_writes(server, tmp_path):
    for cache in (ResponseCache(tmp_path, enabled=False), None):
        b = backend(server, cache)
        b.complete(MESSAGES, [])
        b.complete(MESSAGES, [])
    assert len(server.requests) == 4 and not (tmp_path / "llm").exists()


def test_make_backend_cache_argument(server, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    assert make_backend("openai:gpt-4o").cache is None
    assert make_backend("openai:gpt-4o", cache=str(tmp_path)).cache.root == tmp_path / "llm"
    monkeypatch.setenv("MLTB_CACHE_DIR", str(tmp_path / "env"))
    assert make_backend("openai:gpt-4o", cache=True).cache.root == tmp_path / "env" / "llm"
    with pytest.raises(TypeError, match="cache must be"):
        make_backend("openai:gpt-4o", cache=3)


def test_roundtrip_and_atomic_put_leaves_no_temp_files(tmp_path):
    cache = ResponseCache(tmp_path)
    response = LLMResponse([Candidate("why", [ToolCall("t", {"df": "train"}, {"k": 1}, ["a", "b"])], None),
                            Candidate("", [], "your tool call was malformed: x")], Usage(3, 4, 1, 1, 0.1, 2.0))
    key = cache.key("m", MESSAGES, [], 2, 0.7, None, 0)
    cache.put(key, response)
    cache.put(key, response)  # overwrite in place
    loaded = cache.get(key)
    assert loaded.to_dict() == response.to_dict()
    assert [p.name for p in cache.path(key).parent.iterdir()] == [f"{key}.json"]


def test_another_server_is_asked_and_the_record_names_it(tmp_path):
    """Round 5: one model name against two servers once shared replies (the key was the model string)."""
    cache = ResponseCache(tmp_path)
    with FakeOpenAIServer(default=content_reply(CALL)) as a, \
            FakeOpenAIServer(default=content_reply("server B's reply")) as b:
        from_a = backend(a, cache).complete(MESSAGES, [], seed=1)
        on_b = backend(b, cache)
        from_b = on_b.complete(MESSAGES, [], seed=1)
        assert len(a.requests) == len(b.requests) == 1
        assert not from_b.cached and from_b.candidates[0].text == "server B's reply" != from_a.candidates[0].text
        assert from_b.usage.cost_usd > 0
        assert on_b.endpoint == b.base_url.rstrip("/") != backend(a, cache).endpoint
        assert backend(b, cache).complete(MESSAGES, [], seed=1).cached and len(b.requests) == 1


@pytest.mark.parametrize("setting", [{"max_tokens": 7}, {"extra_body": {"top_k": 2}}, {"supports_n": False},
                                     {"strict_tools": True}])
def test_a_setting_that_changes_the_request_misses(server, tmp_path, setting):
    cache = ResponseCache(tmp_path)
    backend(server, cache).complete(MESSAGES, [])
    OpenAIBackend("gpt-4o", base_url=server.base_url, api_key="k", cache=cache, **setting).complete(MESSAGES, [])
    assert len(server.requests) == 2


def test_the_record_names_no_secret_of_the_base_url():
    from mltb_core.llm.openai_backend import public_url

    assert public_url("https://user:pw@proxy.example:8443/v1?key=s3cret#x") == "https://proxy.example:8443/v1"
    keyed = OpenAIBackend("gpt-4o", base_url="https://u:p@h.example/v1?k=1", api_key="k")
    assert keyed.endpoint == "https://h.example/v1" and "k=1" in keyed.answerer
    assert OpenAIBackend("gpt-4o", base_url=None, api_key="k").endpoint == "https://api.openai.com/v1"


def _stored(server, cache):
    backend(server, cache).complete(MESSAGES, [])
    [path] = (cache.root).glob("*/*.json")
    return path, json.loads(path.read_text())


def _set(data, dotted, value):
    data = copy.deepcopy(data)
    node = data
    *heads, last = dotted.split(".")
    for head in heads:
        node = node[int(head)] if isinstance(node, list) else node[head]
    node[last] = value
    return data


DAMAGE = {
    "torn": lambda path, data: path.write_text(json.dumps(data)[:40]),
    "not JSON": lambda path, data: path.write_text("}{"),
    "not UTF-8": lambda path, data: path.write_bytes(b"\xff\xfe{}"),
    "empty": lambda path, data: path.write_text(""),
    "a list": lambda path, data: path.write_text("[1]"),
    "calls a string": lambda path, data: path.write_text(json.dumps(_set(data, "usage.calls", "x"))),
    "tokens a bool": lambda path, data: path.write_text(json.dumps(_set(data, "usage.prompt_tokens", True))),
    "negative cost": lambda path, data: path.write_text(json.dumps(_set(data, "usage.cost_usd", -1.0))),
    "huge count": lambda path, data: path.write_text(json.dumps(_set(data, "usage.calls", 10**400))),
    "usage a list": lambda path, data: path.write_text(json.dumps(_set(data, "usage", [1]))),
    "text a number": lambda path, data: path.write_text(json.dumps(_set(data, "candidates.0.text", 5))),
    "error a dict": lambda path, data: path.write_text(json.dumps(_set(data, "candidates.0.error", {}))),
    "calls not a list": lambda path, data: path.write_text(json.dumps(_set(data, "candidates.0.tool_calls", "x"))),
    "a call without a name": lambda path, data: path.write_text(
        json.dumps(_set(data, "candidates.0.tool_calls", [{"tool_args": {}}]))),
    "no candidates": lambda path, data: path.write_text(json.dumps(_set(data, "candidates", []))),
    "a candidate a string": lambda path, data: path.write_text(json.dumps(_set(data, "candidates", ["x"]))),
    "text past the bound": lambda path, data: path.write_text(
        json.dumps(_set(data, "candidates.0.text", "x" * 100_001))),
    "a lone surrogate": lambda path, data: path.write_text(
        json.dumps(_set(data, "candidates.0.text", "\udc80"))),
    "nested too deep": lambda path, data: path.write_text("[" * 100_000 + "]" * 100_000),
}


@pytest.mark.parametrize("damage", DAMAGE, ids=list(DAMAGE))
def test_a_damaged_entry_is_a_miss_removed_and_replaced(server, tmp_path, damage):
    """Round 5: a hit was returned without the checks a fresh reply gets (a TypeError made an infra error)."""
    cache = ResponseCache(tmp_path)
    path, data = _stored(server, cache)
    DAMAGE[damage](path, data)
    with pytest.warns(RuntimeWarning, match="ignoring corrupt LLM cache entry .* removed; it will be rebuilt"):
        assert cache.get(path.stem) is None
    assert not path.exists()
    again = backend(server, cache).complete(MESSAGES, [])
    assert not again.cached and len(server.requests) == 2 and again.candidates[0].tool_calls[0].tool_name == "read_data"
    assert json.loads(path.read_text())["candidates"] == data["candidates"]   # written afresh, whole
    hit = backend(server, cache).complete(MESSAGES, [])
    assert hit.cached and hit.candidates[0].to_dict() == again.candidates[0].to_dict()


def test_a_damaged_entry_met_by_a_backend_is_asked_afresh(server, tmp_path):
    cache = ResponseCache(tmp_path)
    path, data = _stored(server, cache)
    path.write_text(json.dumps(_set(data, "usage.calls", "x")))
    with pytest.warns(RuntimeWarning, match="corrupt LLM cache entry"):
        again = backend(server, cache).complete(MESSAGES, [])
    assert not again.cached and len(server.requests) == 2 and again.usage.calls == 1
