"""compare.py: baselines, paired/unpaired changes, and the gate's verdicts (REGRESSION / inconclusive / ok)."""
import json

import pytest

from mltb_core.analysis.compare import (BASELINE_VERSION, cell_figures, compare_to_baseline, load_baseline,
                               parse_regression_spec, save_baseline)
from mltb_core.analysis.records import TrialRecord
from mltb_core.analysis.stats import rate_gate_probabilities, trials_needed_for_rate_gate

SPEC = "consistency:-0.05,percentile:-2"


def cell(valid_flags, percentile=60.0, task="t", seed0=0, samples=None):
    return [TrialRecord(task=task, planner="react", model="sim", trial=i, seed=seed0 + i, config_hash="h",
                        outcome="valid" if ok else "planner_failure", valid=ok,
                        percentile=percentile if ok else None, percentile_samples=samples if ok else None,
                        row_seed=0 if ok else None, extra={"leaderboard": True})
            for i, ok in enumerate(valid_flags)]


def baseline_of(records):
    return {"version": BASELINE_VERSION, "cells": cell_figures(records)}


def delta(comparison, metric):
    return next(d for d in comparison.deltas if d.metric == metric)


def test_parse_spec():
    assert parse_regression_spec("consistency:-0.05, percentile:2") == {"consistency": 0.05, "percentile": 2.0}
    for bad in ("speed:-1", "consistency", "percentile:abc", "", "consistency:0"):
        with pytest.raises(ValueError):
            parse_regression_spec(bad)


def test_roundtrip_and_gate(tmp_path):
    path = tmp_path / "base.json"
    save_baseline(path, cell([True] * 8 + [False] * 2, samples=[58.0, 61.5, 60.0]))
    baseline = load_baseline(path)
    assert '"percentile_samples": [58.0, 61.5, 60.0]' in path.read_text()   # number lists stay on one line
    spec = parse_regression_spec(SPEC)
    same = compare_to_baseline(baseline, cell([True] * 8 + [False] * 2, samples=[58.0, 61.5, 60.0]), spec)
    assert not same.failed and "no regression shown" in same.render()
    worse = compare_to_baseline(baseline, cell([False] * 10), spec)
    assert worse.failed and {d.metric for d in worse.regressions} == {"consistency"}
    # the percentile's change is the median of the paired differences: 2 of the 10 pairs failed on both sides
    # (difference 0), so at the family's level (2 gated comparisons, 97.5 %) a median below 0 is not shown
    assert delta(worse, "percentile").change.high == 0 and worse.level == pytest.approx(0.975)
    assert "REGRESSION" in worse.render()
    always = compare_to_baseline(load_baseline(path), cell([False] * 8 + [True] * 2), spec)
    assert delta(always, "percentile").change.estimate == pytest.approx(-60.0)


def test_three_versus_three_is_inconclusive_not_ok():
    # the case: ReAct 2/3 valid → 0/3 valid at 3 trials per cell
    comparison = compare_to_baseline(baseline_of(cell([True, True, False])), cell([False] * 3),
                                     parse_regression_spec(SPEC))
    consistency = delta(comparison, "consistency")
    assert not comparison.failed and consistency.verdict != "ok"
    assert consistency.verdict.startswith("inconclusive (need ~")
    # computed for the interval the gate uses, at the rate nearest 1/2 in 2/3's exact interval [0.09, 0.99],
    # i.e. 0.5; the normal approximation (1.96 + 0.84)^2 * 2p(1-p) / 0.05^2 gives 1570
    # two gated comparisons (consistency, percentile) share the error: each interval at 97.5 %
    rate = 0.5
    assert comparison.family == 2 and comparison.level == pytest.approx(0.975)
    assert consistency.trials_needed == trials_needed_for_rate_gate(rate, 0.05, comparison.level)
    flagged, _ = rate_gate_probabilities(consistency.trials_needed, rate, rate - 0.05, 0.05, comparison.level)
    assert flagged >= 0.8
    alone = delta(compare_to_baseline(baseline_of(cell([True, True, False])), cell([False] * 3),
                                      {"consistency": 0.05}), "consistency")
    assert alone.trials_needed == trials_needed_for_rate_gate(rate, 0.05) == 1585   # the figure the docs quote
    assert delta(comparison, "percentile").verdict.startswith("inconclusive")
    text = comparison.render()
    assert "INCONCLUSIVE: 2 of 2 gated comparisons" in text    # normalized is not gated by SPEC
    assert [d.verdict for d in comparison.deltas if d.threshold is not None and d.verdict == "ok"] == []


