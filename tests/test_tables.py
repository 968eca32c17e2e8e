"""tables.py and stats.py: the paper-shaped tables and seeded bootstrap CIs."""
import random

import pytest

from mltb_core.results import TrialRecord
from mltb_core.stats import bootstrap_ci, bootstrap_diff_ci, grouped_bootstrap_ci
from mltb_core.tables import build_tables, render_summary


def make_records(seed=0, n=4):
    rng = random.Random(seed)
    out = []
    for task in ("alpha", "beta"):
        for planner in ("mcts_shaped", "react"):
            for trial in range(n):
                outcome = rng.choice(["valid", "valid", "planner_failure", "infra_error"])
                out.append(TrialRecord(task=task, planner=planner, model="sim", trial=trial, seed=trial,
                                       config_hash="h", outcome=outcome, valid=outcome == "valid",
                                       percentile=rng.uniform(0, 100) if outcome == "valid" else None,
                                       stage_reached=rng.randint(0, 10), tokens_in=10, llm_calls=2,
                                       synthetic=True, error="boom" if outcome == "infra_error" else None))
    return out


def test_bootstrap_is_seeded_and_brackets_the_estimate():
    values = [0, 1, 1, 0, 1, 1, 1, 0]
    a, b = bootstrap_ci(values, "mean", seed=3), bootstrap_ci(values, "mean", seed=3)
    assert a == b and a.low <= a.estimate <= a.high and a.n == 8
    assert bootstrap_ci([], "mean").estimate is None
    assert bootstrap_ci([5.0]).low == bootstrap_ci([5.0]).high == 5.0
    with pytest.raises(ValueError, match="unknown statistic"):
        bootstrap_ci(values, "mode")


def test_diff_and_grouped_bootstrap():
    diff = bootstrap_diff_ci([0.0] * 6, [1.0] * 6, "mean")
    assert diff.estimate == diff.high == -1.0
    grouped = grouped_bootstrap_ci([[1, 1, 0], [0, 0, 0], []], "mean", "median")
    assert grouped.n == 2 and grouped.estimate == pytest.approx(1 / 3)


def test_tables_ignore_record_order_and_mark_synthetic():
    records = make_records()
    text = render_summary(records)
    assert text == render_summary(list(reversed(records)))
    for title in ("Consistency", "Median leaderboard percentile", "Cost per planner", "Stage funnel",
                  "Infrastructure errors"):
        assert title in text
    assert "(synthetic policy, not an LLM)" in text
    # paper column order: react before mcts_shaped
    header = next(line for line in text.splitlines() if line.startswith("task"))
    assert header.index("react") < header.index("mcts_shaped")


def test_consistency_cell_counts_valid_over_non_infra():
    records = make_records()
    table = build_tables(records)[0]
    alpha = next(row for row in table.rows if row[0] == "alpha")
    cell = [r for r in records if r.task == "alpha" and r.planner == "react" and r.outcome != "infra_error"]
    expected = sum(r.valid for r in cell) / len(cell)
    assert alpha[table.headers.index("react")] == f"{expected:.2f}"


def test_funnel_counts_trials_reaching_each_stage():
    records = make_records()
    funnel = next(t for t in build_tables(records) if t.key == "funnel")
    row = next(r for r in funnel.rows if r[1] == "react")
    counted = [r for r in records if r.planner == "react" and r.outcome != "infra_error"]
    assert row[2] == str(len(counted))
    assert row[3 + 4] == str(sum(r.stage_reached >= 5 for r in counted))
