"""mltb report's sections (mltb_core/analysis/sections.py, findings.py): the stop-kind table, the stage
comparison with its test, the trajectory findings, the machine; and the registry plug-ins extend."""
from __future__ import annotations

import json

import pytest

from mltb_core.analysis.records import Outcome, TrialRecord
from mltb_core.bench.stops import StopKind
from mltb_core.analysis.sections import SECTIONS, Section, SectionContext, pick_sections, register_section
from mltb_core.analysis.tables import Table


def build(name: str, records: list) -> list:
    return SECTIONS[name].build(SectionContext(records=records))


def test_where_trials_ended_counts_stop_kinds_and_names_the_stage_not_passed():
    def record(trial, stage, kind, valid=False, outcome=Outcome.PLANNER_FAILURE, reason="x"):
        return TrialRecord(task="spaceship-titanic", planner="react", model="local", trial=trial, seed=trial,
                           config_hash="h", outcome=outcome, valid=valid, stage_reached=stage, stop_kind=kind,
                           stop_reason=reason)

    recs = [record(0, 1, StopKind.CONTEXT_FULL, reason="the conversation outgrew ... (16754 tokens)"),
            record(1, 1, StopKind.CONTEXT_FULL, reason="the conversation outgrew ... (17117 tokens)"),
            record(2, 1, StopKind.MODEL_ENDED_TURN, reason="the model ended its turn without a valid submission"),
            record(3, 10, StopKind.VALID_SUBMISSION, valid=True, outcome=Outcome.VALID),
            record(4, 0, StopKind.ERROR, outcome=Outcome.INFRA_ERROR)]
    (unmeasured,) = build("stop_kinds", recs)        # records from before mltb measured the load: no column
    assert len(unmeasured.headers) == 6 and not any("load" in note for note in unmeasured.notes)
    recs[0].load_per_core, recs[1].load_per_core, recs[3].load_per_core = 1.9, 1.1, 0.98
    (table,) = build("stop_kinds", recs)
    # the machine's load beside each stop (median, max over the row's trials), so a reader can tell a time
    # limit the machine's load brought on; records from before mltb measured it say so
    assert [row[6] for row in table.rows] == ["0.98, 0.98", "1.50, 1.90", "not recorded"]
    assert "a stop by the time limit (--max-seconds) may be the machine's" in table.notes[-1]
    (seconds,) = build("seconds", recs)
    assert seconds.rows[0][-1] == "1.10, 1.90 (3 of 4)"      # one cell: 3 of its 4 counted trials measured
    rows = [row[2:6] for row in table.rows]
    assert rows[0] == ["1", "10 create_submission", "– (valid submission)", "valid_submission"]
    assert ["2", "1 train_data_loading", "2 test_data_loading", "context_full"] in rows   # alike stops: one row
    assert ["1", "1 train_data_loading", "2 test_data_loading", "model_ended_turn"] in rows   # not "valid"
    assert len(rows) == 3                                      # the infra error is not a counted trial
    assert "context_full: the conversation outgrew" in table.notes[0]


