"""Typed, versioned trajectories (issue 60): the event kinds are declared once (``EventKind`` beside their
fields in mltb_core/stages/events.py) and named by every writer and reader; a new trajectory's first line
carries the format's version; the published trajectories (version 1, no version field) still read whole,
through the migrations; a newer format is refused with its reason."""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from mltb_core.analysis.findings import trajectory_findings
from mltb_core.analysis.reports import load_runs
from mltb_core.planners.trajectory import TrajectoryWriter, read_trajectory
from mltb_core.stages import events
from mltb_core.stages.events import (EVENTS, TRAJECTORY_FORMAT, EventKind, format_of, parse_events,
                                     read_events)

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = sorted(p for p in (ROOT / "reports").rglob("*.jsonl") if "trajectories" in p.parts)


def _first_object(path: Path) -> dict:
    """The first line of a published trajectory, parsed (where its format version is declared)."""
    return json.loads(path.read_text(encoding="utf-8").split("\n", 1)[0])


def _step_type_operand(node: ast.AST) -> bool:
    """``x.get("step_type")`` or ``x["step_type"]``."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value == "step_type"
    return isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and \
        node.slice.value == "step_type"


def written_kinds() -> tuple[set[str], list[str]]:
    """The kinds mltb_core's writers write (``.write(EventKind.X, field=...)``), and every place a kind is
    written or compared as a bare string instead."""
    written: set[str] = set()
    bare: list[str] = []
    for path in sorted((ROOT / "mltb_core").rglob("*.py")):
        where = path.relative_to(ROOT)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "write" \
                    and node.args and node.keywords:     # an event: a kind and its fields (a file's write has none)
                kind = node.args[0]
                if isinstance(kind, ast.Attribute) and isinstance(kind.value, ast.Name) and \
                        kind.value.id == "EventKind":
                    written.add(EventKind[kind.attr])
                elif isinstance(kind, ast.Constant):
                    bare.append(f"{where}:{node.lineno} writes {kind.value!r}")
            elif isinstance(node, ast.Compare) and any(map(_step_type_operand, [node.left, *node.comparators])):
                strings = [c for c in ast.walk(node) if isinstance(c, ast.Constant) and isinstance(c.value, str)
                           and c.value != "step_type"]
                bare += [f"{where}:{node.lineno} compares with {c.value!r}" for c in strings]
    return written, bare


def test_every_kind_is_declared_once_with_its_fields():
    assert set(EVENTS) == set(EventKind) and len(EventKind) == len({k.value for k in EventKind})
    written, bare = written_kinds()
    assert not bare, bare
    # every kind the harness writes on its own is written through the enum (the planners' own kinds too)
    assert {EventKind.TRIAL_START, EventKind.LLM_CALL, EventKind.SEARCH_SUMMARY, EventKind.REPLAY_ENDED,
            EventKind.UNIT_TEST, EventKind.ENSEMBLE} <= written


def test_a_new_trajectory_carries_its_format_version_on_its_first_line(tmp_path):
    writer = TrajectoryWriter(tmp_path / "t.jsonl")
    writer.write(EventKind.TRIAL_START, task="t", config={}, seed=0, synthetic=True, feedback=False)
    writer.tool_started(1, 0, {"tool_name": "read_data", "tool_args": {}}, "c1")
    writer.close()
    first, second = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert type(first["format_version"]) is int and first["format_version"] == TRAJECTORY_FORMAT == 2
    assert first["step_type"] == "trial_start" and "format_version" not in second
    assert second["step_type"] == "tool_execution_initiation"
    read = read_events(tmp_path / "t.jsonl")
    assert not read.malformed and [e["step_type"] for e in read.events] == ["trial_start",
                                                                              "tool_execution_initiation"]


def test_a_real_trial_writes_a_versioned_trajectory(tmp_path):
    from mltb_core.bench.tasks import get_task
    from mltb_core.config import TrialConfig
    from mltb_core.runner.trial import run_trial

    record = run_trial(get_task("spaceship-titanic"),
                       TrialConfig(planner="react", model="sim", max_llm_calls=4, llm_cache=False), tmp_path)
    lines = Path(record.trajectory).read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    assert first["step_type"] == "trial_start" and type(first["format_version"]) is int
    assert format_of(first) == TRAJECTORY_FORMAT
    assert sum('"format_version"' in line for line in lines) == 1
    read = read_events(record.trajectory)
    assert not read.malformed and len(read.events) == len(lines)


def test_every_published_trajectory_declares_a_known_version_and_reads_whole():
    # the older reports are version 1 (no format_version); later ones declare the format they were written in
    assert len(PUBLISHED) > 100
    versions = set()
    for path in PUBLISHED:
        first = _first_object(path)
        version = format_of(first)
        assert ("format_version" in first) == (version > 1) and 1 <= version <= TRAJECTORY_FORMAT, path
        versions.add(version)
        read = read_events(path)
        assert read.events and not read.malformed, (path, read.malformed[:3])
    assert versions == set(range(1, TRAJECTORY_FORMAT + 1))


def test_a_version_1_trajectory_migrates_to_the_current_format():
    # a migration step for every version before the current one, each an event of the next version
    assert sorted(events._MIGRATIONS) == list(range(1, TRAJECTORY_FORMAT))
    path = next(p for p in PUBLISHED if format_of(_first_object(p)) == 1)
    raw = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    old = parse_events((n, value, None) for n, value in enumerate(raw, 1))
    current = [{"format_version": TRAJECTORY_FORMAT, **raw[0]}, *raw[1:]]
    new = parse_events((n, value, None) for n, value in enumerate(current, 1))
    assert not old.malformed and not new.malformed
    assert old.events[1:] == new.events[1:] and len(old.events) == len(raw)
    assert {**old.events[0], "format_version": TRAJECTORY_FORMAT} == new.events[0]


def test_the_migrations_run_on_a_version_1_trajectory(monkeypatch):
    seen = []
    monkeypatch.setitem(events._MIGRATIONS, 1, lambda e: seen.append(e["step_type"]) or {**e, "migrated": True})
    read = parse_events([(1, {"step_type": "trial_start"}, None), (2, {"step_type": "llm_call"}, None)])
    assert seen == ["trial_start", "llm_call"] and all(e["migrated"] for e in read.events)
    seen.clear()
    parse_events([(1, {"step_type": "trial_start", "format_version": TRAJECTORY_FORMAT}, None)])
    assert seen == []                                   # a current trajectory is read as it is


@pytest.mark.parametrize("first", [
    {"step_type": "trial_start", "config": {}},
    {"step_type": "llm_call", "node_id": "n1", "usage": [1]},     # no longer fits today's declaration
    {"step_type": "a kind of tomorrow", "step_number": "one"},
], ids=["today's shape", "another shape", "an unknown kind"])
def test_a_newer_format_is_refused_whole_with_its_reason(tmp_path, first):
    path = tmp_path / "t.jsonl"
    later = {"step_type": "tool_execution_initiation", "node_id": 1, "parent_id": 0,
             "tools_to_execute": [{"tool_name": "read_data"}]}
    path.write_text(json.dumps({**first, "format_version": TRAJECTORY_FORMAT + 1}) + "\n" + json.dumps(later) + "\n")
    read = read_events(path)
    assert read.events == [] and len(read.malformed) == 1
    lineno, reason = read.malformed[0]
    assert lineno == 1 and reason == (f"a trajectory of format {TRAJECTORY_FORMAT + 1}, written by a newer mltb "
                                      f"(this one reads up to {TRAJECTORY_FORMAT})")
    with pytest.raises(ValueError, match=":1: not a trajectory event: a trajectory of format 3, written by a newer"):
        list(read_trajectory(path))


@pytest.mark.parametrize("version", [0, -1, "2", True, 2.0])
def test_a_first_line_whose_version_is_no_version_number_is_named(version):
    read = parse_events([(1, {"step_type": "trial_start", "format_version": version}, None),
                         (2, {"step_type": "llm_call"}, None)])
    assert [n for n, _ in read.malformed] == [1] and "format_version" in read.malformed[0][1]
    assert [e["step_type"] for e in read.events] == ["llm_call"]


def _findings_section(report: Path) -> str:
    text = report.read_text(encoding="utf-8")
    return re.search(r"## What the trajectories show\n\n(.*?)\n\n## ", text, re.S).group(1)


@pytest.mark.parametrize("report", ["reports/main-job.md", "reports/archive/main-job-superseded-5062b22.md"])
def test_the_findings_on_a_published_run_are_those_it_published(report):
    run = ROOT / report.removesuffix(".md")
    assert "\n".join(trajectory_findings(load_runs([run]))) == _findings_section(ROOT / report)
