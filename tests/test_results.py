"""results.py: the JSONL store and the record helpers every table uses."""
from mltb_core.results import (TrialRecord, append_records, consistency_values, latest_records, percentile_values,
                               read_records, sort_records)


def rec(trial=0, outcome="valid", planner="react", percentile=50.0, **kw):
    return TrialRecord(task="t", planner=planner, model="sim", trial=trial, seed=trial, config_hash="h",
                       outcome=outcome, valid=outcome == "valid",
                       percentile=percentile if outcome == "valid" else None, **kw)


def test_append_read_roundtrip_and_torn_line(tmp_path):
    path = tmp_path / "results.jsonl"
    append_records(path, [rec(0), rec(1, "planner_failure")])
    with open(path, "a") as fh:
        fh.write('{"task": "t", "plan')  # a run killed mid-write
    records = list(read_records(path))
    assert [r.trial for r in records] == [0, 1] and records[1].outcome == "planner_failure"


def test_latest_records_prefers_real_outcome_over_infra_error():
    records = latest_records([rec(0, "infra_error"), rec(0, "valid"), rec(1, "valid"), rec(1, "infra_error")])
    assert [(r.trial, r.outcome) for r in records] == [(0, "valid"), (1, "valid")]


def test_sort_is_independent_of_input_order():
    records = [rec(2, planner="lats"), rec(0), rec(1, planner="lats")]
    assert sort_records(records) == sort_records(records[::-1])


def test_consistency_and_percentiles_skip_infra_and_zero_failures():
    records = [rec(0, percentile=80.0), rec(1, "planner_failure"), rec(2, "infra_error")]
    assert consistency_values(records) == [1.0, 0.0]
    assert percentile_values(records) == [80.0, 0.0]
    replica = [rec(0, percentile=None), rec(1, "planner_failure", extra={"leaderboard": False})]
    assert percentile_values(replica) == []
