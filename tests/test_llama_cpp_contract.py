"""The llama-cpp-python members mltb's engine relies on beyond the public API (mltb_core/llm/local/lean.py,
engine.py, forcing.py), each checked by name and call shape, so an upgrade past the pinned range that renames or
reshapes one fails here, in CI, instead of inside a user's trial. The last tests keep the lists complete: a
private member or C function the engine starts using fails them until it is listed here."""
from __future__ import annotations

import importlib.util
import inspect
import re
from pathlib import Path

import pytest

from tiny_model import needs_tiny_model

ENGINE_FILES = [Path(__file__).resolve().parent.parent / "mltb_core/llm/local" / name
                for name in ("lean.py", "engine.py", "forcing.py")]

pytestmark = pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                                reason="llama-cpp-python is not installed: pip install 'mltb[local-smoke]'")

# module-level functions and types of llama_cpp (the C API bindings and a few classes)
MODULE_MEMBERS = [
    "Llama", "LlamaRAMCache", "LlamaGrammar", "llama.LlamaState", "_internals.LlamaSampler", "llama_grammar",
    "llama_chat_format", "llama_state_get_size", "llama_state_get_data", "llama_set_n_threads",
    "llama_sampler_accept", "llama_sampler_free", "llama_sampler_init_grammar", "llama_sampler_apply",
    "llama_sampler_clone",
    "llama_sampler_chain_n", "llama_sampler_chain_get", "llama_sampler_name", "llama_vocab_is_eog",
    "llama_vocab_eos", "llama_vocab_eot", "llama_token_data", "llama_token_data_array",
    "llama_grammar.json_schema_to_gbnf", "llama_grammar.LlamaGrammar.from_string",
    "llama_grammar.SchemaConverter", "llama_grammar.SchemaConverter._format_literal",
    "llama_chat_format.ChatFormatterResponse", "llama_chat_format.chat_formatter_to_chat_completion_handler",
]
# Llama methods LeanLlama overrides or calls, with the parameters it passes by name
LLAMA_METHODS = {
    "save_state": [], "load_state": ["state"], "eval": ["tokens"], "_init_sampler": ["grammar"],
    "sample": ["idx", "grammar"], "generate": ["tokens", "grammar"], "tokenize": ["add_bos", "special"],
    "detokenize": ["tokens"], "set_cache": ["cache"], "reset": [], "n_ctx": [], "n_vocab": [],
    "create_chat_completion": ["messages", "response_format", "seed", "temperature", "top_p", "stop", "max_tokens",
                               "grammar"],
}
LLAMA_INIT_ARGUMENTS = ["model_path", "n_ctx", "n_batch", "n_threads", "n_threads_batch", "chat_format",
                        "chat_handler", "flash_attn", "verbose", "draft_model"]
RAM_CACHE_MEMBERS = ["__getitem__", "__setitem__", "_find_longest_prefix_key"]
STATE_FIELDS = ["input_ids", "scores", "n_tokens", "llama_state", "llama_state_size", "seed"]
GRAMMAR_MEMBERS = ["_grammar", "_root"]
# attributes a loaded Llama holds (set in its __init__, so they are checked on an instance)
INSTANCE_MEMBERS = ["_ctx", "_ctx.ctx", "_ctx.kv_cache_seq_rm", "_ctx.decode", "_batch", "_batch.set_batch",
                    "_model", "_model.vocab", "_scores", "_seed", "_requires_eval", "input_ids", "n_tokens",
                    "draft_model"]


def _resolve(root, dotted: str):
    for part in dotted.split("."):
        root = getattr(root, part)
    return root


def _missing(root, names: list[str]) -> list[str]:
    missing = []
    for name in names:
        try:
            _resolve(root, name)
        except AttributeError:
            missing.append(name)
    return missing


def test_llama_cpp_is_in_the_pinned_range():
    import llama_cpp
    from packaging.requirements import Requirement

    from mltb_core.llm.local.models import LLAMA_CPP_REQUIREMENT

    assert Requirement(LLAMA_CPP_REQUIREMENT).specifier.contains(llama_cpp.__version__), (
        f"llama-cpp-python {llama_cpp.__version__} is outside {LLAMA_CPP_REQUIREMENT}: re-run these tests and "
        "the engine's (test_llama_server, test_grammar_forcing, test_prefix_store) before widening the pin")