def test_stage_comparison_pairs_planners_by_task_and_trial_seed_and_tests_all_pairs():
    import scipy.stats as ss

    def record(task, planner, trial, stage, outcome=Outcome.PLANNER_FAILURE):
        return TrialRecord(task=task, planner=planner, model="local", trial=trial, seed=trial, config_hash="h",
                           outcome=outcome, valid=False, stage_reached=stage)

    stages = {"mcts_shaped": [9, 9, 9, 9, 9, 9], "react": [1, 1, 3, 1, 1, 1], "lats": [1, 3, 1, 2, 1, 1]}
    recs = [record(task, planner, trial, values[3 * t + trial])
            for planner, values in stages.items() for t, task in enumerate(("a", "b")) for trial in range(3)]
    recs += [record("a", "react", 3, 9),                                  # a block without the other planners
             record("a", "lats", 3, 0, outcome=Outcome.INFRA_ERROR)]      # not a counted trial
    table, text = build("stage_comparison", recs)
    assert [row[0] for row in table.rows] == ["react", "lats", "mcts_shaped"]   # the registry's order
    # the rate's interval takes the tasks as the units (react: 1/4 on a, 0/3 on b), not 7 independent trials
    from mltb_core.analysis.stats import clustered_rate_interval

    react = clustered_rate_interval([(1, 4), (0, 3)])
    assert table.rows[0] == ["react", "7", "1 (1–9)", "1/7 [0.00, 1.00]"]     # 2 tasks: wide, ends outward
    assert react.high > 0.58                      # wider than the pooled Clopper-Pearson [0.00, 0.58]
    # a rate of 1: the 2 tasks are the units (Clopper-Pearson 2/2: 0.158, rounded down), not the 6 trials [0.54, 1]
    assert table.rows[2] == ["mcts_shaped", "6", "9 (9–9)", "6/6 [0.15, 1.00]"]
    expected = ss.friedmanchisquare(*[stages[p] for p in ("lats", "mcts_shaped", "react")])
    assert "Friedman test over 6 blocks (task, trial seed) × 3 planners" in text
    assert f"χ² = {expected.statistic:.2f}, p = {expected.pvalue:.3g}" in text
    assert "Blocks: 6 of the 7 (task, trial) pairs" in text
    assert "Mean ranks (1 = best): mcts_shaped 1.00" in text


def test_two_configurations_of_a_planner_in_one_report_stay_apart_in_every_section():
    # a feedback ablation merged with the main run: mcts_shaped under two config hashes on the same items.
    # Pooled, its trials read 9 and 3 as one planner, and the stage test's block held one of them only
    def record(task, planner, trial, stage, config="main"):
        return TrialRecord(task=task, planner=planner, model="local", trial=trial, seed=trial, config_hash=config,
                           outcome=Outcome.PLANNER_FAILURE, stage_reached=stage, wall_seconds=60.0 * stage)

    recs = [record(task, "react", trial, 1) for task in ("a", "b") for trial in range(3)]
    recs += [record(task, "mcts_shaped", trial, 9) for task in ("a", "b") for trial in range(3)]
    recs += [record(task, "mcts_shaped", trial, 3, config="ablation") for task in ("a", "b") for trial in range(3)]
    table, text = build("stage_comparison", recs)
    assert [row[:3] for row in table.rows] == [["react", "6", "1 (1–1)"], ["mcts_shaped@ablati", "6", "3 (3–3)"],
                                               ["mcts_shaped@main", "6", "9 (9–9)"]]
    assert "× 3 planners" in text and "mcts_shaped@main 1.00" in text
    (seconds,) = build("seconds", recs)
    assert [(row[0], row[1], row[3]) for row in seconds.rows if row[1] == "a"] == [
        ("react", "a", "60 (60–60)"), ("mcts_shaped@ablati", "a", "180 (180–180)"),
        ("mcts_shaped@main", "a", "540 (540–540)")]
    (stops,) = build("stop_kinds", recs)
    assert {row[0] for row in stops.rows} == {"react", "mcts_shaped@ablati", "mcts_shaped@main"}
    # two models of one planner stay apart as well, named with their model
    other = [record(task, "react", trial, 2) for task in ("a", "b") for trial in range(3)]
    for r in other:
        r.model = "sim"
    table, _ = build("stage_comparison", recs[:6] + other)
    assert [row[0] for row in table.rows] == ["react · local", "react · sim"]
    # a configuration with infra errors only is still told apart, as the tables tell it: same labels everywhere
    infra = record("a", "react", 0, 0, config="gone")
    infra.outcome = Outcome.INFRA_ERROR
    table, _ = build("stage_comparison", recs + [infra])
    assert [row[0] for row in table.rows] == ["react@main", "mcts_shaped@ablati", "mcts_shaped@main"]
    # hashes alike in their first 6 characters get labels long enough to differ
    from mltb_core.analysis.tables import variant_labels

    twins = [record("a", "mcts_shaped", 0, 9, config="abcdef111111"), record("a", "mcts_shaped", 0, 3,
                                                                            config="abcdef222222")]
    assert sorted(variant_labels(twins).values()) == ["mcts_shaped@abcdef1", "mcts_shaped@abcdef2"]


