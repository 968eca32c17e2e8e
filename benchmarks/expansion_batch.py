"""A tree search's k = 3 expansion against one single-candidate call, at ~4k tokens of context (issue 39).

Run: ``python benchmarks/expansion_batch.py [--reps 4] [--turns 12] [--json]``.

What it measures, on the default model through mltb's own llama.cpp server:

- ``single``: one call on a new branch (the shared ~4k-token history plus a ~300-token tool result the
  server has not seen), as every expansion's first request is.
- ``expansion``: the same on another new branch with ``n = 3``, as the planners ask for it today: the
  local server takes no ``n``, so the backend sends three requests; the 2nd and 3rd find the whole prompt
  in the prefix cache and cost decoding only.
- ``batch``: k sequences decoded in one llama.cpp batch per step over a shared prompt
  (``local_llm_speed.batch_rates``): the tokens-per-second gain that decoding an expansion's candidates
  together would give.

From those it projects a batched expansion: the single call's prompt part once, plus its decoding part
× 3 / (the 3-sequence gain). Decoding is the single call's decoding, estimated as half of what the
2nd and 3rd requests add. No call grammar is sent: a grammar sampler costs the same per sequence batched
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

from _bench import Figure, emit, load_average  # noqa: E402
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
    singles, expansions = [], []
    with tempfile.TemporaryDirectory() as cache_dir:
        backend = _backend(model, cache_dir)
        try:
            start = time.perf_counter()
            response = backend.complete(_branch(history, "warm-up"), tools, temperature=0.7, seed=0)
            print(f"cold call: {time.perf_counter() - start:.1f} s, {response.usage.prompt_tokens:,} prompt tokens",
                  flush=True)
            for rep in range(reps):
                for n, out in ((1, singles), (K, expansions)):
                    start = time.perf_counter()
                    response = backend.complete(_branch(history, f"{rep}-{n}"), tools, n=n, temperature=0.7,
                                                seed=rep + 1)
                    out.append(time.perf_counter() - start)
                    print(f"rep {rep}, n={n}: {out[-1]:.1f} s, {response.usage.completion_tokens} completion tokens, "
                          f"{response.usage.cached_input_tokens:,}/{response.usage.prompt_tokens:,} prompt cached",
                          flush=True)
        finally:
            backend.close()
    single, sequential = statistics.median(singles), statistics.median(expansions)
    decoding = min(single, max(0.0, (sequential - single) / (K - 1)))
    rates, batch_note = batch_rates(model, turns, ks=(1, K))
    gain = rates[K] / rates[1]
    projected = single - decoding + decoding * K / gain
    note = f"median of {reps} each at ~4k prompt tokens; load {load_average()}"
    return [
        Figure("single-candidate call on a new branch", f"{single:.1f} s", note=note),
        Figure(f"k = {K} expansion today (one request per candidate)", f"{sequential:.1f} s "
               f"({sequential / single:.2f}x)", note=note),
        Figure(f"{K} sequences decoded in one batch", f"{gain:.2f}x the tokens/s of one",
               note=batch_note),
        Figure(f"k = {K} expansion decoded in one batch (projected upper bound)",
               f"{projected / single:.2f}x one call", f"≤ {TARGET}x", projected / single <= TARGET,
               note=f"prompt part {single - decoding:.1f} s once + decoding {decoding:.1f} s × {K}/{gain:.2f}"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="local")
    parser.add_argument("--turns", type=int, default=12, help="history turns (12: ~4k tokens)")
    parser.add_argument("--reps", type=int, default=4)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    emit("k = 3 expansion against one call (issue 39)", expansion(args.model, args.turns, args.reps), args.json)


if __name__ == "__main__":
    main()
