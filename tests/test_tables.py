"""tables.py: the paper-shaped tables, n in every cell, honest intervals, what each aggregate is over."""
import random

import re

import pytest

from mltb_core.analysis.records import TrialRecord
from mltb_core.analysis.stats import RateSample, bootstrap_ci, clustered_ci
from mltb_core.analysis.tables import (build_tables, consistency_table, normalized_table, percentile_table,
                                       render_summary)


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


def test_clustered_median_of_rates():
    grouped = clustered_ci([RateSample(2, 3), RateSample(0, 3)])
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


def test_an_unconfined_run_says_so_in_every_table_title():
    records = make_records()
    assert "UNCONFINED" not in render_summary(records)
    for record in records[:3]:
        record.extra["confinement"] = "none: no Landlock on this kernel (unconfined: opted in)"
    titles = [t.title for t in build_tables(records) if t.title.startswith(("Consistency", "Median", "Normalized"))]
    assert titles and all(f"UNCONFINED tool workers in 3 of {len(records)} trials" in t for t in titles)


def test_consistency_cell_counts_valid_over_non_infra():
    records = make_records()
    table = build_tables(records)[0]
    alpha = next(row for row in table.rows if row[0] == "alpha")
    cell = [r for r in records if r.task == "alpha" and r.planner == "react" and r.outcome != "infra_error"]
    valid = sum(r.valid for r in cell)
    assert alpha[table.headers.index("react")].startswith(f"{valid}/{len(cell)} {valid / len(cell):.2f} [")


def test_funnel_counts_trials_reaching_each_stage():
    records = make_records()
    funnel = next(t for t in build_tables(records) if t.key == "funnel")
    row = next(r for r in funnel.rows if r[1] == "react")
    counted = [r for r in records if r.planner == "react" and r.outcome != "infra_error"]
    assert row[2] == str(len(counted))
    assert row[3 + 4] == str(sum(r.stage_reached >= 5 for r in counted))


def trial(task, planner, i, valid, percentile=None, samples=None, note=None, leaderboard=True):
    extra = {"leaderboard": leaderboard}
    if note:
        extra["percentile_note"] = note
    return TrialRecord(task=task, planner=planner, model="sim", trial=i, seed=100 + i, config_hash="h",
                       outcome="valid" if valid else "planner_failure", valid=valid,
                       percentile=percentile if valid else None, percentile_samples=samples if valid else None,
                       row_seed=0, extra=extra)


def test_two_of_two_valid_shows_an_exact_interval_and_n():
    table = consistency_table([trial("t", "react", 0, True, 50.0), trial("t", "react", 1, True, 60.0)])[0]
    assert table.rows[0][1] == "2/2 1.00 [0.15, 1.00]"     # Clopper-Pearson: 0.025 ** (1/2) = 0.158, rounded down
    overall = next(row for row in table.rows if row[0].startswith("overall"))
    # one task: no interval of a median over tasks, and the row says why
    assert overall[0].startswith("overall: median over tasks") and overall[1] == "1.00 [–] (k=1 < 6 of 1)"
    assert "[1.00, 1.00]" not in render_summary([trial("t", "react", 0, True, 50.0), trial("t", "react", 1, True, 60.0)])
    assert any("Clopper-Pearson" in note for note in table.notes)


def test_percentile_cell_counts_failures_as_zero_and_shows_n():
    records = [trial("t", "react", 0, True, 80.0), trial("t", "react", 1, False), trial("t", "react", 2, False)]
    table = percentile_table(records)[0]
    cell = table.rows[0][1]
    assert cell == "0.0 [–] n=3 < 6, 1 valid"     # median of (80, 0, 0); 3 trials: no interval of a median
    assert "failed trials count as 0" in table.title
    assert any("counting as 0 (as in the paper)" in note for note in table.notes)


def test_row_resamples_widen_the_percentile_interval():
    samples = [55.0 + (b % 9) for b in range(40)]
    same = [trial("t", "react", i, True, 59.0, samples) for i in range(6)]
    no_rows = [trial("t", "react", i, True, 59.0) for i in range(6)]
    assert percentile_table(no_rows)[0].rows[0][1].startswith("59.0 [59.0, 59.0]")
    assert percentile_table(same)[0].rows[0][1].startswith("59.0 [55.0, 63.0]")


