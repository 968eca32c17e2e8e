"""results.py: the JSONL store and the record helpers every table uses."""
import json
import random
import warnings

import pytest

from mltb_core.analysis.records import Outcome, TrialRecord
from mltb_core.analysis.resultsfile import (MAX_REPORTED_PROBLEMS, ResultsFileError, ResultsFileWarning,
                                            append_records, read_records)
from mltb_core.analysis.results import consistency_values, latest_records, percentile_values, sort_records


def rec(trial=0, outcome="valid", planner="react", percentile=50.0, **kw):
    return TrialRecord(task="t", planner=planner, model="sim", trial=trial, seed=trial, config_hash="h",
                       outcome=outcome, valid=outcome == "valid",
                       percentile=percentile if outcome == "valid" else None, **kw)


def test_append_read_roundtrip_and_torn_line(tmp_path):
    path = tmp_path / "results.jsonl"
    append_records(path, [rec(0), rec(1, "planner_failure")])
    with open(path, "a") as fh:
        fh.write('{"task": "t", "plan')  # a run killed mid-write
    with pytest.warns(ResultsFileWarning, match="results.jsonl:3"):
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


# ---- a store that cannot lose or crash (issue 13, point 7) ---------------------------------------------

def line_of(record) -> bytes:
    return (json.dumps(record.to_dict()) + "\n").encode()


def test_torn_tail_is_set_aside_and_does_not_swallow_the_next_record(tmp_path):
    path = tmp_path / "results.jsonl"
    append_records(path, [rec(0), rec(1)])
    torn = b'{"task": "t", "plan'
    with open(path, "ab") as fh:
        fh.write(torn)  # a run killed mid-write
    with pytest.warns(ResultsFileWarning, match="torn"):
        append_records(path, [rec(2)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every line is whole again: nothing to warn about
        assert [r.trial for r in read_records(path)] == [0, 1, 2]
    (side,) = tmp_path.glob("results.jsonl.torn-*")
    assert side.read_bytes() == torn  # the bytes are kept, not dropped


def test_torn_last_line_is_reported_when_read(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_bytes(line_of(rec(0)) + b'{"task": "t", "plan')
    with pytest.warns(ResultsFileWarning, match=r"results.jsonl:2: .*interrupted"):
        assert [r.trial for r in read_records(path)] == [0]


BAD_LINES = {
    "not-utf8": b'{"task": "t\xff\xfe"}',
    "bad-json": b'{"task": "t", ',
    "json-list": b'["t", "react", 0]',
    "json-string": b'"a record"',
    "json-number": b"42",
    "json-null": b"null",
    "trial-abc": json.dumps({**rec(1).to_dict(), "trial": "abc"}).encode(),
    "trial-null": json.dumps({**rec(1).to_dict(), "trial": None}).encode(),
    "trial-bool": json.dumps({**rec(1).to_dict(), "trial": True}).encode(),
    "score-text": json.dumps({**rec(1).to_dict(), "score": "high"}).encode(),
    "missing-fields": b'{"task": "t", "planner": "react"}',
    "task-path": json.dumps({**rec(1).to_dict(), "task": "../../evil"}).encode(),
    "random-bytes": bytes(random.Random(13).randrange(256) for _ in range(300)).replace(b"\n", b"\x00"),
}


@pytest.mark.parametrize("name", BAD_LINES)
def test_an_unreadable_line_is_reported_and_skipped_never_fatal(tmp_path, name):
    path = tmp_path / "results.jsonl"
    path.write_bytes(line_of(rec(0)) + BAD_LINES[name] + b"\n" + line_of(rec(2)))
    with pytest.warns(ResultsFileWarning) as caught:
        records = latest_records(read_records(path))  # what --resume and the reports do
    assert [r.trial for r in records] == [0, 2]
    assert [str(w.message).split(": ")[0] for w in caught] == [f"{path}:2"]


def test_unreadable_lines_are_reported_one_by_one_up_to_a_limit_then_counted(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_bytes(line_of(rec(0)) + b"garbage\n" * (MAX_REPORTED_PROBLEMS + 5))
    with pytest.warns(ResultsFileWarning) as caught:
        assert [r.trial for r in read_records(path)] == [0]
    messages = [str(w.message) for w in caught]
    assert len(messages) == MAX_REPORTED_PROBLEMS + 1
    assert "5 more unreadable line(s)" in messages[-1]


def test_strict_reading_raises_on_the_first_unreadable_line(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_bytes(line_of(rec(0)) + b"[1, 2]\n")
    with pytest.raises(ValueError, match="results.jsonl:2"):
        list(read_records(path, strict=True))


def test_a_results_path_that_is_a_directory_is_an_error_naming_it(tmp_path):
    path = tmp_path / "results.jsonl"
    path.mkdir()
    with pytest.raises(ResultsFileError, match="results.jsonl is not a regular file"):
        list(read_records(path))
    with pytest.raises(ResultsFileError, match="results.jsonl"):
        append_records(path, [rec(0)])


def test_numpy_numbers_are_written_as_numbers(tmp_path):
    np = pytest.importorskip("numpy")
    path = tmp_path / "results.jsonl"
    append_records(path, [rec(0, tool_calls=np.int64(3), score=np.float32(0.5))])
    (record,) = read_records(path)
    assert record.tool_calls == 3 and record.score == 0.5


# ---- outcomes are an enum whose values are the words on disk (issue 19) --------------------------------

def test_an_old_record_keeps_loading_and_its_outcome_compares_with_the_word(tmp_path):
    # a line as records were written before the enum: the outcome is a plain word
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps({"task": "t", "planner": "react", "model": "sim", "trial": 0, "seed": 0,
                                "config_hash": "h", "outcome": "planner_failure"}) + "\n")
    (record,) = read_records(path)
    assert record.outcome is Outcome.PLANNER_FAILURE and record.outcome == "planner_failure"
    assert f"{record.outcome}" == "planner_failure"          # messages and HTML classes show the word
    append_records(path, [record])
    assert [json.loads(line)["outcome"] for line in path.read_text().splitlines()] == ["planner_failure"] * 2


def test_an_unknown_outcome_is_refused_naming_the_known_ones(tmp_path):
    with pytest.raises(ValueError, match=r"outcome must be one of \['valid', 'planner_failure', 'infra_error'\]"):
        rec(0, "passed")
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps({"task": "t", "planner": "react", "model": "sim", "trial": 0, "seed": 0,
                                "config_hash": "h", "outcome": "passed"}) + "\n")
    with pytest.warns(ResultsFileWarning, match="outcome must be one of"):
        assert list(read_records(path)) == []
