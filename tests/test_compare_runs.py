"""compare_runs.py / `mltb compare A B`: paired deltas over shared (task, seed) items."""
import pytest

from mltb_core.analysis.compare_runs import compare_runs, render_comparison
from mltb_core.analysis.records import TrialRecord
from mltb_core.cli import main as cli_main

from test_reports import make_run


def rec(planner, seed, valid, percentile=None, outcome=None, task="spaceship-titanic", normalized=None):
    return TrialRecord(task=task, planner=planner, model="m", trial=seed, seed=seed, config_hash="h",
                       outcome=outcome or ("valid" if valid else "planner_failure"), valid=valid,
                       percentile=percentile if valid else None, normalized=normalized if valid else None)


def test_paired_deltas_tests_and_left_out_items():
    a = [rec("react", s, s % 2 == 0, 50.0) for s in range(10)] + [rec("react", 10, True, 50.0)]
    b = [rec("mcts", s, True, 60.0 + s) for s in range(10)] + [rec("mcts", 11, True, 60.0),
                                                                rec("mcts", 0, False, outcome="infra_error")]
    b = [r for r in b if not (r.seed == 0 and r.outcome == "valid")]
    (c,) = compare_runs(a, b)
    assert (c.label_a, c.label_b) == ("react / m", "mcts / m")        # one arm each: compared
    assert c.infra_left_out == 1 and c.only_a == 1 and c.only_b == 1
    f = c.per_task["spaceship-titanic"]
    assert f.pairs == 9 and (f.valid_a, f.valid_b) == (4, 9)
    assert f.mcnemar_p == pytest.approx(2 * 0.5 ** 5)                 # 5 discordant, all one way
    # percentile: invalid A trials count 0, so deltas are 60+s-0 (odd s) and 10+s (even s)
    assert f.deltas["percentile"] == [61.0 + s - 1 if s % 2 else 10.0 + s for s in range(1, 10)]
    assert f.sign_p["percentile"] == pytest.approx(2 * 0.5 ** 9)       # 9 of 9 deltas positive: exact sign test
    # Holm over the row's three tests (McNemar 0.0625, percentile sign 0.0039, and the stage's sign test: a valid
    # trial counts as stage 10, so the 5 trials that became valid moved up; no normalized score to test)
    assert "normalized" not in f.holm_p and f.sign_p["stage"] == pytest.approx(2 * 0.5 ** 5)
    assert f.holm_p["percentile"] == pytest.approx(3 * 2 * 0.5 ** 9) and f.holm_p["validity"] == pytest.approx(0.125)
    ci = f.median_delta["percentile"]
    assert ci.low <= ci.estimate <= ci.high
    assert f.validity_delta.estimate == pytest.approx(5 / 9)
    # one task: the combined row has an estimate, but no interval and no test can come from one unit
    assert c.overall.change["validity"].estimate == pytest.approx(5 / 9) and not c.overall.change["validity"].has_interval
    assert c.overall.p_value["validity"] == 1.0
    assert "all tasks" in render_comparison([c])


def test_items_are_never_pooled_across_tasks():
    # the case: 2 tasks x 4 seeds, B better on every item; each task alone gives sign-test p = 0.125,
    # pooled items gave p = 0.008; tasks as the units cannot show anything with 2 of them
    a = [rec("react", s, True, 40.0, task=t, normalized=0.4) for t in ("spaceship-titanic", "playground-series-s4e1")
         for s in range(4)]
    b = [rec("react", s, True, 50.0 + s, task=t, normalized=0.5 + s / 100)
         for t in ("spaceship-titanic", "playground-series-s4e1") for s in range(4)]
    (c,) = compare_runs(a, b)
    assert set(c.per_task) == {"spaceship-titanic", "playground-series-s4e1"}
    assert all(f.sign_p["normalized"] == pytest.approx(0.125) for f in c.per_task.values())
    assert c.overall.tasks["normalized"] == 2 and c.overall.p_value["normalized"] == 1.0   # 0.5, Holm over 2
    assert c.overall.change["normalized"].estimate == pytest.approx(0.115)
    assert all(not f.median_delta["normalized"].has_interval for f in c.per_task.values())  # 4 pairs < 6
    text = render_comparison([c])
    assert "(n=4 < 6)" in text and "k=2" in text


