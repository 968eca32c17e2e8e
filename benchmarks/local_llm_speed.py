"""Local-call speed of the default model (Qwen2.5-Coder-1.5B) on this box: warm calls at ~4k tokens of
context, branch switches, server settings, and one MCTS-Shaped trial with its prompt-cache share.

Run: ``python benchmarks/local_llm_speed.py [--part warm,switch,first,trial,threads,batch] [--model local]``.

- ``warm``: a ~4k-token conversation (the real tool catalogue, then tool results), each call adding one
  turn: seconds per call (median over ``--calls``), prompt and cached tokens as the server reports them.
- ``switch``: two branches sharing the system prompt and first turns, called alternately (a tree search):
  the prefix cache restores each branch instead of re-evaluating it.
- ``first``: a new server's first reply with an empty prefix store, then another new server's once the
  first stored the shared preamble (what every later pytest run, xdist worker and trial script starts with).
- ``trial``: one MCTS-Shaped trial on spaceship-titanic at ``--trial-calls`` LLM calls: wall time, and the
  share of prompt tokens served from cache (record ``tokens_in_cached`` / ``tokens_in``).
- ``threads``: decode and prompt-evaluation speed for decode/prompt thread splits and max tokens.
- ``context``: the server at 16k and at 32k context (``--contexts``): its resident memory (VmRSS once started,
  VmHWM after the calls) and seconds per call at ~4k tokens (a cold call, then warm calls adding a turn).
- ``batch``: decoding k sequences together (one llama.cpp batch per step, the sequences sharing the
  prompt's KV cells) against one sequence: what decoding an expansion's k candidates together would gain.

Prompt-lookup drafts (off by default): set ``MLTB_DRAFT_TOKENS=4`` before a run, then ``--log`` on its server
log prints completion tokens per forward pass beside the seconds. Grammar fast-forward (on by default):
``MLTB_FAST_FORWARD=off`` before a run measures plain decoding for comparison.

Targets (issue 17): median warm call ≤ 8 s at ~4k tokens; a 40-call MCTS-Shaped trial ≤ 6 min; cache
share in an MCTS trial ≥ 70 %. The box is shared: the load average is printed beside every figure.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _bench import Figure, count, emit, load_average  # noqa: E402
from local_model import SYSTEM, TASK, realistic_tools  # noqa: E402

RESULT = ("Result of {tool}:\nshape (8693, 14); columns PassengerId, HomePlanet, CryoSleep, Cabin, Destination, Age, "
          "VIP, RoomService, FoodCourt, ShoppingMall, Spa, VRDeck, Name, Transported\nmissing: HomePlanet 201, "
          "CryoSleep 217, Cabin 199, Destination 182, Age 179, VIP 203, RoomService 181, FoodCourt 183, "
          "ShoppingMall 208, Spa 183, VRDeck 188, Name 200\n") * 3


def _history(turns: int, branch: str = "") -> list[dict]:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]
    for i in range(turns):
        messages += [{"role": "assistant", "content": f'{{"tool_name": "read_data", "tool_args": {{"bindings": {{}}, '
                                                      f'"func_kwargs": {{"path": "/data/train.csv"}}, "output": "df{i}{branch}"}}}}'},
                     {"role": "user", "content": RESULT.format(tool=f"step {i}{branch}")}]
    return messages


def _backend(model: str, cache_dir: str, **opts):
    from mltb_core.llm import make_backend

    return make_backend(model, seed=0, cache_dir=cache_dir, keep_server=False, **opts)


def _call(backend, messages, tools, seed):
    start = time.perf_counter()
    response = backend.complete(messages, tools, temperature=0.7, seed=seed)
    return time.perf_counter() - start, response.usage


def warm(model: str, calls: int, turns: int) -> list[Figure]:
    """Calls at ~4k tokens, each adding one turn to the same conversation (the ReAct pattern)."""
    tools = realistic_tools()
    with tempfile.TemporaryDirectory() as cache_dir:
        backend = _backend(model, cache_dir)
        try:
            messages = _history(turns)
            cold, usage = _call(backend, messages + [{"role": "user", "content": "Next tool call?"}], tools, 0)
            print(f"cold call: {cold:.1f} s, {usage.prompt_tokens} prompt tokens", flush=True)
            seconds, prompt, cached = [], [], []
            for i in range(calls):
                messages = messages + [{"role": "user", "content": f"Step {i}: next tool call?"}]
                elapsed, usage = _call(backend, messages, tools, i + 1)
                seconds.append(elapsed)
                prompt.append(usage.prompt_tokens)
                cached.append(usage.cached_input_tokens)
                print(f"warm call {i}: {elapsed:.1f} s, {usage.prompt_tokens} prompt ({usage.cached_input_tokens} "
                      f"cached), {usage.completion_tokens} completion", flush=True)
        finally:
            backend.close()
    median = statistics.median(seconds)
    return [Figure("warm call at ~4k tokens (median)", f"{median:.1f} s", "≤ 8 s", median <= 8.0,
                   f"n={calls}; prompt {min(prompt)}–{max(prompt)} tokens, {sum(cached) / sum(prompt):.0%} cached; "
                   f"cold first call {cold:.0f} s; load {load_average()}")]


def switch(model: str, calls: int, turns: int) -> list[Figure]:
    """Two branches that share the first turns, called alternately (what MCTS and LATS do)."""
    tools = realistic_tools()
    with tempfile.TemporaryDirectory() as cache_dir:
        backend = _backend(model, cache_dir)
        try:
            shared = _history(turns)
            branches = {b: shared + _history(3, b)[2:] for b in "AB"}
            for b in "AB":  # cold: each branch evaluated once
                elapsed, usage = _call(backend, branches[b], tools, 0)
                print(f"branch {b} first: {elapsed:.1f} s, {usage.prompt_tokens} prompt ({usage.cached_input_tokens} "
                      "cached)", flush=True)
            seconds, prompt, cached = [], [], []
            for i in range(calls):
                b = "AB"[i % 2]
                branches[b] = branches[b] + [{"role": "user", "content": f"Step {i}: next tool call?"}]
                elapsed, usage = _call(backend, branches[b], tools, i + 1)
                seconds.append(elapsed)
                prompt.append(usage.prompt_tokens)
                cached.append(usage.cached_input_tokens)
                print(f"switch to {b}: {elapsed:.1f} s, {usage.prompt_tokens} prompt ({usage.cached_input_tokens} "
                      "cached)", flush=True)
        finally:
            backend.close()
    return [Figure("call after a branch switch (median)", f"{statistics.median(seconds):.1f} s", "≤ 8 s",
                   statistics.median(seconds) <= 8.0,
                   f"n={calls}, alternating two branches of {min(prompt)}–{max(prompt)} tokens; "
                   f"{sum(cached) / sum(prompt):.0%} of prompt tokens cached; load {load_average()}")]


def first_call(model: str, turns: int) -> list[Figure]:
    """A new server's first reply with an empty prefix store, then a second new server's (another trial of
    the same task: the same preamble, another last turn) with the first turn the first server stored."""
    tools = realistic_tools()
    seconds, cached = {}, {}
    with tempfile.TemporaryDirectory() as cache_dir:
        for store, ask in (("empty", "First tool call?"), ("stored", "Which tool comes first?")):
            backend = _backend(model, cache_dir)
            try:
                elapsed, usage = _call(backend, _history(0) + [{"role": "user", "content": ask}], tools, 0)
            finally:
                backend.close()
            seconds[store], cached[store] = elapsed, (usage.cached_input_tokens, usage.prompt_tokens)
            print(f"new server, {store} prefix store: first reply {elapsed:.1f} s, {usage.prompt_tokens} prompt "
                  f"({usage.cached_input_tokens} cached)", flush=True)
    return [Figure("first reply of a new server (empty → stored prefix store)",
                   f"{seconds['empty']:.1f} s → {seconds['stored']:.1f} s", "", None,
                   f"prompt {cached['empty'][1]} tokens, {cached['stored'][0]} of them restored from the store "
                   f"the first server wrote; load {load_average()}")]


def _first_logged_call(since: float) -> dict | None:
    """The first call in the newest server log of the default cache written since ``since`` (perf_counter
    time of the trial's start), or None."""
    from mltb_core.llm.cache import default_cache_dir
    from mltb_core.llm.local import request_log

    started = time.time() - (time.perf_counter() - since)
    logs = [p for p in (Path(default_cache_dir()) / "llm-server").glob("*.log") if p.stat().st_mtime >= started]
    calls = request_log(max(logs, key=lambda p: p.stat().st_mtime)) if logs else []
    return calls[0] if calls else None


def trial(model: str, calls: int, task: str) -> list[Figure]:
    """One MCTS-Shaped trial: wall time and the share of prompt tokens served from cache."""
    from _bench import sim_trial
    from mltb_core.llm.local import release_process_servers

    start = time.perf_counter()
    try:
        record = sim_trial(task, "mcts_shaped", model=model, max_llm_calls=calls)
    finally:
        release_process_servers()
    wall = time.perf_counter() - start
    share = record.tokens_in_cached / record.tokens_in if record.tokens_in else 0.0
    first = _first_logged_call(start)
    restored = (f"first call {first['seconds']:.0f} s with {first['cached_tokens']} of {first['prompt_tokens']} prompt "
                f"tokens cached (a prefix store that held the preamble restores most of them)" if first else
                "first call not found in a server log")
    per_call = record.llm_seconds / max(record.llm_calls, 1)
    print(f"trial: {record.outcome}, stage {record.stage_reached} ({record.stage_name}), {record.llm_calls} calls, "
          f"{record.wall_seconds:.0f} s wall, {record.tokens_in} prompt tokens ({record.tokens_in_cached} cached)",
          flush=True)
    return [Figure(f"MCTS-Shaped trial, {calls} LLM calls, {task}", f"{record.wall_seconds / 60:.1f} min", "≤ 6 min",
                   record.wall_seconds <= 360,
                   f"{record.llm_calls} calls ({per_call:.1f} s each), stage {record.stage_reached} "
                   f"{record.stage_name or ''}, {record.outcome}; {restored}; server start {wall - record.wall_seconds:.0f} s "
                   f"outside; load {load_average()}"),
            Figure("prompt tokens served from cache in that trial", f"{share:.0%}", "≥ 70 %", share >= 0.70,
                   f"{record.tokens_in_cached:,} of {record.tokens_in:,}")]


def from_log(path: str) -> list[Figure]:
    """The calls a local server logged (e.g. during a pytest run): warm-call seconds and cache share."""
    from mltb_core.llm.local import request_log

    calls = request_log(path)
    if len(calls) < 2:
        raise SystemExit(f"{path}: {len(calls)} logged calls; need a cold one and at least one warm")
    warm_calls = calls[1:]
    seconds = [c["seconds"] for c in warm_calls]
    prompt = sum(c["prompt_tokens"] for c in calls)
    cached = sum(c["cached_tokens"] for c in calls)
    out = sum(c["completion_tokens"] for c in warm_calls)
    big = [c["seconds"] for c in warm_calls if c["prompt_tokens"] >= 3500]
    return [Figure("warm call (median over the logged calls after the first)", f"{statistics.median(seconds):.1f} s",
                   "≤ 8 s", statistics.median(seconds) <= 8.0,
                   f"n={len(warm_calls)}, prompts {min(c['prompt_tokens'] for c in warm_calls)}–"
                   f"{max(c['prompt_tokens'] for c in warm_calls)} tokens; {out / sum(seconds):.1f} completion "
                   f"tokens/s overall; first call {calls[0]['seconds']:.0f} s ({calls[0]['prompt_tokens']} tokens, "
                   f"{calls[0]['cached_tokens']} cached: 0 on a cold server, most when the prefix store held the preamble)"),
            *([Figure("warm call at ≥ 3,500 prompt tokens (median)", f"{statistics.median(big):.1f} s", "≤ 8 s",
                      statistics.median(big) <= 8.0, f"n={len(big)}")] if big else []),
            Figure("prompt tokens served from cache (all logged calls)", f"{cached / prompt:.0%}", "≥ 70 %",
                   cached / prompt >= 0.70, f"{cached:,} of {prompt:,}; {len(calls)} calls"),
            *_passes_figure(warm_calls)]


def _passes_figure(calls: list[dict]) -> list[Figure]:
    """Completion tokens per forward pass (> 1 when prompt-lookup drafts are accepted); older logs lack it."""
    logged = [c for c in calls if "forward_passes" in c]
    if not logged:
        return []
    tokens, passes = sum(c["completion_tokens"] for c in logged), sum(c["forward_passes"] for c in logged)
    return [Figure("completion tokens per forward pass", f"{tokens / passes:.2f}", "", None,
                   f"{tokens:,} tokens in {passes:,} passes (the prompt's included) over {len(logged)} calls")]


def threads(model: str, turns: int) -> list[Figure]:
    """Prompt evaluation and decode speed per (decode threads, prompt threads) and max tokens."""
    from openai import OpenAI

    from mltb_core.llm.backends import parse_model
    from mltb_core.llm.local import LocalServer, chatml_messages, request_log, resolve_model_path

    path = resolve_model_path(parse_model(model).value)
    tools = realistic_tools()
    figures = []
    for n_threads, n_batch in ((1, 2), (2, 2)):
        with tempfile.TemporaryDirectory() as cache_dir:
            server = LocalServer(path, cache_dir=cache_dir, n_threads=n_threads, n_threads_batch=n_batch,
                                 partition="bench", partitions=1)
            try:
                client = OpenAI(base_url=server.acquire(), api_key="local")
                msgs = chatml_messages(_history(turns), tools)
                start = time.perf_counter()
                client.chat.completions.create(model="m", messages=msgs, max_tokens=1, temperature=0)
                cold = time.perf_counter() - start
                decode = []
                for i in range(2):
                    start = time.perf_counter()
                    reply = client.chat.completions.create(model="m", messages=msgs + [
                        {"role": "user", "content": f"Write a long explanation of step {i}."}], max_tokens=64,
                        temperature=0, seed=i)
                    decode.append((time.perf_counter() - start, reply.usage.completion_tokens))
                log = request_log(server.log_path)
            finally:
                server.release()
            tokens = log[0]["prompt_tokens"] if log else 0
            tok_s = sum(n for _, n in decode) / sum(s for s, _ in decode)
            figures.append(Figure(f"threads decode={n_threads}, prompt={n_batch}",
                                  f"{tokens / cold:.0f} prompt tok/s, {tok_s:.1f} decode tok/s",
                                  note=f"cold {tokens}-token prompt {cold:.1f} s; 64-token replies (incl. a short "
                                       f"new turn); load {load_average()}"))
            print(figures[-1], flush=True)
    return figures


def _status_mib(pid: int, field: str) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise ValueError(f"no {field} for pid {pid}")


def context(model: str, turns: int, calls: int, contexts: tuple[int, ...] = (16384, 32768)) -> list[Figure]:
    """The server's resident memory and per-call seconds at ~4k tokens for each context size."""
    from openai import OpenAI

    from mltb_core.llm.backends import parse_model
    from mltb_core.llm.local import LocalServer, chatml_messages, request_log, resolve_model_path

    path = resolve_model_path(parse_model(model).value)
    tools, figures = realistic_tools(), []
    for n_ctx in contexts:
        with tempfile.TemporaryDirectory() as cache_dir:
            server = LocalServer(path, cache_dir=cache_dir, n_ctx=n_ctx, partition=f"ctx{n_ctx}", partitions=1)
            try:
                client = OpenAI(base_url=server.acquire(), api_key="local")
                pid = server.state()["pid"]
                idle = _status_mib(pid, "VmRSS")
                msgs = chatml_messages(_history(turns), tools)
                seconds = []
                for i in range(calls):
                    start = time.perf_counter()
                    client.chat.completions.create(model="m", messages=msgs, max_tokens=32, temperature=0, seed=i)
                    seconds.append(time.perf_counter() - start)
                    msgs = msgs + [{"role": "assistant", "content": f"step {i}"},
                                   {"role": "user", "content": f"Result of step {i}: done."}]
                peak = _status_mib(pid, "VmHWM")
                log = request_log(server.log_path)
            finally:
                server.release()
        tokens = log[-1]["prompt_tokens"] if log else 0
        warm = statistics.median(seconds[1:]) if len(seconds) > 1 else float("nan")
        figures.append(Figure(f"server at n_ctx {n_ctx}", f"RSS {idle:,.0f} MiB started, {peak:,.0f} MiB peak; "
                              f"warm call {warm:.1f} s", note=f"cold call {seconds[0]:.1f} s, warm "
                              f"{', '.join(f'{x:.1f}' for x in seconds[1:])} s at {tokens:,} prompt tokens, "
                              f"32-token replies; load {load_average()}"))
        print(figures[-1], flush=True)
    return figures


def batch(model: str, turns: int, ks: tuple[int, ...] = (1, 3), steps: int = 30) -> list[Figure]:
    """Tokens per second when k sequences that share the ~4k-token prompt decode in one batch per step."""
    rates, note = batch_rates(model, turns, ks, steps)
    figures = [Figure(f"decode {k} sequence(s) together", f"{rate:.1f} tok/s ({rate / rates[ks[0]]:.2f}x)", note=note)
               for k, rate in rates.items()]
    for figure in figures:
        print(figure, flush=True)
    return figures


def batch_rates(model: str, turns: int, ks: tuple[int, ...] = (1, 3), steps: int = 30) -> tuple[dict[int, float], str]:
    """Tokens per second (by k) when k sequences that share the ~4k-token prompt decode in one batch per step.

    In-process, on a llama.cpp context with ``max(ks)`` sequences over one unified KV cache (the prompt is
    evaluated once, then shared by ``llama_memory_seq_cp`` without copying); greedy steps, so the figure is
    the model's forward pass alone (a grammar-constrained sampler adds its own cost per sequence)."""
    import json

    import llama_cpp
    import numpy as np
    from llama_cpp import _internals

    from mltb_core.llm.backends import parse_model
    from mltb_core.llm.local import resolve_model_path

    path = resolve_model_path(parse_model(model).value)
    weights = _internals.LlamaModel(path_model=str(path), params=llama_cpp.llama_model_default_params(), verbose=False)
    prompt = weights.tokenize(json.dumps(_history(turns)).encode(), add_bos=False, special=False)[:4000]
    params = llama_cpp.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch = 8192, 512, 512
    params.n_threads = params.n_threads_batch = 1  # the default model's decode setting (models.py)
    params.n_seq_max, params.kv_unified = max(ks), True
    context = _internals.LlamaContext(model=weights, params=params, verbose=False)
    ctx, memory, n_vocab = context.ctx, llama_cpp.llama_get_memory(context.ctx), weights.n_vocab()
    step_batch = llama_cpp.llama_batch_init(512, 0, max(ks))

    def decode(tokens: list[tuple[int, int, bool]], first_pos: int, same_pos: bool) -> None:
        """One llama_decode of (sequence, token, wants logits) rows: a step (every row at first_pos) or a
        prompt chunk (consecutive positions)."""
        step_batch.n_tokens = len(tokens)
        for i, (seq, token, logits) in enumerate(tokens):
            step_batch.token[i], step_batch.pos[i] = token, first_pos if same_pos else first_pos + i
            step_batch.n_seq_id[i], step_batch.seq_id[i][0], step_batch.logits[i] = 1, seq, logits
        if llama_cpp.llama_decode(ctx, step_batch) != 0:
            raise RuntimeError("llama_decode failed")

    start = time.perf_counter()
    for first in range(0, len(prompt), 512):
        decode([(0, token, False) for token in prompt[first:first + 512]], first, same_pos=False)
    prompt_seconds = time.perf_counter() - start
    rates: dict[int, float] = {}
    for k in ks:
        for seq in range(1, max(ks)):
            llama_cpp.llama_memory_seq_rm(memory, seq, -1, -1)
        llama_cpp.llama_memory_seq_rm(memory, 0, len(prompt), -1)
        for seq in range(1, k):
            llama_cpp.llama_memory_seq_cp(memory, 0, seq, -1, -1)
        tokens = [prompt[-1]] * k
        start = time.perf_counter()
        for step in range(steps):
            decode([(seq, tokens[seq], True) for seq in range(k)], len(prompt) + step, same_pos=True)
            tokens = [int(np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, i), shape=(n_vocab,)).argmax())
                      for i in range(k)]
        rates[k] = k * steps / (time.perf_counter() - start)
    llama_cpp.llama_batch_free(step_batch)
    context.close()
    weights.close()
    return rates, (f"{steps} greedy steps after a shared {len(prompt):,}-token prompt ({prompt_seconds:.0f} s to "
                   f"evaluate); 1 thread; load {load_average()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="local")
    parser.add_argument("--part", default="warm,switch,first,trial", help=f"comma list of: {', '.join(PARTS)}")
    parser.add_argument("--calls", type=count, default=6, help="warm / switch calls")
    parser.add_argument("--turns", type=count, default=7, help="tool-result turns in the ~4k-token history")
    parser.add_argument("--trial-calls", type=count, default=40)
    parser.add_argument("--task", default="spaceship-titanic")
    parser.add_argument("--log", help="only summarise the calls in this server log (llm-server/<id>.log)")
    parser.add_argument("--json", action="store_true", help="also print a FIGURES line for run_all.py")
    args = parser.parse_args()
    if args.log:
        emit("Local LLM calls in a server log", from_log(args.log), args.json)
        return
    parts = args.part.split(",")
    for part in parts:
        if part not in PARTS:
            parser.error(f"unknown part {part!r} (one of {', '.join(PARTS)})")
    figures = []
    for part in parts:
        figures += PARTS[part](args)
    emit("Local LLM speed", figures, args.json)


PARTS = {
    "warm": lambda args: warm(args.model, args.calls, args.turns),
    "switch": lambda args: switch(args.model, args.calls, args.turns),
    "first": lambda args: first_call(args.model, args.turns),
    "trial": lambda args: trial(args.model, args.trial_calls, args.task),
    "threads": lambda args: threads(args.model, args.turns),
    "batch": lambda args: batch(args.model, args.turns),
    "context": lambda args: context(args.model, args.turns, args.calls),
}


if __name__ == "__main__":
    main()
