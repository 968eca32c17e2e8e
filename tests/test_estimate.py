"""The cost estimate printed before a paid run: tokens × price × items, from the configuration."""
from __future__ import annotations

import pytest

from mltb_core.analysis.estimate import calls_per_trial, estimate_cost, prefix_tokens, tokens_per_call
from mltb_core.bench.tasks import get_task
from mltb_core.config import TrialConfig
from mltb_core.llm.prices import load_price_table

pytest_plugins = ["pytester"]

TASK = get_task("spaceship-titanic")


def config(**fields):
    return TrialConfig(**{"planner": "react", "model": "openai:gpt-4o", **fields})


def test_free_models_get_no_estimate():
    assert estimate_cost([(TASK, config(model="sim")), (TASK, config(model="local"))]) is None


def test_calls_come_from_the_budgets():
    assert calls_per_trial(config(max_iterations=10)) == 10
    assert calls_per_trial(config(max_iterations=50, max_depth=12)) == 12
    assert calls_per_trial(config(planner="mcts_shaped", max_iterations=20)) == 20
    assert calls_per_trial(config(planner="lats", max_iterations=10, knobs={"expansion_k": 3})) == 40
    assert calls_per_trial(config(planner="hierarchical_mcts", knobs={"subtask_iterations": 2, "max_solutions": 1})) == 20
    assert calls_per_trial(config(planner="lats", max_llm_calls=7)) == 7


def test_estimate_is_tokens_times_price_times_items():
    table = load_price_table()
    price = table.price("gpt-4o")
    one = config(max_iterations=10)
    tokens_in, tokens_out = tokens_per_call(TASK, one)
    # the first call alone carries the tool schemas and the preamble: thousands of tokens
    assert tokens_in > prefix_tokens(TASK, one) > 5_000
    single = estimate_cost([(TASK, one)], table)
    assert single.calls == 10 and single.input_tokens == 10 * tokens_in and single.output_tokens == 10 * tokens_out
    assert single.usd == pytest.approx(price.cost(10 * tokens_in, 10 * tokens_out))
    assert single.usd_cached_prefix < single.usd
    three = estimate_cost([(TASK, one.with_(trial=t)) for t in range(3)], table)
    assert three.items == 3 and three.usd == pytest.approx(3 * single.usd)
    # trimmed context is cheaper; a cheaper model is cheaper
    assert estimate_cost([(TASK, one.with_(context="trimmed"))], table).usd < single.usd
    assert estimate_cost([(TASK, one.with_(model="openai:gpt-4o-mini"))], table).usd < single.usd
    # a context budget caps the history a long trial carries (a short one stays under it: no change)
    long = config(max_iterations=60, max_depth=60)
    assert tokens_per_call(TASK, long.with_(context_budget=1_000))[0] < tokens_per_call(TASK, long)[0]
    assert tokens_per_call(TASK, one.with_(context_budget=100_000)) == tokens_per_call(TASK, one)
    assert "$" in single.line() and "10 LLM calls" in single.line()


def test_the_plugin_prints_the_estimate_at_session_start_for_a_paid_model(pytester):
    from test_plugin import COMMON, FAKE_CONFTEST, SUITE

    pytester.makepyfile(test_challenges=SUITE)
    pytester.makeconftest(FAKE_CONFTEST)
    paid = pytester.runpytest_subprocess(*COMMON, "--collect-only", "--model=openai:gpt-4o",
                                         "--planner=react", "--max-iterations=5", "--trials=2")
    line = next(line for line in paid.stdout.lines if "cost estimate" in line)
    assert "2 item(s), 10 LLM calls" in line, line
    free = pytester.runpytest_subprocess(*COMMON, "--collect-only", "--planner=react")
    assert "cost estimate" not in free.stdout.str()