def test_trajectory_findings_count_per_configuration(tmp_path):
    # the feedback ablation's variable: shown in one configuration, withheld in the other, never "half shown"
    recs = []
    for config, shown in (("aaaaaa000000", True), ("bbbbbb000000", False)):
        path = tmp_path / f"{config}.jsonl"
        path.write_text("".join(json.dumps(s) + "\n" for s in [{"step_type": "trial_start", "config": {}}] + [
            {"step_type": "reward_feedback", "shown_to_model": shown}] * 10))
        recs.append(TrialRecord(task="spaceship-titanic", planner="mcts_shaped", model="local", trial=0, seed=0,
                                config_hash=config, outcome=Outcome.PLANNER_FAILURE, stage_reached=3,
                                trajectory=str(path)))
    (text,) = build("trajectories", recs)
    assert "per planner: mcts_shaped@aaaaaa: 10 of 10; mcts_shaped@bbbbbb: 0 of 10." in text
    # two models: the labels name them, and a model name from a records file is Markdown-escaped prose
    recs[1].model, recs[1].config_hash = "evil](http://x) <b>|\n# HEAD", "aaaaaa000000"
    (text,) = build("trajectories", recs)
    assert "<b>" not in text and "\n# HEAD" not in text and "mcts_shaped · local: 10 of 10" in text
    table, text = build("stage_comparison", recs)
    rendered = table.render("github")     # cells hold the label as it is; the Markdown escapes it
    assert "<b>" not in rendered and len(rendered.splitlines()) == len(table.rows) + 2 and "<b>" not in text
    assert "mcts_shaped · evil](http://x) <b>|\n# HEAD" in [row[0] for row in table.rows]


def test_the_sensitivity_section_sets_each_model_of_the_sensitivity_run_side_by_side():
    def record(task, planner, model, trial, stage):
        return TrialRecord(task=task, planner=planner, model=model, trial=trial, seed=trial, config_hash="h",
                           outcome=Outcome.VALID if stage == 10 else Outcome.PLANNER_FAILURE, valid=stage == 10,
                           stage_reached=stage, normalized=0.5 if stage == 10 else None, synthetic=True)

    stages = {"sim:0.5": {"react": 3, "lats": 10, "mcts_shaped": 9},            # the default favours lats
              "sim:0.5:neutral": {"react": 3, "lats": 2, "mcts_shaped": 9}}
    recs = [record(task, planner, model, trial, stage) for model, row in stages.items()
            for planner, stage in row.items() for task in ("a", "b") for trial in range(2)]
    recs.append(record("c", "react", "sim:0.5", 0, 10))      # an item only one model holds: left out
    assert build("sensitivity", []) == []                    # no --sensitivity: no section
    table, text = SECTIONS["sensitivity"].build(SectionContext(records=[], sensitivity=recs))
    assert table.headers[1] == "sim:0.5: valid/trials" and table.headers[4] == "sim:0.5:neutral: valid/trials"
    assert [row[0] for row in table.rows] == ["lats", "mcts_shaped", "react"]            # the default's order
    assert table.rows[0][1:] == ["4/4", "0.50", "1.00 (1)", "0/4", "0.00", "3.00 (3)"]    # lats: first, then last
    assert table.rows[2][1:4] == ["0/4", "0.00", "3.00 (3)"]
    assert "on the same 4 (task, trial) items" in table.notes[0]
    assert any(n.startswith("sim's neutral setting") for n in table.notes)
    assert any(n.startswith("sim's rates that can order planners") for n in table.notes)
    assert "**sim:0.5.** Friedman test over 4 blocks" in text and "**sim:0.5:neutral.** Friedman" in text
    # a configuration one model alone holds (an infra error here) labels the planner alike under every model
    extra = record("a", "react", "sim:0.5", 9, 0)
    extra.config_hash, extra.outcome = "h2", Outcome.INFRA_ERROR
    table, _ = SECTIONS["sensitivity"].build(SectionContext(records=[], sensitivity=recs + [extra]))
    assert sorted(row[0] for row in table.rows) == ["lats", "mcts_shaped", "react@h"]
    # a model name from a records file is escaped in the headers and notes too
    for r in recs:
        r.model = r.model.replace("sim:0.5", "evil <b>|\n# HEAD $x$")
    table, _ = SECTIONS["sensitivity"].build(SectionContext(records=[], sensitivity=recs))
    shown = table.render("github").splitlines()[0] + " ".join(table.notes_for("github"))
    assert "<b>" not in shown and "\n#" not in shown and " $x$" not in shown and "evil \\<b\\>\\|" in shown
    one = SECTIONS["sensitivity"].build(SectionContext(records=[], sensitivity=recs[:3]))
    assert one == ["The sensitivity run holds 1 model(s); it needs two to compare."]