def test_the_stage_reached_is_compared_when_no_trial_is_valid():
    # a small model: no valid trial on either side, so validity and scores cannot move; B reached further on
    # 7 of 8 seeds, one tie. The stage is ordinal: the sign test reads 7 ups of 7 (ties dropped)
    def failed(planner, seed, stage, task="spaceship-titanic"):
        r = rec(planner, seed, False, task=task)
        r.stage_reached = stage
        return r

    a = [failed("mcts_shaped", s, 5) for s in range(8)]
    b = [failed("mcts_shaped", s, 5 if s == 0 else 8 + s % 2) for s in range(8)]
    (c,) = compare_runs(a, b)
    f = c.per_task["spaceship-titanic"]
    assert f.deltas["stage"] == [0.0, 4.0, 3.0, 4.0, 3.0, 4.0, 3.0, 4.0]
    assert f.sign_p["stage"] == pytest.approx(2 * 0.5 ** 7) and f.mcnemar_p is None
    assert f.median_delta["stage"].estimate == 3.5 and f.median_delta["stage"].has_interval
    assert f.holm_p["stage"] == pytest.approx(2 * 0.5 ** 7)   # the family's only test: the others have no non-zero delta
    assert not f.unchanged
    text = render_comparison([c])
    assert "median Δ stage reached" in text and "3.5 [" in text and "Stage reached (0-10" in text
    # two tasks: the combined row is the mean of per-task median changes, tasks as the units
    a += [failed("mcts_shaped", s, 9, task="playground-series-s3e1") for s in range(8)]
    b += [failed("mcts_shaped", s, 8, task="playground-series-s3e1") for s in range(8)]
    (c,) = compare_runs(a, b)
    assert c.overall.change["stage"].estimate == pytest.approx((3.5 - 1) / 2) and c.overall.tasks["stage"] == 2


def test_identical_runs_show_no_difference():
    a = [rec("react", s, True, 40.0 + s) for s in range(8)]
    (c,) = compare_runs(a, a)
    f = c.per_task["spaceship-titanic"]
    assert f.sign_p["percentile"] == 1.0 and f.mcnemar_p is None and f.median_delta["percentile"].estimate == 0
    assert f.unchanged and "unchanged: every pair identical" in render_comparison([c])


def test_nothing_to_pair_is_said():
    a = [rec("react", 0, True, 1.0), rec("lats", 0, True, 1.0)]
    b = [rec("mcts", 0, True, 1.0), rec("x", 0, True, 1.0)]
    assert compare_runs(a, b) == [] and "no arm to compare" in render_comparison([])


def test_cli_compare_writes_html_under_run_a(tmp_path, capsys):
    make_run(tmp_path / "a", "react")
    make_run(tmp_path / "b", "react")
    assert cli_main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    out = tmp_path / "a" / "report" / "compare-b.html"
    assert "<svg" in out.read_text() and "sign test" in out.read_text()
    assert "A = react / sim" in capsys.readouterr().out


def test_a_run_with_two_configurations_of_a_planner_is_refused_not_guessed(tmp_path, capsys):
    # one had silently replaced the other: "0/6 -> 6/6" from a run whose matching configuration was 6/6 too
    a = [rec("react", s, True, 50.0) for s in range(3)]
    a += [TrialRecord(**{**r.to_dict(), "config_hash": "other", "valid": False, "outcome": "planner_failure"})
          for r in a]
    with pytest.raises(ValueError, match="react / m: h, other"):
        compare_runs(a, a[:3])
    make_run(tmp_path / "a", "react")
    make_run(tmp_path / "a", "react", config_hash="def")
    make_run(tmp_path / "b", "react")
    assert cli_main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 2
    assert "several configurations" in capsys.readouterr().err


def test_a_valid_trial_counts_as_the_last_stage_in_the_stage_change():
    # a valid submission written without passing every shaped stage still finished: it is not behind stage 9
    a = [rec("react", s, False) for s in range(6)]
    for r in a:
        r.stage_reached = 9
    b = [rec("react", s, True, 50.0) for s in range(6)]
    for r in b:
        r.stage_reached = 3
    (c,) = compare_runs(a, b)
    assert c.per_task["spaceship-titanic"].deltas["stage"] == [1.0] * 6


def test_the_markdown_comparison_escapes_what_records_hold(tmp_path):
    from mltb_core.analysis.reports import compare_main

    make_run(tmp_path / "a", "react")
    make_run(tmp_path / "b", "react")
    from mltb_core.analysis.resultsfile import append_records
    from mltb_core.analysis.runstore import RunStore

    records = RunStore(tmp_path / "b").read()
    for r in records:
        r.machine = {"cpu": "<img src=x onerror=alert(1)>\n\n# Injected", "cores": 2}
    (tmp_path / "b" / "results.jsonl").unlink()
    append_records(tmp_path / "b" / "results.jsonl", records)
    out = compare_main(tmp_path / "a", tmp_path / "b", markdown=tmp_path / "cmp.md", command="mltb compare a b")
    text = out.read_text()
    assert "WARNING" in text and "<img" not in text and "\n# Injected" not in text


def test_cli_compare_markdown_is_the_published_form(tmp_path, capsys):
    make_run(tmp_path / "a", "react")
    make_run(tmp_path / "b", "react", outcome="planner_failure")
    out = tmp_path / "cmp.md"
    argv = ["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--markdown", str(out)]
    assert cli_main(argv) == 0
    text = out.read_text()
    assert text.startswith("# Run comparison: a → b") and f"Written by `mltb compare {tmp_path / 'a'}" in text
    assert "| spaceship-titanic " in text and "median Δ stage reached" in text and "2/3 → 0/3" in text
    assert "runs\n\n| task" in text      # the table apart from the line above it, so Markdown renders it
    assert not (tmp_path / "a" / "report").exists()      # instead of the HTML page
    assert cli_main(argv) == 0 and out.read_text() == text     # the records alone decide it
    assert cli_main(argv + ["--out", str(tmp_path / "x.html")]) == 2
    assert "give one of --out, --markdown" in capsys.readouterr().err