def test_percentile_aggregate_says_which_tasks_it_is_over():
    records = [trial(task, "react", i, True, 40.0 + 10 * k) for k, task in enumerate(("a", "b", "c")) for i in range(2)]
    records += [trial("d", "react", i, True, None, note="public board only") for i in range(2)]
    records += [trial("e", "react", i, False, leaderboard=False) for i in range(2)]
    table = percentile_table(records)[0]
    assert "median over 3 of 5 tasks" in table.title
    scope = next(note for note in table.notes if note.startswith("overall: median over 3 of 5 tasks"))
    assert "d: public board only" in scope and "e: no leaderboard" in scope
    rows = {row[0]: row[1] for row in table.rows}
    assert rows["d"] == rows["e"] == "excluded"
    assert rows["overall: median over tasks"] == "50.0 [–] (k=3 < 6 of 5)"
    # the reason comes from a records file: its Markdown form is escaped, its terminal form one line
    records += [trial("f", "react", i, True, None, note="<b>x</b>\n# forged") for i in range(2)]
    table = percentile_table(records)[0]
    assert any("f: \\<b\\>x\\</b\\> \\# forged" in note for note in table.notes_for("github"))
    assert any("f: <b>x</b> # forged" in note for note in table.notes_for("simple"))


def test_overall_percentile_interval_spans_the_tasks():
    records = [trial(task, "react", i, True, float(p)) for task, p in zip("abcdef", (5, 25, 45, 65, 85, 95))
               for i in range(3)]
    overall = next(row for row in percentile_table(records)[0].rows if row[0] == "overall: median over tasks")[1]
    low, high = (float(x) for x in overall.split("[")[1].split("]")[0].split(","))
    assert low <= 5.0 and high >= 95.0   # 6 tasks: the min-max range (covers the median 96.9 % of the time)


def test_a_valid_trial_without_percentile_is_named_not_counted_as_zero():
    records = [trial("t", "react", 0, True, 70.0), trial("t", "react", 1, True, None), trial("t", "react", 2, False)]
    cell = percentile_table(records)[0].rows[0][1]
    assert cell == "35.0 [–] n=2 < 6, 1 valid, 1 valid unscored"   # median of (70, 0)


def test_cost_table_shows_server_cached_input_tokens_per_cell_and_in_total():
    from mltb_core.analysis.tables import cost_table

    records = [TrialRecord(task="alpha", planner="react", model="openai:gpt-4.1-mini", trial=t, seed=t,
                           config_hash="h", outcome="valid", valid=True, tokens_in=1000, tokens_in_cached=600 + t,
                           tokens_out=50, llm_calls=3, cost_usd=0.001) for t in range(2)]
    records.append(TrialRecord(task="alpha", planner="mcts_shaped", model="openai:gpt-4.1-mini", trial=0, seed=0,
                               config_hash="h", outcome="valid", valid=True, tokens_in=500, tokens_out=20))
    table = cost_table(records)
    column = table.headers.index("cached in")
    assert table.headers[column - 1] == "tokens in"
    rows = {(row[1], row[2]): row for row in table.rows}
    assert rows[("react", "alpha")][column] == "1201"
    assert rows[("mcts_shaped", "alpha")][column] == "0"
    assert table.rows[-1][0] == "total" and table.rows[-1][column] == "1201"
    # and the column survives a JSON round trip of the records
    again = [TrialRecord.from_dict(r.to_dict()) for r in records]
    assert cost_table(again).rows == table.rows