def test_trajectory_findings_count_what_the_trials_did_and_name_a_missing_trajectory(tmp_path):
    from mltb_core.llm.base import cut_off_error

    def call(tool, bindings=None, kwargs=None):
        return {"step_type": "tool_execution_initiation",
                "tools_to_execute": [{"tool_name": tool, "tool_args": {"bindings": bindings or {},
                                                                      "func_kwargs": kwargs or {}}}]}

    def propose(error=None):
        return {"step_type": "llm_call", "purpose": "propose", "candidates": [{"text": "{}", "error": error}]}

    def expansion(*calls):   # k candidates at once; None: a reply without a call (parse error "no call")
        return {"step_type": "llm_call", "purpose": "propose", "n": len(calls),
                "candidates": [{"text": "x", "tool_calls": [c] if c else [], "error": None if c else "no call"}
                               for c in calls]}

    read = {"tool_name": "read_data", "tool_args": {"bindings": {}, "func_kwargs": {"filepath": "test.csv"},
                                                    "output": "test"}}
    start = {"step_type": "trial_start", "config": {"max_llm_calls": 60}}
    trials = {
        "react": [start, {"step_type": "reward_feedback", "shown_to_model": False},
                  propose(), call("read_data", kwargs={"filepath": "train.csv"}), propose(),
                  call("read_data", kwargs={"filepath": "train.csv"}), propose(cut_off_error(512)),
                  call("concatenate_train_test", {"train_df": "train", "test_df": "train"})],
        "lats": [start, propose(), call("read_data", kwargs={"filepath": "test.csv"}),
                 {"step_type": "llm_call", "purpose": "evaluate", "usage": {"completion_tokens": 512}},
                 {"step_type": "judge_score", "scored": False},
                 {"step_type": "llm_call", "purpose": "evaluate", "usage": {"completion_tokens": 40}},
                 {"step_type": "judge_score", "scored": True}],
        "mcts_shaped": [start, propose(), call("predict_target"), call("save_dataframe_to_csv", {"df": "pred|<b>"}),
                        expansion(read, read, dict(read, tool_args={**read["tool_args"], "output": "t2"})),
                        expansion(read, None, None),
                        {"step_type": "reward_feedback", "shown_to_model": True},
                        {"step_type": "reward_feedback", "shown_to_model": True}],
        "hierarchical_mcts": [start, propose(), call("predict_target")],     # stage 9, predicted, never saved
    }
    recs = []
    for planner, steps in trials.items():
        path = tmp_path / f"{planner}.jsonl"
        path.write_text("".join(json.dumps(s) + "\n" for s in steps))
        recs.append(TrialRecord(task="spaceship-titanic", planner=planner, model="local", trial=0, seed=0,
                                config_hash="h", outcome=Outcome.PLANNER_FAILURE, valid=False,
                                stage_reached=9 if "mcts" in planner else 1, trajectory=str(path)))
    recs.append(TrialRecord(task="spaceship-titanic", planner="react", model="local", trial=1, seed=1,
                            config_hash="h", outcome=Outcome.PLANNER_FAILURE, valid=False, stage_reached=1,
                            trajectory=str(tmp_path / "gone.jsonl")))
    (text,) = build("trajectories", recs)
    assert "trajectories of 4 of the 5 counted trials" in text and "react on spaceship-titanic, trial 1" in text
    # one of the two stage-9 trials saved a frame: the names it saved are that trial's, not both trials'
    assert ("2 trial(s) fitted a model (stage 9) without a valid submission; 2 of them predicted with "
            "`predict_target`, 0 turned predictions into a frame with `convert_to_dataframe`, 1 called "
            "`save_dataframe_to_csv` (saving pred\\|\\<b\\>: names the model chose) and 1 never did.") in text
    assert "read in 1 of 2 evaluations (1 trials)" in text and "same 60-call budget: 2 of each LATS" in text
    assert "spaceship-titanic trial 0: 1 of 3, prompt +" in text            # ReAct read train.csv twice
    assert "2 trial(s) ended at stage 1" in text and "1 of them never called `read_data` on the test" in text
    assert "1 bound the same frame to both arguments" in text
    assert "react: 1 of 3; lats: 1 of 3; mcts_shaped: 0 of 7" in text         # the judge's 512 counts too
    assert "pred\\|\\<b\\>" in text                                           # a model-chosen name, escaped
    # the same call twice in one expansion is one repeat (another output name is another call), as are two
    # replies without a call alike; the trials that asked for one candidate at a time are not listed
    assert "per trial that asked for several candidates at once: mcts_shaped on spaceship-titanic trial 0: " \
           "2 of 6 (33 %)." in text


