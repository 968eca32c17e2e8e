"""What a paid run will cost, estimated from its configuration before it starts.

tokens × price × items: for each item (task × trial config), the LLM calls its budgets allow (a
``max_llm_calls`` budget, else the planner's iteration budget), times the input tokens of one call
(the measured length of the task's first request, shared preamble + planner instructions + tool schemas,
at ~4 characters per token, plus the history a call carries on average), times the price table's rates.
It is an estimate for planning, not a bound: a search that stops early costs less, a long tool output
more. Models without a price (local, sim) give no estimate.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mltb_core.bench.tasks import SUBMISSION_FILE
from mltb_core.config import TrialConfig
from mltb_core.llm.backends import ModelRef
from mltb_core.llm import prompts
from mltb_core.llm.prices import Price, PriceTable, UnknownPriceError, load_price_table

__all__ = ["CostEstimate", "estimate_cost", "calls_per_trial", "tokens_per_call", "prefix_tokens", "CHARS_PER_TOKEN"]

CHARS_PER_TOKEN = prompts.CHARS_PER_TOKEN
# History a call carries per step of its path, in tokens (a tool call, its result, the scratchpad listing),
# fitted to benchmarks/context_tokens.py (reports/benchmarks.md): with the default budgets the sim's calls
# averaged 29-31k input tokens (full) and 21-22k (trimmed) on spaceship-titanic and playground-series-s4e1.
HISTORY_TOKENS_PER_STEP = {"full": 220, "trimmed": 130}
OUTPUT_TOKENS_PER_CANDIDATE = 120     # one tool call with a line of reasoning
HIERARCHICAL_STAGES = 10


@dataclass(frozen=True)
class CostEstimate:
    items: int
    calls: int
    input_tokens: int
    output_tokens: int
    usd: float                 # no prompt caching
    usd_cached_prefix: float   # every call after an item's first finds the shared prefix (tools, preamble) cached

    def line(self) -> str:
        return (f"cost estimate: ${self.usd:,.2f} for {self.items} item(s), {self.calls:,} LLM calls, "
                f"{self.input_tokens / 1e6:,.1f}M input + {self.output_tokens / 1e6:,.2f}M output tokens "
                f"(${self.usd_cached_prefix:,.2f} if the shared prompt prefix is served from the provider's "
                f"cache; from the budgets, an estimate, not a bound)")


def calls_per_trial(config: TrialConfig) -> int:
    """LLM calls the budgets allow one trial (its planner's iteration budget, capped by max_llm_calls)."""
    c, own = config, config.planner_knobs()
    if c.planner == "react":
        calls = min(c.max_iterations, c.max_depth)
    elif c.planner == "lats":   # an expansion, then an evaluation per child
        calls = c.max_iterations * (1 + own["expansion_k"])
    elif c.planner == "hierarchical_mcts" and c.decomposition is not False:
        calls = HIERARCHICAL_STAGES * own["subtask_iterations"] * own["max_solutions"]
    else:
        calls = c.max_iterations
    return min(calls, c.max_llm_calls) if c.max_llm_calls is not None else calls


def _schemas(config: TrialConfig) -> list[dict[str, Any]]:
    # Imported here: the tools pull in the ML libraries, which a free run's header must not wait for.
    import mltb_core.toolkit.tools  # noqa: F401  (registers the tools the schemas come from)
    from mltb_core.toolkit.registry import REGISTRY

    schemas = [tool.schema() for tool in REGISTRY.for_toolset(config.toolset)]
    if config.context == "trimmed":
        schemas = [prompts.compact_schema(s) for s in schemas]
    return schemas


def prefix_tokens(task: Any, config: TrialConfig) -> int:
    """Tokens of the part every call of a trial shares: the tool schemas and the shared preamble."""
    schemas = _schemas(config)
    preamble = prompts.shared_preamble(task.prompt(Path(SUBMISSION_FILE)), schemas)
    return (len(preamble) + len(json.dumps(schemas))) // CHARS_PER_TOKEN


def tokens_per_call(task: Any, config: TrialConfig) -> tuple[int, int]:
    """(input, output) tokens of an average call of ``config`` on ``task``."""
    first = prefix_tokens(task, config) + len(prompts.EXPANSION_SYSTEM) // CHARS_PER_TOKEN
    depth = min(calls_per_trial(config), config.max_depth) / 2   # the mean path length over a trial
    history = int(depth * HISTORY_TOKENS_PER_STEP[config.context])
    if config.context_budget is not None:   # results past the budget are cut: a trimmed step's share each
        history = min(history, int(config.context_budget + depth * HISTORY_TOKENS_PER_STEP["trimmed"]))
    candidates = config.planner_knobs().get("expansion_k", 1)   # tree searches propose k at once
    return first + history, candidates * OUTPUT_TOKENS_PER_CANDIDATE


def _price(model: ModelRef, table: PriceTable) -> Price | None:
    """The model's price as its backend states it (free backends: $0); None when it has none."""
    try:
        return model.price(table)[0]
    except UnknownPriceError:
        return None   # the backend refuses to start on it, with the better message


def estimate_cost(items: Iterable[tuple[Any, TrialConfig]], table: PriceTable | None = None) -> CostEstimate | None:
    """The cost of running ``items`` (task, config); None when no item's model has a non-zero price."""
    table = table or load_price_table()
    total = CostEstimate(0, 0, 0, 0, 0.0, 0.0)
    paid = False
    per_task: dict[tuple[str, str, str, str], tuple[int, int, int]] = {}
    for task, config in items:
        price = _price(config.model, table)
        if price is None or (price.input_per_m == 0 and price.output_per_m == 0):
            continue
        paid = True
        calls = calls_per_trial(config)
        key = (task.slug, config.toolset, config.context, config.planner)
        if key not in per_task:
            per_task[key] = (*tokens_per_call(task, config), prefix_tokens(task, config))
        tokens_in, tokens_out, prefix = per_task[key]
        cached = max(calls - 1, 0) * min(prefix, tokens_in)
        total = CostEstimate(
            total.items + 1, total.calls + calls, total.input_tokens + calls * tokens_in,
            total.output_tokens + calls * tokens_out,
            total.usd + price.cost(calls * tokens_in, calls * tokens_out),
            total.usd_cached_prefix + price.cost(calls * tokens_in, calls * tokens_out, cached))
    return total if paid else None