def test_normalized_score_on_every_task_with_interval_n_and_baseline():
    # issue 18: a task without a leaderboard (e.g. Costa Rica) has no percentile but still a quality figure
    records = []
    for k, task in enumerate(("costa-rican-household-poverty-prediction", "spaceship-titanic")):
        for i in range(6):
            r = trial(task, "react", i, i != 0, 50.0 if task == "spaceship-titanic" else None,
                      leaderboard=task == "spaceship-titanic")
            r.normalized = 0.2 + 0.1 * i + k if r.valid else None
            records.append(r)
    records[1].normalized = -0.4       # a valid submission below the baseline counts 0, like a failure
    (table,) = normalized_table(records)
    rows = {row[0]: row[1] for row in table.rows}
    costa = rows["costa-rican-household-poverty-prediction"]
    assert costa.startswith("0.45 [0.00, 0.70] n=6, 5 valid")      # median of (0, 0, 0.4, 0.5, 0.6, 0.7)
    assert rows["overall: median over tasks"] == f"{(0.45 + 1.45) / 2:.2f} [–] (k=2 < 6 of 2)"
    assert "median over all 2 tasks" in table.title
    notes = " ".join(table.notes)
    assert "costa-rican-household-poverty-prediction: the train majority class" in notes
    # the percentile table keeps its own overall, over the tasks with a board, and shows the normalized one beside
    percentile = percentile_table(records)[0]
    assert any(row[0].startswith("normalized score, median over all 2 tasks") for row in percentile.rows)


def test_llm_calls_are_stated_and_unequal_compute_is_flagged():
    records = [trial("t", planner, i, True, 50.0) for planner in ("react", "lats", "mcts_shaped") for i in range(2)]
    for r in records:
        r.llm_calls = {"react": 40, "lats": 115, "mcts_shaped": 41}[r.planner]
    (table,) = consistency_table(records)
    row = table.rows[0]
    cells = dict(zip(table.headers, row))
    assert cells["lats"].endswith("‡") and not cells["react"].endswith("‡") and not cells["mcts_shaped"].endswith("‡")
    per_trial = {row[0]: dict(zip(table.headers, row)) for row in table.rows}
    calls = per_trial["LLM calls per trial (mean)"]
    assert calls["lats"] == "115.0 ‡" and calls["react"] == "40.0"
    assert any("more than 10%" in note for note in table.notes)


def test_the_compact_summary_shows_consistency_the_funnel_and_infra_errors_with_each_note_once():
    """Issue 35: 55-75 lines of tables for a few trials, the same footnotes under every table."""
    records = make_records()
    compact, full = render_summary(records, compact=True), render_summary(records)
    assert compact.startswith("Consistency (valid trials / trials)")
    assert "Stage funnel" in compact and "Infrastructure errors" in compact
    assert "Cost per planner" not in compact and "Median normalized" not in compact and "pass@1" not in compact
    assert compact.endswith("mltb report RUN_DIR writes them with plots and the search trees")
    named = render_summary(records, compact=True, run_dir="mltb-runs/first")
    assert named.endswith("mltb report mltb-runs/first writes them with plots and the search trees")
    assert "Cost per planner" in full and "Median normalized" in full
    for text in (compact, full):
        notes = [line for line in text.splitlines() if line.startswith("synthetic policy, not an LLM: figures")]
        assert len(notes) == 1, text      # said once, not under every table
    assert len(compact.splitlines()) < len(full.splitlines()) / 2


def test_tool_calls_tokens_and_seconds_stand_beside_llm_calls_and_unmatched_tool_calls_are_flagged():
    # matched in LLM calls, not in tool calls: whole-solution planners re-run steps without a call
    records = [trial("t", planner, i, True, 50.0) for planner in ("react", "automind", "mcts_shaped") for i in range(2)]
    for r in records:
        r.llm_calls, r.tool_calls = 40, {"react": 37, "automind": 72, "mcts_shaped": 38}[r.planner]
        r.tokens_in, r.tokens_out, r.wall_seconds = 1000, 100, 2.0
    cells = dict(zip(consistency_table(records)[0].headers, consistency_table(records)[0].rows[0]))
    assert cells["automind"].endswith("‡") and not cells["react"].endswith("‡")
    percentile = percentile_table(records)[0]      # the same cell marks in the percentile table
    assert dict(zip(percentile.headers, percentile.rows[0]))["automind"].endswith("‡")
    assert not dict(zip(percentile.headers, percentile.rows[0]))["react"].endswith("‡")
    for table in consistency_table(records) + normalized_table(records):
        per_trial = {row[0]: dict(zip(table.headers, row)) for row in table.rows}
        names = list(per_trial)
        assert names.index("tool calls per trial (mean)") == names.index("LLM calls per trial (mean)") + 1
        assert per_trial["tool calls per trial (mean)"]["automind"] == "72.0 ‡"
        assert per_trial["LLM calls per trial (mean)"]["automind"] == "40.0"
        assert per_trial["tokens (in + out) per trial (mean)"]["react"] == "1,100"
        assert per_trial["seconds per trial (mean)"]["react"] == "2.0"


