"""Grammar fast-forward for the local server: bytes a call's grammar allows one way only are not decoded.

A grammar-constrained tool call is half skeleton: ``{"tool_name": "``, ``", "tool_args": {"bindings": {``,
the rest of a tool or object name once its prefix is unique, the closing braces. Decoding them costs one
forward pass (and one pass of the grammar over the whole vocabulary) per token, for a token the grammar
already fixed. Here the server asks the grammar, byte by byte, whether exactly one byte may come next; such
bytes are emitted without sampling and evaluated as one batch with the token sampled before them, like a
short prompt (only its last row needs logits). Every forced byte is one the grammar allowed alone; a run's
last token is left to the model (:func:`emitted_tokens`), so it samples where it would have merged tokens.

That needs fixed whitespace: llama.cpp's JSON-schema grammar lets an optional space follow every
``{``, ``,``, ``:`` and value, so nothing is forced past the next separator, and the model spent tokens on
stray spaces (29 % of the planner table's 1,910 constrained replies were not in json.dumps's layout).
:func:`canonical_json_grammar` pins it to json.dumps's: ``", "`` and ``": "`` separators, no other
whitespace, which is also how every earlier call appears in the model's own history.
"""
from __future__ import annotations

import ctypes
import json
import re
from typing import Any, Callable

import numpy as np

__all__ = ["json_schema_grammar", "canonical_json_grammar", "forced_bytes", "emitted_tokens", "GrammarProbe", "FORCED_LIMIT"]

# Most bytes forced in one run (a long enum value is forced whole well below this).
FORCED_LIMIT = 256

# GBNF literals and character classes, which may contain the word "space" as text.
_LITERAL = re.compile(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]')
_SPACE_RULE = re.compile(r'^space ::= .*$', re.MULTILINE)


def json_schema_grammar(schema: Any) -> str:
    """The GBNF of the JSON schema ``schema``, as llama.cpp's converter writes it but with every literal's
    backslashes escaped: the converter escapes quotes and line breaks only, so an enum value holding a
    backslash (a column named ``a\\``) became a literal that only matches invalid JSON, and one holding a
    quote a grammar that does not parse."""
    from llama_cpp import llama_grammar

    converter = llama_grammar.SchemaConverter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    upstream = converter._format_literal
    # this one converter escapes backslashes before upstream's quotes and line breaks (no subclass made here)
    converter._format_literal = lambda literal: upstream(literal.replace("\\", "\\\\"))  # type: ignore[method-assign]
    converter.visit(converter.resolve_refs(json.loads(json.dumps(schema)), "stdin"), "")
    return converter.format_grammar()


def canonical_json_grammar(gbnf: str) -> str:
    """llama.cpp's JSON-schema grammar ``gbnf`` with json.dumps's whitespace only: ``","`` and ``":"``
    followed by ``space`` become ``", "`` and ``": "``; every other ``space`` matches nothing.

    A grammar without llama.cpp's ``space`` rule is returned unchanged (nothing to pin).
    """
    if not _SPACE_RULE.search(gbnf):
        return gbnf
    out = []
    for line in gbnf.splitlines():
        if line.startswith("space ::="):
            out.append('space ::= ""')
            continue
        pieces, last = [], 0
        for match in _LITERAL.finditer(line):
            pieces += [("code", line[last:match.start()]), ("literal", match.group())]
            last = match.end()
        pieces.append(("code", line[last:]))
        for i, (kind, text) in enumerate(pieces):
            if kind == "literal" and text in ('","', '":"') and i + 1 < len(pieces):
                code = pieces[i + 1][1]
                following = re.match(r"\s+space(?![\w-])", code)
                if following:
                    pieces[i] = ("literal", text[:-1] + ' "')
                    pieces[i + 1] = ("code", code[following.end():])
        out.append("".join(text for _, text in pieces))
    return "\n".join(out) + ("\n" if gbnf.endswith("\n") else "")


def forced_bytes(allowed: Callable[[], tuple[frozenset[int], bool]], accept: Callable[[int], None],
                 limit: int = FORCED_LIMIT) -> tuple[bytes, bool]:
    """The bytes the grammar allows one way only from its current state, accepted into it as they are found,
    and whether only the end of the reply may follow them.

    ``allowed()`` gives the bytes the grammar would accept next and whether it would accept the end;
    ``accept(byte)`` advances it. Stops at a choice, at ``limit`` bytes, or where nothing probed is allowed.
    """
    out = bytearray()
    while len(out) < limit:
        nexts, end = allowed()
        if end and not nexts:
            return bytes(out), True
        if end or len(nexts) != 1:
            break
        byte = next(iter(nexts))
        accept(byte)
        out.append(byte)
    return bytes(out), False