def test_same_three_trials_are_unchanged_and_other_seeds_inconclusive():
    comparison = compare_to_baseline(baseline_of(cell([True] * 3)), cell([True] * 3), {"consistency": 0.05})
    same = delta(comparison, "consistency")
    assert same.verdict == "unchanged" and not same.inconclusive and not comparison.failed
    text = comparison.render()
    assert "unchanged: 1 of 1" in text and "trials 0..2" in text and "INCONCLUSIVE" not in text
    other = compare_to_baseline(baseline_of(cell([True] * 3)), cell([True] * 3, seed0=10), {"consistency": 0.05})
    assert delta(other, "consistency").inconclusive      # unpaired: no trial-for-trial fact to state


def test_one_changed_trial_is_not_unchanged():
    flags = [True, False] * 5
    comparison = compare_to_baseline(baseline_of(cell(flags)), cell(flags[:-1] + [True]), {"consistency": 0.05})
    assert delta(comparison, "consistency").inconclusive


def test_ok_needs_non_inferiority_shown():
    flags = [True] * 50 + [False] * 50
    comparison = compare_to_baseline(baseline_of(cell(flags)), cell(flags[::-1]), {"consistency": 0.3})
    consistency = delta(comparison, "consistency")
    assert consistency.change.low > -0.3 and consistency.verdict == "ok" and consistency.ok
    tight = delta(compare_to_baseline(baseline_of(cell(flags)), cell(flags, seed0=1000), {"consistency": 0.05}),
                  "consistency")
    assert tight.change.low < -0.05 and tight.verdict.startswith("inconclusive")


@pytest.mark.parametrize("seed0", [0, 1000])   # same trial seeds: paired; other seeds: unpaired
def test_real_regression_at_large_n_fails(seed0):
    base = cell([True] * 36 + [False] * 4)
    cur = cell([True] * 20 + [False] * 20, seed0=seed0)
    comparison = compare_to_baseline(baseline_of(base), cur, {"consistency": 0.05})
    consistency = delta(comparison, "consistency")
    assert consistency.paired == (seed0 == 0)
    assert consistency.regressed and consistency.verdict == "REGRESSION" and comparison.failed
    assert consistency.change.estimate == pytest.approx(-0.4) and consistency.change.high < -0.05


def test_paired_test_is_used_when_trial_seeds_match():
    base = baseline_of(cell([True] * 30 + [False] * 10))
    paired = delta(compare_to_baseline(base, cell([True] * 28 + [False] * 12), {}), "consistency")
    unpaired = delta(compare_to_baseline(base, cell([True] * 28 + [False] * 12, seed0=500), {}), "consistency")
    assert paired.paired and not unpaired.paired
    assert paired.change.estimate == unpaired.change.estimate == pytest.approx(-0.05)
    assert paired.change.high - paired.change.low < unpaired.change.high - unpaired.change.low


def test_median_gate_needs_six_trials_per_side():
    small = compare_to_baseline(baseline_of(cell([True] * 5, percentile=90.0)), cell([True] * 5, percentile=10.0),
                                {"percentile": 2.0})
    assert delta(small, "percentile").verdict.startswith("inconclusive") and not small.failed
    large = compare_to_baseline(baseline_of(cell([True] * 6, percentile=90.0)), cell([True] * 6, percentile=10.0),
                                {"percentile": 2.0})
    assert delta(large, "percentile").regressed


def test_missing_cells_are_reported_not_failed(tmp_path):
    path = tmp_path / "b.json"
    save_baseline(path, cell([True] * 3, task="old"))
    comparison = compare_to_baseline(load_baseline(path), cell([True] * 3, task="new"), {"consistency": 0.05})
    assert comparison.only_in_baseline == ["old|react|sim"] and comparison.only_in_current == ["new|react|sim"]
    assert not comparison.failed