def test_module_members_the_engine_calls_exist():
    import llama_cpp
    import llama_cpp.llama_chat_format  # noqa: F401 - submodules named below
    import llama_cpp.llama_grammar  # noqa: F401

    assert _missing(llama_cpp, MODULE_MEMBERS) == []


def test_llama_methods_take_what_the_engine_passes():
    import llama_cpp

    reshaped = {}
    for name, arguments in LLAMA_METHODS.items():
        method = getattr(llama_cpp.Llama, name, None)
        if method is None:
            reshaped[name] = "missing"
            continue
        parameters = inspect.signature(method).parameters
        takes_any = any(p.kind is p.VAR_KEYWORD for p in parameters.values())
        absent = [a for a in arguments if a not in parameters and not takes_any]
        if absent:
            reshaped[name] = f"no parameter {', '.join(absent)}"
    init = inspect.signature(llama_cpp.Llama.__init__).parameters
    absent = [a for a in LLAMA_INIT_ARGUMENTS if a not in init]
    if absent:
        reshaped["__init__"] = f"no parameter {', '.join(absent)}"
    assert reshaped == {}
    assert inspect.isgeneratorfunction(llama_cpp.Llama.generate)  # LeanLlama.generate drives it with send()


def test_the_cache_and_the_state_have_the_members_the_prefix_cache_uses():
    import llama_cpp

    assert _missing(llama_cpp.LlamaRAMCache, RAM_CACHE_MEMBERS) == []
    assert "capacity_bytes" in inspect.signature(llama_cpp.LlamaRAMCache.__init__).parameters
    fields = inspect.signature(llama_cpp.llama.LlamaState.__init__).parameters
    assert [f for f in STATE_FIELDS if f not in fields] == []
    sampler = inspect.signature(llama_cpp._internals.LlamaSampler.add_grammar).parameters
    assert list(sampler)[1:3] == ["model", "grammar"]
    assert _missing(llama_cpp._internals.LlamaSampler, ["add_grammar", "close"]) == []


@needs_tiny_model
def test_a_loaded_model_holds_the_private_state_the_engine_reads_and_drives():
    import llama_cpp

    from mltb_core.llm.local import models

    llm = llama_cpp.Llama(model_path=str(models.model_path("smollm2")), n_ctx=256, n_batch=64, verbose=False)
    try:
        assert _missing(llm, INSTANCE_MEMBERS) == []
        grammar = llama_cpp.LlamaGrammar.from_string('root ::= "a"', verbose=False)
        assert _missing(grammar, GRAMMAR_MEMBERS) == []
        assert isinstance(grammar._grammar, str) and isinstance(grammar._root, str)
        sampler = llm._init_sampler(grammar=grammar)
        assert _missing(sampler, ["sampler"]) == []
        assert llama_cpp.llama_sampler_chain_n(sampler.sampler) >= 1
        # the lean state's shape: a state written by llama_state_get_data loads back through load_state
        llm.eval(llm.tokenize(b"contract"))
        size = int(llama_cpp.llama_state_get_size(llm._ctx.ctx))
        assert size > 0
    finally:
        llm.close()


# mltb's own private attributes in the engine files (its subclasses' and helpers'): not upstream's, no contract
OWN_PRIVATE = {"_replay", "_replayed", "_pending", "_forced_grammar", "_forced_tokens", "_restore", "_ram_prefix",
               "_send", "_grammars", "_view", "_llama_cpp", "_array", "_data", "_bytes", "_template"}


def _listed_private() -> set[str]:
    names = [*MODULE_MEMBERS, *LLAMA_METHODS, *RAM_CACHE_MEMBERS, *INSTANCE_MEMBERS, *GRAMMAR_MEMBERS]
    return {part for name in names for part in name.split(".") if part.startswith("_")}


def test_every_private_member_the_engine_touches_is_listed():
    used = set()
    for path in ENGINE_FILES:
        used |= set(re.findall(r"\.(_[A-Za-z][A-Za-z0-9_]*)\b", path.read_text(encoding="utf-8")))
    unlisted = used - _listed_private() - OWN_PRIVATE
    assert unlisted == set(), (f"the engine uses private members this contract does not check: {sorted(unlisted)}; "
                               "list upstream's above (checked against llama-cpp-python), mltb's own in OWN_PRIVATE")


def test_every_c_function_the_engine_calls_is_listed():
    called = set()
    for path in ENGINE_FILES:
        called |= set(re.findall(r"llama_cpp\.(llama_[a-z0-9_]+)\b", path.read_text(encoding="utf-8")))
    assert called - set(MODULE_MEMBERS) == set()