class GrammarProbe:
    """Which bytes a llama.cpp grammar sampler accepts next, probed with the vocabulary's single-byte tokens
    (a byte-level BPE vocabulary has one for every byte its tokens use) and its end-of-generation tokens."""

    def __init__(self, llama_cpp: Any, llm: Any) -> None:
        self._llama_cpp = llama_cpp
        vocab = llm._model.vocab
        by_byte: dict[int, int] = {}
        first_bytes: set[int] = set()
        for token in range(llm.n_vocab()):  # tokenize() cannot name the bytes >= 0x80 alone (not UTF-8)
            piece = llm.detokenize([token])
            if piece:
                first_bytes.add(piece[0])
                if len(piece) == 1:
                    by_byte.setdefault(piece[0], token)
        # Every byte a token can start with has a token of its own, so the probe sees every next byte the
        # model could write (SmolLM2's vocabulary has none for a few control bytes, nor any token with them).
        # Else a byte the probe cannot see might be allowed: never force.
        self.complete = first_bytes <= set(by_byte)
        self.token_of_byte = by_byte
        self.eog = sorted({int(t) for t in (llama_cpp.llama_vocab_eos(vocab), llama_cpp.llama_vocab_eot(vocab))
                           if int(t) >= 0})
        ids = list(by_byte.values()) + self.eog
        self._bytes = np.array(list(by_byte), dtype=np.uint8)
        self._data = (llama_cpp.llama_token_data * len(ids))()
        # the candidates as numpy sees them (id, logit, p): reset from a template, read in one step
        self._view = np.frombuffer(self._data, dtype=np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")]))
        self._view["id"] = ids
        self._template = self._view.copy()
        self._array = llama_cpp.llama_token_data_array(data=self._data, size=len(ids), selected=-1, sorted=False)

    @staticmethod
    def grammar_sampler(llama_cpp: Any, chain: Any) -> Any:
        """The grammar sampler in llama-cpp-python's sampler chain (None: the chain has none)."""
        for i in range(llama_cpp.llama_sampler_chain_n(chain)):
            sampler = llama_cpp.llama_sampler_chain_get(chain, i)
            if llama_cpp.llama_sampler_name(sampler) == b"grammar":
                return sampler
        return None

    def allowed(self, grammar: Any) -> tuple[frozenset[int], bool]:
        """(bytes ``grammar`` accepts next, whether it accepts the end of generation)."""
        self._view[:] = self._template
        self._array.size, self._array.selected, self._array.sorted = len(self._view), -1, False
        self._llama_cpp.llama_sampler_apply(grammar, ctypes.byref(self._array))
        ok = ~np.isneginf(self._view["logit"])  # the grammar rejects a candidate by its logit, in place
        n = len(self._bytes)
        return frozenset(self._bytes[ok[:n]].tolist()), bool(ok[n:].any())

    def forced(self, grammar: Any, limit: int = FORCED_LIMIT) -> tuple[bytes, bool]:
        """:func:`forced_bytes` from ``grammar``'s state, probed on a copy (``grammar`` is left as it is:
        the caller accepts the tokens it emits). Nothing when the probe is incomplete."""
        if not self.complete:
            return b"", False
        probe = self._llama_cpp.llama_sampler_clone(grammar)
        try:
            return forced_bytes(lambda: self.allowed(probe),
                                lambda byte: self._llama_cpp.llama_sampler_accept(probe, self.token_of_byte[byte]),
                                limit)
        finally:
            self._llama_cpp.llama_sampler_free(probe)


def emitted_tokens(forced: list[int], end: bool) -> list[int]:
    """Which of the forced run's tokens to emit without sampling: all of them when only the end may follow;
    else all but the last, which the model samples itself (under the grammar), so the token it is used to
    seeing there (``' {"'`` rather than the forced ``' {'`` then ``'"'``) stays its own choice. Ending a
    run on a token the model would have merged with the next derailed it: keys like ``".csv"`` and ``""``."""
    return list(forced) if end else list(forced[:-1])
