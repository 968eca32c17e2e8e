"""The llama-cpp-python subclasses the engine (:mod:`mltb_core.llm.local.engine`) runs: importing this module
imports llama_cpp. Each takes the engine explicitly. Every private member of llama-cpp-python used here is
listed in tests/test_llama_cpp_contract.py, so an upgrade that renames one fails there, not in a trial.
"""
from __future__ import annotations

import ctypes
import sys
from typing import TYPE_CHECKING, Any

import llama_cpp
import numpy as np

from mltb_core.llm.local.engine import MIN_STORED_GAIN, first_turn_end
from mltb_core.llm.local.forcing import GrammarProbe, emitted_tokens
from mltb_core.llm.local.prefix_store import SavedPrefix, common_prefix

if TYPE_CHECKING:
    from mltb_core.llm.local.engine import Engine
    from mltb_core.llm.local.prefix_store import PrefixStore

__all__ = ["LeanLlama", "PrefixCache"]


class LeanLlama(llama_cpp.Llama):
    """``llama_cpp.Llama`` with a lean saved state, prompt-lookup drafts and grammar fast-forward, reporting each
    evaluation to ``engine`` (its ``evaluated``, ``drafts``, ``forcing``, ``forced_starts``, ``forced_start``)."""

    def __init__(self, engine: Engine, **kwargs: Any) -> None:
        self.engine = engine
        self.decode_threads, self.prompt_threads = kwargs["n_threads"], kwargs["n_threads_batch"]
        # Grammar fast-forward (engine.forcing, see mltb_core.llm.local.forcing). Upstream's generate lets its
        # caller send tokens to evaluate with the one just sampled; the positions of those forced tokens are
        # then "sampled" from _replay, without the sampler (whose grammar has already accepted their bytes),
        # and only the last row of the batch is sampled for real.
        self._replay: dict[int, int] = {}
        self._replayed = False
        self._pending: list[int] = []
        self._forced_grammar: Any = None
        super().__init__(**kwargs)

    def save_state(self) -> Any:
        """Upstream's state without its n_batch rows of logits: a restore re-evaluates at least
        one token (Llama.generate) before sampling, so one row keeps load_state's shapes and
        loses nothing. One copy of the KV cells instead of three."""
        ctx = self._ctx.ctx
        size = int(llama_cpp.llama_state_get_size(ctx))
        buffer = (ctypes.c_uint8 * size)()
        written = int(llama_cpp.llama_state_get_data(ctx, buffer, size))
        if written > size:
            raise RuntimeError("llama_state_get_data wrote past its buffer")
        return llama_cpp.llama.LlamaState(input_ids=self.input_ids.copy(), scores=self._scores[-1:].copy(),
                                          n_tokens=self.n_tokens, llama_state=ctypes.string_at(buffer, written),
                                          llama_state_size=written, seed=self._seed)

    def eval(self, tokens: Any) -> None:
        self.engine.evaluated.append(len(tokens))
        # A sampled token and the bytes its grammar forced go through upstream's eval like a prompt (one
        # row of logits, the prompt's threads): on an idle 2-core box two threads made the 40-call trial
        # 4.5 instead of 5.5 min (reports/benchmarks.md).
        if not (self.engine.drafts and self.engine.drafts.armed):
            super().eval(tokens)
            return
        self.engine.drafts.armed = False
        # upstream's eval asks for the last row only unless logits_all, then copies every row into
        # an n_ctx x n_vocab array; generate samples each drafted position from the context's rows
        self._ctx.kv_cache_seq_rm(-1, self.n_tokens, -1)
        n_past = self.n_tokens
        self._batch.set_batch(batch=tokens, n_past=n_past, logits_all=True)
        # a few rows decode like one: on the decode threads (llama.cpp would take the prompt's
        # n_threads_batch for any batch of two or more; two threads on shared cores made a 2-row
        # step 7x slower than a 1-row one here)
        llama_cpp.llama_set_n_threads(self._ctx.ctx, self.decode_threads, self.decode_threads)
        try:
            self._ctx.decode(self._batch)
        finally:
            llama_cpp.llama_set_n_threads(self._ctx.ctx, self.decode_threads, self.prompt_threads)
        self.input_ids[n_past:n_past + len(tokens)] = tokens
        self.n_tokens += len(tokens)
        self._requires_eval = False

    def _init_sampler(self, *a: Any, **kw: Any) -> Any:
        sampler = super()._init_sampler(*a, **kw)
        self._forced_grammar = None
        if self.engine.forcing is not None and kw.get("grammar") is not None:
            self._forced_grammar = GrammarProbe.grammar_sampler(llama_cpp, sampler.sampler)
            for token in self._pending if self._forced_grammar is not None else ():
                llama_cpp.llama_sampler_accept(self._forced_grammar, token)  # the reply's forced start
        self._pending = []
        return sampler

    def sample(self, *a: Any, idx: int | None = None, **kw: Any) -> Any:
        self._replayed = idx in self._replay
        if self._replayed:
            return self._replay.pop(idx)
        return super().sample(*a, idx=idx, **kw)

    def _forced_tokens(self, grammar: Any) -> tuple[list[int], bool]:
        """The tokens to emit unsampled from ``grammar``'s state (emitted_tokens), and whether only the
        end may follow them."""
        forced, end = self.engine.forcing.forced(grammar)
        tokens = self.tokenize(forced, add_bos=False, special=False) if forced else []
        if self.detokenize(tokens) != forced:  # e.g. a multi-byte character cut by a choice
            tokens = [self.engine.forcing.token_of_byte[byte] for byte in forced]
        return emitted_tokens(tokens, end), end

    def generate(self, tokens: Any, *a: Any, grammar: Any = None, **kw: Any) -> Any:
        if self.engine.forcing is None or grammar is None:
            return (yield from super().generate(tokens, *a, grammar=grammar, **kw))
        first = self.engine.forced_starts.get(grammar._grammar)
        if first is None:  # the reply's forced start depends on the grammar alone: once per grammar
            start_grammar = llama_cpp.llama_sampler_init_grammar(
                self._model.vocab, grammar._grammar.encode(), grammar._root.encode())
            try:
                first, _ = self._forced_tokens(start_grammar)
            finally:
                llama_cpp.llama_sampler_free(start_grammar)
            self.engine.forced_starts[grammar._grammar] = first
        self._pending, self._replay, self.engine.forced_start = first, {}, len(first)
        inner = super().generate([*tokens, *first], *a, grammar=grammar, **kw)
        yield from first
        send = None
        while True:
            try:
                token = inner.send(send)
            except StopIteration:
                return
            send = None
            yield token
            if self._replayed or self._forced_grammar is None or llama_cpp.llama_vocab_is_eog(
                    self._model.vocab, token):
                continue
            run, end = self._forced_tokens(self._forced_grammar)
            if end:  # nothing but the end may follow: no pass for the tokens nobody samples after
                yield from run
                yield self.engine.forcing.eog[0]
                return
            for forced in run:
                llama_cpp.llama_sampler_accept(self._forced_grammar, forced)
            if run:
                self._replay = {self.n_tokens + j: t for j, t in enumerate(run)}
                send = run


