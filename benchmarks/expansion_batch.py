"""A tree search's k = 3 expansion against one single-candidate call, at ~4k tokens of context (issue 39).

Run: ``python benchmarks/expansion_batch.py [--reps 4] [--turns 12] [--json]``.

What it measures, on the default model through mltb's own llama.cpp server:

- ``single``: one call on a new branch (the shared history, ~7.5k tokens with the real tool catalogue,
  plus a ~400-token tool result the server has not seen), as every expansion's first request is.
- ``expansion``: the same on another new branch with ``n = 3``, as the planners ask for it today: the
  local server takes no ``n``, so the backend sends three requests; the 2nd and 3rd find the whole prompt
  in the prefix cache and cost decoding only.
- ``batch``: k sequences decoded in one llama.cpp batch per step over a shared prompt
  (``local_llm_speed.batch_rates``): the tokens-per-second gain that decoding an expansion's candidates
  together would give.

Sampled replies differ in length, so the calls are compared at one reply length: a least-squares fit of
every call's seconds to (a prompt part paid once per call) + (seconds per completion token) × (its
completion tokens) gives both parts; at the mean reply length c, one call costs P + c·t, today's
expansion P + 3c·t, and a batched one P + 3c·t / (the 3-sequence gain). No call grammar is sent: a grammar sampler costs the same per sequence batched
or not, so leaving it out can only favour batching. The projection is therefore an upper bound on what
batching gains here, and the target (k = 3 expansion ≤ 1.6 × one call) is checked against it.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import Figure, count, emit, load_average  # noqa: E402
from local_llm_speed import RESULT, _backend, _history, batch_rates  # noqa: E402
from local_model import realistic_tools  # noqa: E402

TARGET = 1.6
K = 3


def _branch(history: list[dict], label: str) -> list[dict]:
    """The shared history plus one tool result the server has not seen (a new tree node)."""
    return history + [{"role": "user", "content": RESULT.format(tool=f"branch {label}") + "Next tool call?"}]


def expansion(model: str, turns: int, reps: int) -> list[Figure]:
    tools = realistic_tools()
    history = _history(turns)
    calls: list[tuple[float, int, int]] = []    # (seconds, completion tokens, candidates) of each call
    with tempfile.TemporaryDirectory() as cache_dir:
        backend = _backend(model, cache_dir)
        try:
            start = time.perf_counter()
            response = backend.complete(_branch(history, "warm-up"), tools, temperature=0.7, seed=0)
            print(f"cold call: {time.perf_counter() - start:.1f} s, {response.usage.prompt_tokens:,} prompt tokens",
                  flush=True)
            for rep in range(reps):
                for n in (1, K):
                    start = time.perf_counter()
                    response = backend.complete(_branch(history, f"{rep}-{n}"), tools, n=n, temperature=0.7,
                                                seed=rep + 1)
                    calls.append((time.perf_counter() - start, response.usage.completion_tokens, n))
                    print(f"rep {rep}, n={n}: {calls[-1][0]:.1f} s, {calls[-1][1]} completion tokens, "
                          f"{response.usage.cached_input_tokens:,}/{response.usage.prompt_tokens:,} prompt cached",
                          flush=True)
                    prompt_tokens = response.usage.prompt_tokens // n
        finally:
            backend.close()
    prompt_part, per_token = fit_call_time(calls)
    reply = statistics.mean(tokens / n for _, tokens, n in calls)
    rates, batch_note = batch_rates(model, turns, ks=(1, K))
    gain = rates[K] / rates[1]
    single = prompt_part + reply * per_token
    sequential = prompt_part + K * reply * per_token
    batched = prompt_part + K * reply * per_token / gain
    note = (f"fit over {len(calls)} calls at {prompt_tokens:,} prompt tokens: {prompt_part:.1f} s per call + "
            f"{per_token * 1000:.0f} ms per completion token, at the mean reply of {reply:.0f} tokens; "
            f"load {load_average()}")
    return [
        Figure("single-candidate call on a new branch", f"{single:.1f} s", note=note),
        Figure(f"k = {K} expansion today (one request per candidate)", f"{sequential:.1f} s "
               f"({sequential / single:.2f}x)", note=note),
        Figure(f"{K} sequences decoded in one batch", f"{gain:.2f}x the tokens/s of one", note=batch_note),
        Figure(f"k = {K} expansion decoded in one batch (projected upper bound)",
               f"{batched / single:.2f}x one call", f"≤ {TARGET}x", batched / single <= TARGET,
               note=f"{prompt_part:.1f} s once + {K} × {reply:.0f} tokens × {per_token * 1000:.0f} ms / {gain:.2f}"),
    ]


def fit_call_time(calls: list[tuple[float, int, int]]) -> tuple[float, float]:
    """Least squares of seconds = prompt part + per-token seconds × completion tokens over the calls (an
    expansion of several requests pays the prompt part once: its later requests find the prompt cached)."""
    import numpy as np

    design = np.array([[1.0, tokens] for _, tokens, _ in calls])
    seconds = np.array([s for s, _, _ in calls])
    (prompt_part, per_token), *_ = np.linalg.lstsq(design, seconds, rcond=None)
    return max(0.0, float(prompt_part)), float(per_token)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="local")
    parser.add_argument("--turns", type=count, default=12, help="history turns (12: ~4k tokens)")
    parser.add_argument("--reps", type=count, default=4)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    emit("k = 3 expansion against one call (issue 39)", expansion(args.model, args.turns, args.reps), args.json)


if __name__ == "__main__":
    main()