def test_a_sim_ordering_states_the_policy_rates_that_can_order_planners():
    from mltb_core.analysis.tables import pass_at_k_table
    from mltb_core.llm import sim

    records = [trial("t", planner, i, i % 2 == 0, 50.0) for planner in ("react", "lats") for i in range(2)]
    for r in records:
        r.model, r.synthetic = "sim:0.5", True
    for table in consistency_table(records) + normalized_table(records) + pass_at_k_table(records):
        (note,) = [n for n in table.notes if n.startswith("sim's rates")]
        heed = sim.HEED_BASE + sim.HEED_SLOPE * 0.5
        assert f"cut the per-step mistake rate by {1 - sim.REFLECTION_FACTOR:.0%}" in note
        assert f"heeded with probability {heed:.3g}" in note and "0.775" in note     # the 77.5 %
        assert f"noise of sd {sim.JUDGE_NOISE_SD:g}" in note
    assert f"{sim.MISTAKE_SCALE} × (1 − skill)" in sim.__doc__     # the docstring reads the same constants
    for r in records:
        r.model, r.synthetic = "gpt-4o", False
    assert not any(n.startswith("sim's rates") for t in consistency_table(records) for n in t.notes)


def test_pass_at_k_cells_show_c_and_n_and_only_the_k_some_cell_reaches():
    from mltb_core.analysis.tables import pass_at_k_table

    records = [trial("t", "react", i, i == 0, 50.0) for i in range(3)] + [trial("t", "lats", 0, True, 50.0)]
    (table,) = pass_at_k_table(records)
    assert table.title.startswith("pass@1/@3 per task")          # no cell has 10 trials: no @10 column of '-'
    cells = dict(zip(table.headers, table.rows[0]))
    assert cells["react"] == "1/3: 0.33 / 1.00" and cells["lats"] == "1/1: 1.00 / -"
    many = [trial("t", "react", i, i < 4, 50.0) for i in range(10)]
    (table,) = pass_at_k_table(many)
    assert table.title.startswith("pass@1/@3/@10") and table.rows[0][1] == "4/10: 0.40 / 0.83 / 1.00"


def test_untrusted_parts_of_a_title_are_made_safe_wherever_they_overlap():
    from mltb_core.analysis.tables import Table

    # the review's case: one part ("toolset x") begins in mltb's own words and runs into another part, which
    # re.sub had then left raw
    evil = "x<img src=x onerror=alert(1)>\n# Owned\x1b]0;pwned\x07"
    table = Table("t", f"Consistency · toolset {evil} · board toolset x", ["task"], [["a"]],
                  notes=[f"(excluded: a: {evil})"], untrusted_text=(evil, "toolset x"))
    markdown = table.title_for("github")
    assert not re.search(r"(?<!\\)<img", markdown) and "\n" not in markdown and "\x1b" not in markdown
    assert markdown.startswith("Consistency · toolset x\\<img") and markdown.endswith(" · board toolset x")
    terminal = table.title_for("simple")
    assert "\x1b" not in terminal and "\x07" not in terminal and "\n" not in terminal
    assert not re.search(r"(?<!\\)<img", table.notes_for("github")[0]) and "\x1b" not in table.notes_for("simple")[0]
    # a part of only spaces, or with spaces at its ends, keeps the words around it apart
    spaced = Table("t", "model m · toolset   · board b", ["model m: n"], [["1"]], untrusted_text=(" ", "a; "))
    assert spaced.title_for("simple") == spaced.title_for("github") == "model m · toolset   · board b"
    assert Table("t", "a  x b", [], [], untrusted_text=(" x",)).title_for("github") == "a  x b"
    assert Table("t", "x a; b", [], [], untrusted_text=("a; ",)).title_for("github") == "x a; b"