def test_the_machine_section_warns_when_figures_mix_machines():
    base = dict(task="spaceship-titanic", planner="react", model="sim", trial=0, seed=0, config_hash="h",
                outcome=Outcome.PLANNER_FAILURE)
    one = {"cpu": "A", "cores": 2, "memory_gib": 8.0, "system": "Linux", "python": "3.11.7", "llama_cpp": None}
    (same,) = build("machine", [TrialRecord(**base, machine=one), TrialRecord(**{**base, "trial": 1}, machine=one)])
    assert same.rows == [["A, 2 cores, 8.0 GiB", "2", "Linux", "3.11.7", "–"]] and not same.notes
    (mixed,) = build("machine", [TrialRecord(**base, machine=one), TrialRecord(**{**base, "trial": 1})])
    assert mixed.notes and mixed.notes[0].startswith("WARNING: these figures mix 2 machines")


def test_a_plugin_section_is_added_or_replaces_a_builtin_by_name():
    with SECTIONS.scoped():
        register_section(Section("host", "Host", lambda ctx: ["- ran on the CI host"]))
        assert pick_sections(["host"])[0].title == "Host" and "host" in [s.name for s in pick_sections(None)]
        register_section(Section("machine", "My machine", lambda ctx: [Table("m", "m", ["a"], [["1"]])],
                                 overrides=True))
        assert SECTIONS["machine"].title == "My machine"
        with pytest.raises(Exception, match="machine"):
            register_section(Section("machine", "Clash", lambda ctx: []))
    assert SECTIONS["machine"].title == "Machine" and "host" not in SECTIONS
    with pytest.raises(ValueError, match="unknown report section"):
        pick_sections(["nope"])


def test_a_sensitivity_run_is_read_by_the_markdown_report_only(tmp_path, capsys):
    from mltb_core import cli

    assert cli.main(["report", str(tmp_path), "--sensitivity", str(tmp_path)]) == 2
    assert "--sensitivity is read by the Markdown report only" in capsys.readouterr().err
    assert cli.main(["report", str(tmp_path), "--markdown", str(tmp_path / "r.md"),
                     "--sensitivity", str(tmp_path / "missing")]) == 2
    assert "no such run directory" in capsys.readouterr().err
    assert cli.main(["report", str(tmp_path), "--expect-trials", "45"]) == 2
    assert "--expect-trials marks the Markdown report PARTIAL" in capsys.readouterr().err
