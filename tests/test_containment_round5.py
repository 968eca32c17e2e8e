"""Containment round 5, the run's own files: one malformed trajectory line, or a record holding an integer of
400 digits, made a whole run unreportable (``mltb report``, ``--markdown``, ``compare``, ``--resume``).
Trajectory events are now read at one boundary (mltb_core/stages/events.py) and records' integers have ranges
(analysis/records.py INT_RANGES): a bad line is reported and skipped, never the end of a report."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from mltb_core import cli
from mltb_core.analysis.reports import build_report, load_runs, trial_page_name
from mltb_core.analysis.records import INT_RANGES, TrialRecord, record_json
from mltb_core.analysis.resultsfile import read_records
from mltb_core.analysis.runstore import MAX_FILE_NAME_BYTES
from mltb_core.analysis.sections import read_steps
from mltb_core.analysis.treeview import tree_from_steps
from mltb_core.stages.events import EVENTS, TRAJECTORY_FORMAT, check_event, parse_events, read_events
from mltb_core.stages.specs import STAGE_COUNT
from mltb_core.planners import agent_k
from mltb_core.planners.trajectory import read_trajectory, tool_calls_from_trajectory
from test_reports import make_run

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]

# Each break the round found: a line that ended `mltb report` with a TypeError/KeyError/AttributeError.
BREAKS = {
    "a tree entry's parent is a list": {"step_type": "search_summary", "best_path": [1],
                                        "tree": [{"id": 1, "parent": [0]}]},
    "parent_id an object": {"step_type": "tool_execution_initiation", "node_id": 7, "parent_id": {"a": 1},
                            "tools_to_execute": [{"tool_name": "read_data", "tool_args": {}}]},
    "a subtask_start stage is a list": {"step_type": "subtask_start", "stage": [1], "name": "x"},
    "tool_results: 5": {"step_type": "tool_execution_completion", "node_id": 1, "tool_results": 5},
    "candidates: ['x']": {"step_type": "llm_call", "node_id": 1, "purpose": "propose", "candidates": ["x"]},
    "best_path: [[1]]": {"step_type": "search_summary", "best_path": [[1]], "tree": []},
    "tools_to_execute: 'abc'": {"step_type": "tool_execution_initiation", "node_id": 8, "parent_id": 0,
                                "tools_to_execute": "abc"},
    "a started call without tool_name": {"step_type": "tool_execution_initiation", "node_id": 9, "parent_id": 0,
                                         "tools_to_execute": [{"tool_args": {}}]},
    "usage: [1]": {"step_type": "llm_call", "node_id": 1, "purpose": "propose", "usage": [1]},
    # more of the same kind: each a field a reader relies on
    "a binding that is a list": {"step_type": "tool_execution_initiation", "node_id": 10, "parent_id": 0,
                                 "tools_to_execute": [{"tool_name": "save_dataframe_to_csv",
                                                       "tool_args": {"bindings": {"df": ["a"]}}}]},
    "a node id of 400 digits": {"step_type": "tool_execution_initiation", "node_id": 10 ** 400, "parent_id": 0,
                                "tools_to_execute": [{"tool_name": "read_data"}]},
    "a reward stage of 99": {"step_type": "reward_feedback", "node_id": 1, "stage": 99, "passed": [1]},
    "a candidate error that is a number": {"step_type": "llm_call", "node_id": 1, "purpose": "propose",
                                           "candidates": [{"text": "", "error": 5}]},
    "a trial_start config that is a list": {"step_type": "trial_start", "config": [1]},
    "prompt tokens of 1e300": {"step_type": "llm_call", "node_id": 1, "purpose": "propose",
                               "usage": {"prompt_tokens": 1e300}},
    "a step_type that is a list": {"step_type": ["llm_call"]},
    "not an object": [1, 2],
}


def damaged_run(tmp_path: Path, line: object) -> tuple[Path, list[TrialRecord]]:
    """A three-trial run whose every trajectory ends in ``line``, after its nine good lines (last, so no
    good line of the same node overwrites what it set)."""
    run = tmp_path / "run"
    make_run(run, "react", trials=3)   # ReAct: the findings read its calls' usage; trial 0 fitted, not valid
    records = [replace(r, stage_reached=9) if not r.valid else r for r in read_records(run / "results.jsonl")]
    (run / "results.jsonl").write_text("".join(record_json(r) + "\n" for r in records))
    for record in records:
        path = run / record.trajectory
        lines = path.read_text().splitlines()
        path.write_text("\n".join(lines + [json.dumps(line)]) + "\n")
    return run, records


@pytest.mark.parametrize("damage", list(BREAKS))
def test_one_malformed_trajectory_line_is_reported_and_skipped(damage, tmp_path, capsys):
    run, records = damaged_run(tmp_path, BREAKS[damage])
    assert cli.main(["report", str(run), "--out", str(tmp_path / "html")]) == 0, capsys.readouterr().err
    for record in records:   # every trial's page is written, and says what was skipped
        page = (tmp_path / "html" / "trials" / trial_page_name(record)).read_text()
        assert "1 trajectory line(s) were malformed and are not shown (line 10: " in page
        assert "read_data" in page   # the good lines still show
    markdown = tmp_path / "report.md"
    assert cli.main(["report", str(run), "--markdown", str(markdown)]) == 0, capsys.readouterr().err
    assert "3 malformed trajectory line(s) were skipped" in markdown.read_text()
    assert cli.main(["compare", str(run), str(run), "--out", str(tmp_path / "cmp")]) == 0, capsys.readouterr().err
    steps, note = read_steps(load_runs([run])[0])
    assert len(steps) == 9 and note.startswith("1 trajectory line(s)")   # the 9 good lines of steps_for
    tree_from_steps(steps)


@pytest.mark.parametrize("damage", list(BREAKS))
def test_each_break_is_refused_at_the_boundary(damage):
    assert check_event(BREAKS[damage]) is not None


def test_the_declaration_covers_every_kind_the_writers_write():
    from test_trajectory_format import written_kinds

    written, bare = written_kinds()
    assert not bare, f"kinds written as bare strings, not EventKind members: {bare}"
    assert len(written) >= 15 and written <= set(EVENTS), written - set(EVENTS)


def test_every_published_trajectory_reads_without_a_skipped_line():
    """The declaration admits every trajectory mltb wrote (the published reports'), so they read as before."""
    paths = [p for p in (ROOT / "reports").rglob("*.jsonl") if "trajectories" in p.parts]
    assert len(paths) > 100
    for path in paths:
        read = read_events(path)
        assert read.events and not read.malformed, (path, read.malformed[:3])


def test_a_trajectory_of_a_newer_format_is_refused_with_a_reason():
    newer = {"step_type": "trial_start", "format_version": TRAJECTORY_FORMAT + 1, "config": {}}
    read = parse_events([(1, newer, None), (2, {"step_type": "llm_call"}, None)])
    assert read.events == [] and "written by a newer mltb" in read.malformed[0][1]
    same = parse_events([(1, {**newer, "format_version": TRAJECTORY_FORMAT}, None)])
    assert len(same.events) == 1 and not same.malformed


def test_replay_and_agent_k_read_the_same_boundary(tmp_path):
    run, records = damaged_run(tmp_path, BREAKS["a started call without tool_name"])
    path = run / records[0].trajectory
    with pytest.raises(ValueError, match=r":10: not a trajectory event: the event.tools_to_execute\[0\] lacks tool_name"):
        list(read_trajectory(path))
    with pytest.raises(ValueError):
        tool_calls_from_trajectory(path)
    before = agent_k.memory_notes(path)
    agent_k.remember("spaceship-titanic", path, valid=True)    # skips the bad line, keeps the best path
    assert agent_k.memory_notes(path)[len(before):] == ["spaceship-titanic: read_data, fillna_with_median"]


# ---- records: integers with ranges --------------------------------------------------------------------------
HUGE = 10 ** 400     # under Python's digit limit: the line parses


@pytest.mark.parametrize("field, value", [("tokens_in", HUGE), ("llm_calls", HUGE), ("stage_reached", HUGE),
                                          ("trial", HUGE), ("stage_reached", STAGE_COUNT + 1), ("stage_reached", -1),
                                          ("tokens_out", -5), ("tree_nodes", HUGE), ("seed", 2 ** 64),
                                          ("row_seed", HUGE)],
                         ids=lambda v: "10**400" if v == HUGE else str(v))
def test_a_record_integer_out_of_range_is_a_bad_line_and_the_report_stands(field, value, tmp_path, capsys):
    run = tmp_path / "run"
    records = make_run(run, "react", trials=2)
    bad = {**records[0].to_dict(), field: value, "trial": value if field == "trial" else 7}
    with open(run / "results.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps(bad) + "\n")
    with pytest.warns(UserWarning, match=f"field '{field}' is"):
        assert len(list(read_records(run / "results.jsonl"))) == 2
    assert INT_RANGES[field].allows(records[0].to_dict()[field] or 0)
    with pytest.warns(UserWarning) as caught:
        assert cli.main(["report", str(run), "--out", str(tmp_path / "html")]) == 0, capsys.readouterr().err
        assert cli.main(["report", str(run), "--markdown", str(tmp_path / "r.md")]) == 0
    assert any("results.jsonl:3" in str(w.message) and field in str(w.message) for w in caught)
    assert "Traceback" not in capsys.readouterr().err


def test_the_record_ranges_admit_every_published_record():
    paths = [p for p in (ROOT / "reports").rglob("results.jsonl")]
    assert paths
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            lines = [json.loads(line) for line in handle if line.strip()]
        assert len(list(read_records(path))) == len([r for r in lines if isinstance(r, dict) and "task" in r]), path


def test_no_file_name_made_from_a_record_outgrows_the_file_system(tmp_path, capsys):
    run = tmp_path / "run"
    long_model = "openai:" + "m" * 600
    records = make_run(run, "react", trials=1, model=long_model)
    record = records[0]
    assert len(trial_page_name(record).encode()) <= MAX_FILE_NAME_BYTES
    other = TrialRecord(**{**record.to_dict(), "model": long_model + "x"})
    assert trial_page_name(other) != trial_page_name(record)     # two long names stay apart
    with open(run / "results.jsonl", "a", encoding="utf-8") as handle:    # a trajectory path too long to stat
        handle.write(json.dumps({**record.to_dict(), "trial": 5, "trajectory": "t/" + "x" * 5000}) + "\n")
    paths = build_report([run], tmp_path / "html")
    assert (tmp_path / "html" / "trials" / trial_page_name(record)).is_file() and paths["index"].is_file()


def test_a_huge_integer_record_under_resume_ends_no_session(pytester, tmp_path):
    """pytest --resume over a record of 10**400 tokens: the line is skipped with file:line, the session
    finishes and writes its report (it ended in a raw traceback from pytest_sessionfinish)."""
    from test_plugin import COMMON, FAKE_CONFTEST, SUITE

    pytester.makepyfile(test_challenges=SUITE)
    pytester.makeconftest(FAKE_CONFTEST)
    run_dir = tmp_path / "run"
    first = pytester.runpytest_subprocess(*COMMON, "--planner=react", "--trials=2", f"--mltb-out={run_dir}")
    assert first.ret in (0, 1)
    results = run_dir / "results.jsonl"
    record = json.loads(results.read_text().splitlines()[0])
    with open(results, "a", encoding="utf-8") as handle:
        handle.write(json.dumps({**record, "tokens_in": HUGE, "llm_calls": HUGE}) + "\n")
    resumed = pytester.runpytest_subprocess(*COMMON, "--planner=react", "--trials=2", f"--mltb-out={run_dir}",
                                            "--resume")
    text = resumed.stdout.str() + resumed.stderr.str()
    assert resumed.ret in (0, 1), text[-3000:]
    assert "Traceback" not in text and "INTERNALERROR" not in text
    assert f"{results}:3: skipped, not a trial record" in text