class PrefixCache(llama_cpp.LlamaRAMCache):
    """llama-cpp-python's RAM prefix cache of ``engine``'s model, backed by ``store`` (None: RAM only).

    A lookup restores the stored state with the longest common prefix when it beats both the RAM cache and
    the live context; a save also writes the state to the store unless the store already restores all but
    :data:`MIN_STORED_GAIN` tokens of its first turn (so each distinct preamble is written once, by the first
    request that carries it)."""

    def __init__(self, engine: Engine, capacity_bytes: int, store: PrefixStore | None) -> None:
        super().__init__(capacity_bytes=capacity_bytes)
        self.engine, self.store = engine, store
        special = engine.llm.tokenize(b"<|im_end|>", add_bos=False, special=True)
        self.end_of_turn = special[0] if len(special) == 1 else None

    def _ram_prefix(self, key: tuple[int, ...]) -> int:
        best = self._find_longest_prefix_key(key)
        return 0 if best is None else common_prefix(np.asarray(best), np.asarray(key))

    def _restore(self, key: tuple[int, ...]) -> Any:
        """The stored state to restore for ``key``, already loaded into the context (None: none better)."""
        llm = self.engine.llm
        tokens = np.asarray(key, dtype=np.int32)
        entry, length = self.store.longest(tokens)
        live = common_prefix(llm.input_ids[:llm.n_tokens], tokens)
        if entry is None or length <= max(self._ram_prefix(key), live):
            return None
        saved = self.store.load(entry)
        if saved is None:
            return None
        input_ids = np.zeros(llm.n_ctx(), dtype=np.intc)
        input_ids[:len(saved.tokens)] = saved.tokens
        state = llama_cpp.llama.LlamaState(input_ids=input_ids, scores=saved.scores, n_tokens=len(saved.tokens),
                                           llama_state=saved.state, llama_state_size=len(saved.state),
                                           seed=saved.seed)
        try:
            llm.load_state(state)  # here, so a state the context refuses costs a cold prompt, not a request
        except RuntimeError as exc:
            print(f"mltb llama server: a stored prefix did not load ({exc}): deleted", file=sys.stderr, flush=True)
            entry.path.unlink(missing_ok=True)
            llm.reset()
            return None
        self.engine.restored.append(length)
        super().__setitem__(tuple(saved.tokens.tolist()), state)
        return state

    def __getitem__(self, key: Any) -> Any:
        key = tuple(key)
        if self.store is not None:
            state = self._restore(key)
            if state is not None:
                return state
        return super().__getitem__(key)

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        if self.store is None:
            return
        # the tokens whose KV cells the state holds (the last sampled token is not evaluated yet)
        tokens = np.asarray(value.input_ids[:value.n_tokens], dtype=np.int32)
        first = first_turn_end(tokens, self.end_of_turn)
        if first is None or first - self.store.longest(tokens)[1] < MIN_STORED_GAIN:
            return
        self.store.save(SavedPrefix(tokens=tokens, scores=value.scores, state=value.llama_state, seed=value.seed))