def test_bad_baseline_file(tmp_path):
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(ValueError, match="not an mltb baseline"):
        load_baseline(tmp_path / "x.json")
    (tmp_path / "v1.json").write_text(json.dumps({"version": 1, "cells": {}}))
    with pytest.raises(ValueError, match="regenerate it with --save-baseline"):
        load_baseline(tmp_path / "v1.json")


def test_combined_rows_take_tasks_as_units_and_never_fail():
    base = cell([True] * 10, task="a") + cell([True] * 10, task="b")
    cur = cell([False] * 10, task="a") + cell([True] * 10, task="b")
    comparison = compare_to_baseline(baseline_of(base), cur, {"consistency": 0.05})
    combined = [d for d in comparison.deltas if d.combined and d.metric == "consistency"]
    assert len(combined) == 1 and combined[0].cell == "all tasks|react|sim"
    assert combined[0].change.estimate == pytest.approx(-0.5)       # mean of -1.0 and 0.0
    assert combined[0].p_value == 1.0          # 2 tasks, changes -1 and 0: every sign pattern is as extreme
    assert combined[0] not in comparison.regressions                  # informative only
    assert comparison.failed and [d.cell for d in comparison.regressions] == ["a|react|sim"]
    assert "all tasks|react|sim" in comparison.render()


def test_the_docs_quote_the_trials_the_code_computes():
    from pathlib import Path

    from mltb_core.analysis.compare import consistency_trials_needed
    from mltb_core.analysis.stats import family_level, min_n_for_median_ci

    text = (Path(__file__).parent.parent / "docs" / "statistics.md").read_text()
    assert f"**{consistency_trials_needed(1, 2, 0.05):,}** trials per cell" in text
    assert f"{trials_needed_for_rate_gate(0.5, 0.05, family_level(48)):,} at m = 48" in text
    assert (f"6 alone, {min_n_for_median_ci(family_level(24))} at m = 24, "
            f"{min_n_for_median_ci(family_level(48))} at\nm = 48") in text


# -- the behaviour rule: a synthetic policy's paired trials are facts about the code (issue 57) ----------------
def synthetic(records):
    for record in records:
        record.synthetic = True
    return records


def sim_baseline(records):
    return baseline_of(synthetic(records))


def test_a_synthetic_cell_that_stops_submitting_regresses_at_two_trials():
    # the case: every trial went from a valid submission to stage 0, and the gate said "no regression"
    comparison = compare_to_baseline(sim_baseline(cell([True, True])), synthetic(cell([False, False])),
                                     parse_regression_spec(SPEC))
    assert comparison.failed
    assert delta(comparison, "consistency").verdict == "REGRESSION (behaviour)"
    assert delta(comparison, "percentile").verdict == "REGRESSION (behaviour)"   # 60 -> 0: a collapse
    text = comparison.render()
    assert "FAILED: 2 regression(s)" in text and "t|react|sim consistency valid 2 -> 0 of 2 paired seeds" in text
    assert "no regression shown" not in text


@pytest.mark.parametrize("base, cur, spec, share, lost", [
    ([True] * 6, [True] * 3 + [False] * 3, SPEC, 0.5, True),           # 6/6 -> 3/6: half lost
    ([True] * 6, [True] * 4 + [False] * 2, SPEC, 0.5, False),          # 6/6 -> 4/6: kept more than half
    ([True] * 6, [True] * 4 + [False] * 2, SPEC, 0.25, True),          # ... but a quarter is a chosen share too
    ([True] * 3 + [False] * 3, [False] * 3 + [True] * 3, SPEC, 0.5, False),   # reshuffled: same count, no loss
    ([True] * 6, [True] * 3 + [False] * 3, "consistency:-0.6", 0.5, False),  # a drop of 0.5 is tolerated
    ([False] * 6, [False] * 6, SPEC, 0.5, False),                       # nothing to lose (and unchanged)
])
def test_the_behaviour_rule_reads_the_lost_share_and_the_tolerated_drop(base, cur, spec, share, lost):
    comparison = compare_to_baseline(sim_baseline(cell(base)), synthetic(cell(cur)), parse_regression_spec(spec),
                                     lost_share=share)
    assert delta(comparison, "consistency").lost is lost
    assert (delta(comparison, "consistency").verdict == "REGRESSION (behaviour)") is lost


