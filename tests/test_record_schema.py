"""Versioned trial records: schema_version, stop_kind (a closed set the planner returns) and machine facts;
records of older versions are migrated when read."""
from __future__ import annotations

import json

import pytest

from mltb_core.analysis.provenance import machine_counts, machine_facts, machine_label
from mltb_core.analysis.records import SCHEMA_VERSION, RecordVersionError, TrialRecord, record_json
from mltb_core.analysis.resultsfile import scan_records
from mltb_core.bench.stops import StopKind
from mltb_core.bench.stops import STOP_KIND_MEANINGS

OLD = {"task": "spaceship-titanic", "planner": "react", "model": "sim", "trial": 0, "seed": 0,
       "config_hash": "abc123", "outcome": "planner_failure"}


@pytest.mark.parametrize("reason, kind", [
    ("the model ended its turn without a valid submission", StopKind.MODEL_ENDED_TURN),   # not "valid"
    ("valid submission", StopKind.VALID_SUBMISSION),
    ("valid submission (best of 2 valid solutions by CV 0.8); action budget (8) used up", StopKind.VALID_SUBMISSION),
    ("no valid solution; LLM-call budget (30) used up", StopKind.LLM_CALL_BUDGET),
    ("no valid solution; no valid initial solution after 3 draft(s)", StopKind.NO_VALID_SOLUTION),
    ("the conversation outgrew the model's context window (4096 tokens)", StopKind.CONTEXT_FULL),
    ("step budget (40) used up", StopKind.ITERATION_BUDGET),
    ("No Solution Found for subtask 3 (cleaning)", StopKind.STAGE_FAILED),
    ("the tool worker failed: it died", StopKind.WORKER_FAILED),
    ("something a plug-in said", StopKind.UNSPECIFIED),
])
def test_a_record_without_a_version_is_migrated(reason, kind):
    record = TrialRecord.from_dict({**OLD, "stop_reason": reason})
    assert record.schema_version == SCHEMA_VERSION
    assert record.stop_kind == kind and record.stop_reason == reason
    assert record.machine is None


def test_an_old_infrastructure_error_is_an_error_stop():
    record = TrialRecord.from_dict({**OLD, "outcome": "infra_error", "stop_reason": "valid submission"})
    assert record.stop_kind == StopKind.ERROR


def test_a_current_record_keeps_its_kind_and_machine_whatever_its_reason():
    data = {**OLD, "schema_version": SCHEMA_VERSION, "stop_reason": "valid submission",
            "stop_kind": "llm_call_budget", "machine": {"cpu": "x", "cores": 2}}
    record = TrialRecord.from_dict(data)
    assert record.stop_kind == StopKind.LLM_CALL_BUDGET and record.machine == {"cpu": "x", "cores": 2}
    assert TrialRecord.from_dict(json.loads(record_json(record))) == record


def test_a_newer_record_and_an_unknown_kind_are_refused_by_name(tmp_path):
    with pytest.raises(RecordVersionError, match="newer mltb"):
        TrialRecord.from_dict({**OLD, "schema_version": SCHEMA_VERSION + 1})
    with pytest.raises(ValueError, match="stop_kind must be one of"):
        TrialRecord.from_dict({**OLD, "schema_version": SCHEMA_VERSION, "stop_kind": "bored"})
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps({**OLD, "schema_version": 99}) + "\n" + json.dumps(OLD) + "\n")
    records, problems = scan_records(path)
    assert len(records) == 1 and "schema version 99" in problems[0].reason


def test_every_stop_kind_is_documented():
    assert set(STOP_KIND_MEANINGS) == set(StopKind)


def test_machine_facts_and_mixed_machines():
    facts = machine_facts()
    assert facts["cores"] >= 1 and facts["python"].count(".") == 2 and facts["cpu"]
    one = TrialRecord(**OLD, machine=facts)
    other = TrialRecord(**OLD, machine={**facts, "cores": facts["cores"] + 8})
    assert len(machine_counts([one, one])) == 1
    assert machine_counts([one, other, TrialRecord(**OLD)])["not recorded"] == 1
    assert machine_label(other.machine) != machine_label(one.machine)


@pytest.mark.parametrize("bad", ["x/../../etc", "a.b", "", "h" * 65])
def test_a_config_hash_that_could_name_another_path_is_refused_when_read(bad):
    # report pages are named after it (trials/<case>-<hash>.html): a slash had made `mltb report` crash
    with pytest.raises(ValueError, match="field 'config_hash' is .* not a configuration hash"):
        TrialRecord.from_dict({**OLD, "config_hash": bad})
    assert TrialRecord.from_dict({**OLD, "config_hash": "ac195f2b40a9"}).config_hash == "ac195f2b40a9"


def test_a_record_before_schema_4_names_no_endpoint_and_a_current_one_keeps_it():
    old = TrialRecord.from_dict({**OLD, "schema_version": 3, "endpoint": "http://stale/v1"})
    assert old.endpoint is None and old.schema_version == SCHEMA_VERSION   # never taken for what answered
    data = {**OLD, "schema_version": SCHEMA_VERSION, "endpoint": "http://127.0.0.1:8080/v1"}
    assert TrialRecord.from_dict(data).endpoint == "http://127.0.0.1:8080/v1"
    with pytest.raises(ValueError, match="endpoint"):
        TrialRecord.from_dict({**data, "endpoint": 5})