def test_compare_and_the_gate_report_the_same_change():
    from mltb_core.analysis.compare import BASELINE_VERSION, cell_figures, compare_to_baseline

    a = [rec("react", s, s % 3 != 0, 40.0 + s, normalized=0.3 + s / 50) for s in range(9)]
    b = [rec("react", s, s % 4 != 0, 45.0 - s, normalized=0.2 + s / 30) for s in range(9)]
    (c,) = compare_runs(a, b)
    gate = compare_to_baseline({"version": BASELINE_VERSION, "cells": cell_figures(a)}, b)
    for metric in ("normalized", "percentile"):
        cell = next(d for d in gate.deltas if d.metric == metric and not d.combined)
        assert cell.change == c.per_task["spaceship-titanic"].median_delta[metric]


def _stamp(run_dir, code, **fields):
    """Set the code every record of ``run_dir`` says ran it (as TrialRecord.for_config stamps code_version()), and
    other ``fields``."""
    from mltb_core.analysis.resultsfile import append_records
    from mltb_core.analysis.runstore import RunStore

    records = RunStore(run_dir).read()
    for r in records:
        r.code = code
        for name, value in fields.items():
            setattr(r, name, value)
    (run_dir / "results.jsonl").unlink()
    append_records(run_dir / "results.jsonl", records)


DIRTY = "mltb 0.1.0 @ 1a2b3c4d5e6f (with uncommitted changes 0c1d2e3f)"
CLEAN = "mltb 0.1.0 @ 1a2b3c4d5e6f"


def test_compare_names_uncommitted_changes_and_the_outcomes_they_changed(tmp_path, capsys):
    """Issue 59: a run on uncommitted changes, every task 2/2 → 0/2, against one on a clean commit: `mltb compare`
    said the runs "differ in nothing" and both columns read "react / sim"."""
    tasks = ("spaceship-titanic", "playground-series-s3e1", "playground-series-s4e1")
    for task in tasks:
        make_run(tmp_path / "a", "react", trials=2, task=task, config={"max_llm_calls": 40})
        make_run(tmp_path / "b", "react", trials=2, task=task, config={"max_llm_calls": 40}, outcome="planner_failure")
    _stamp(tmp_path / "a", CLEAN, valid=True, outcome="valid", stage_reached=10, percentile=50.0)
    _stamp(tmp_path / "b", DIRTY)
    assert cli_main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert f"a → b: they differ in code: {CLEAN} (6) → {DIRTY} (6) (the same recorded configuration)" in out
    assert "outcomes: react / sim: valid 6/6 → 0/6 over 6 pair(s); 3 of 3 task(s) changed" in out
    assert f"A = react / sim on {CLEAN} (6)  vs  B = react / sim on {DIRTY} (6)" in out
    page = (tmp_path / "a" / "report" / "compare-b.html").read_text()
    assert "with uncommitted changes 0c1d2e3f" in page and "Outcomes: react / sim: valid 6/6 → 0/6" in page
    # the same code on both sides, a change of settings: only the settings are named, and the outcomes
    _stamp(tmp_path / "b", CLEAN)
    assert cli_main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert "a → b: they differ in nothing: both ran the same recorded configuration and code" in out
    assert "A = react / sim  vs  B = react / sim:" in out and "valid 6/6 → 0/6" in out


def test_code_that_cannot_be_told_the_same_is_named():
    from mltb_core.analysis.provenance import code_difference, code_note

    a = [rec("react", s, True, 50.0) for s in range(2)]
    b = [rec("react", s, True, 50.0) for s in range(2)]
    assert code_difference(a, b) is None and code_note(a) is None        # neither records its code: nothing to tell
    for r in a + b:
        r.code = DIRTY
    assert code_difference(a, b) is None                                   # the same changes, by their digest
    assert code_note(a) == f"The trials ran on uncommitted changes: {DIRTY} (2)."
    for r in b:
        r.code = "mltb 0.1.0 @ 1a2b3c4d5e6f (with uncommitted changes)"   # stamped before the digest: may differ
    assert code_difference(a, a + b) is not None and code_difference(b, b) is not None
    b[0].code = None
    assert code_difference(a, a) is None and "not recorded (1)" in code_difference(a, b)
    assert code_note(a + b).startswith("The trials ran on different code:")


def test_the_report_legend_names_code_that_differs(tmp_path):
    from mltb_core.analysis.reports import build_report

    make_run(tmp_path / "a", "react")
    _stamp(tmp_path / "a", DIRTY)
    index = build_report([tmp_path / "a"], tmp_path / "out")["index"].read_text()
    assert f"The trials ran on uncommitted changes: {DIRTY} (3)." in index