def test_the_behaviour_rule_needs_a_deterministic_policy_on_both_sides_and_paired_seeds():
    spec = parse_regression_spec(SPEC)
    llm = compare_to_baseline(baseline_of(cell([True, True])), cell([False, False]), spec)     # not synthetic
    assert not llm.failed and delta(llm, "consistency").verdict.startswith("inconclusive")
    half = compare_to_baseline(baseline_of(cell([True, True])), synthetic(cell([False, False])), spec)
    assert not delta(half, "consistency").lost                    # the baseline was not the synthetic policy
    other_seeds = compare_to_baseline(sim_baseline(cell([True, True])), synthetic(cell([False, False], seed0=10)),
                                      spec)
    assert not delta(other_seeds, "consistency").paired and not other_seeds.failed   # other seeds: a sample


def test_a_stopped_planner_fails_beside_unchanged_ones_and_takes_no_share_of_the_error():
    spec = parse_regression_spec(SPEC)
    base, cur = [], []
    for planner, broken in (("react", True), ("lats", False), ("mcts_shaped", False)):
        for task in ("a", "b", "c"):
            before = cell([True, True], task=task)
            after = cell([not broken] * 2, task=task)
            for record in before + after:
                record.planner = planner
            base += before
            cur += after
    comparison = compare_to_baseline(sim_baseline(base), synthetic(cur), spec)
    assert comparison.failed and comparison.family == 0          # facts only: no interval needed a level
    assert {d.cell for d in comparison.regressions} == {f"{t}|react|sim" for t in ("a", "b", "c", "all tasks")}
    assert all(d.verdict == "unchanged" for d in comparison.deltas if "|react|" not in d.cell and not d.combined)


def planner_cells(flags_by_task, planner="react"):
    records = []
    for task, flags in flags_by_task.items():
        records += cell(flags, task=task)
    for record in records:
        record.planner = planner
    return synthetic(records)


def test_half_lost_over_the_tasks_fails_the_planners_row_and_no_cell():
    # 6/6 -> 3/6 over three tasks: every cell kept something, the planner kept half
    before = planner_cells({"a": [True, True], "b": [True, True], "c": [True, True]})
    after = planner_cells({"a": [True, False], "b": [False, True], "c": [True, False]})
    comparison = compare_to_baseline(baseline_of(before), after, parse_regression_spec("consistency:-0.05"))
    assert [d.cell for d in comparison.regressions] == ["all tasks|react|sim"]
    assert "valid 6 -> 3 of 6 paired seeds over 3 tasks" in comparison.render()
    kept_more = planner_cells({"a": [True, True], "b": [False, True], "c": [True, False]})
    assert not compare_to_baseline(baseline_of(before), kept_more, parse_regression_spec("consistency:-0.05")).failed


def test_a_reshuffle_of_which_seeds_succeed_is_no_behaviour_loss():
    before = planner_cells({"a": [True, False, True, False], "b": [False, True, False, True]})
    after = planner_cells({"a": [False, True, False, True], "b": [True, False, True, False]})
    comparison = compare_to_baseline(baseline_of(before), after, parse_regression_spec("consistency:-0.05"))
    assert not any(d.lost for d in comparison.deltas) and not comparison.failed


def test_one_task_that_loses_everything_fails_its_cell_while_the_planner_keeps_enough():
    before = planner_cells({"a": [True, True], "b": [True, True], "c": [True, True]})
    after = planner_cells({"a": [False, False], "b": [True, True], "c": [True, True]})
    comparison = compare_to_baseline(baseline_of(before), after, parse_regression_spec("consistency:-0.05"))
    assert [d.cell for d in comparison.regressions] == ["a|react|sim"]
