"""export.py / `mltb export`: one row per trial, deduplicated exactly as the tables count."""
import json

import pandas as pd
import pytest

from mltb_core.analysis.export import ExportError, write_export
from mltb_core.analysis.reports import load_runs
from mltb_core.analysis.tables import build_tables
from mltb_core.cli import main as cli_main

from test_reports import make_run


def test_csv_has_one_row_per_trial_matching_the_tables(tmp_path):
    make_run(tmp_path / "run", "react", trials=3)
    make_run(tmp_path / "run", "react", trials=3)                     # rerun without --resume: duplicates
    make_run(tmp_path / "run", "mcts_shaped", trials=2, outcome="infra_error")
    assert cli_main(["export", str(tmp_path / "run"), "--format", "csv"]) == 0
    frame = pd.read_csv(tmp_path / "run" / "trials.csv")
    assert len(frame) == 5 and not frame.duplicated(["task", "planner", "model", "trial", "config_hash"]).any()
    counted = frame[frame["counted"]]
    table = next(t for t in build_tables(load_runs([tmp_path / "run"])) if t.key.startswith("consistency"))
    valid, n = table.rows[0][1].split()[0].split("/")                 # e.g. "2/3 0.67 [...]"
    assert (int(valid), int(n)) == (int(counted[counted.planner == "react"]["valid"].sum()),
                                    len(counted[counted.planner == "react"]))
    assert json.loads(frame["extra"][0]) == {}


def test_jsonl_keeps_types(tmp_path):
    records = make_run(tmp_path / "run", "react", trials=2)
    path = write_export(load_runs([tmp_path / "run"]), tmp_path / "t.jsonl", "jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["trial"] for r in rows] == [0, 1] and rows[1]["percentile"] == records[1].percentile


def test_parquet_without_pyarrow_names_the_package(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_pyarrow(name, *args, **kwargs):
        if name.startswith("pyarrow"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    with pytest.raises(ExportError, match=r"pip install 'mltb\[export\]'"):
        write_export([], tmp_path / "t.parquet", "parquet")


def test_parquet_round_trips_one_row_per_trial(tmp_path):
    # pyarrow comes with the `export` (and `dev`) extra
    make_run(tmp_path / "run", "react", trials=3)
    make_run(tmp_path / "run", "react", trials=3)                     # rerun: deduplicated like the tables
    assert cli_main(["export", str(tmp_path / "run"), "--format", "parquet"]) == 0
    frame = pd.read_parquet(tmp_path / "run" / "trials.parquet")
    jsonl = write_export(load_runs([tmp_path / "run"]), tmp_path / "t.jsonl", "jsonl")
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert len(frame) == len(rows) == 3
    assert [None if pd.isna(v) else v for v in frame["percentile"]] == [r["percentile"] for r in rows]
    assert json.loads(frame["extra"][0]) == rows[0]["extra"]


def test_unknown_format_and_missing_run_are_usage_errors(tmp_path, capsys):
    with pytest.raises(ExportError, match="unknown export format"):
        write_export([], tmp_path / "t.xlsx", "xlsx")
    assert cli_main(["export", str(tmp_path / "nowhere")]) == 2
    assert "not an mltb run directory" in capsys.readouterr().err


def _graded_run(run_dir, task="spaceship-titanic", comparable=True):
    """Three trials of one cell: a failure, a valid one below the baseline, a good one; with row samples."""
    from mltb_core.analysis.records import TrialRecord
    from mltb_core.analysis.resultsfile import append_records

    note = None if comparable else "original dataset: no leaderboard"
    common = dict(task=task, planner="react", model="sim", config_hash="h", synthetic=True, percentile_note=note)
    records = [
        TrialRecord(trial=0, seed=0, outcome="planner_failure", valid=False, **common),
        TrialRecord(trial=1, seed=1, outcome="valid", valid=True, normalized=-0.2, score=0.4,
                    percentile=12.0 if comparable else None, score_samples=[0.38, 0.4, None, 0.42], **common),
        TrialRecord(trial=2, seed=2, outcome="valid", valid=True, normalized=0.6, score=0.8,
                    percentile=70.0 if comparable else None, score_samples=[0.79, 0.8, 0.81], **common),
    ]
    append_records(run_dir / "results.jsonl", records)
    return records


def test_export_score_columns_hold_what_the_tables_count(tmp_path):
    """Issue 35: failed trials were NaN in `normalized`, so a first groupby().mean() contradicted the report."""
    from mltb_core.analysis.results import normalized_values, percentile_values

    records = _graded_run(tmp_path / "run")
    assert cli_main(["export", str(tmp_path / "run"), "--format", "csv"]) == 0
    frame = pd.read_csv(tmp_path / "run" / "trials.csv")
    assert not frame["normalized"].isna().any() and not frame["percentile"].isna().any()
    assert sorted(frame["normalized"]) == sorted(normalized_values(records)) == [0.0, 0.0, 0.6]
    assert sorted(frame["percentile"]) == sorted(percentile_values(records)) == [0.0, 12.0, 70.0]
    assert frame["normalized_raw"].tolist()[1:] == [-0.2, 0.6] and pd.isna(frame["normalized_raw"][0])
    assert pd.isna(frame["percentile_raw"][0])


def test_a_task_without_a_comparable_percentile_has_none_in_the_export(tmp_path):
    _graded_run(tmp_path / "run", task="playground-series-s4e8", comparable=False)
    path = write_export(load_runs([tmp_path / "run"]), tmp_path / "t.jsonl", "jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["percentile"] for r in rows] == [None, None, None]      # not 0 for the failed trial either
    assert [r["normalized"] for r in rows] == [0.0, 0.0, 0.6]


def test_samples_are_lists_in_jsonl_and_parquet_and_summarised_in_csv(tmp_path):
    _graded_run(tmp_path / "run")
    runs = load_runs([tmp_path / "run"])
    rows = [json.loads(line) for line in write_export(runs, tmp_path / "t.jsonl", "jsonl").read_text().splitlines()]
    assert rows[1]["score_samples"] == [0.38, 0.4, None, 0.42]
    frame = pd.read_parquet(write_export(runs, tmp_path / "t.parquet", "parquet"))
    assert list(frame["score_samples"][2]) == [0.79, 0.8, 0.81]
    csv_frame = pd.read_csv(write_export(runs, tmp_path / "t.csv", "csv"))
    assert "score_samples" not in csv_frame.columns
    assert csv_frame["score_samples_n"].tolist() == [0, 4, 3]
    assert csv_frame["score_samples_lo"][2] == pytest.approx(0.7905) and csv_frame["score_samples_hi"][2] == pytest.approx(0.8095)
    assert csv_frame["score_samples_lo"][1] == pytest.approx(0.381)    # over the resamples that scored


def test_an_empty_export_has_the_same_csv_header(tmp_path):
    _graded_run(tmp_path / "run")
    full = pd.read_csv(write_export(load_runs([tmp_path / "run"]), tmp_path / "a.csv", "csv"))
    empty = pd.read_csv(write_export([], tmp_path / "b.csv", "csv"))
    assert list(empty.columns) == list(full.columns)
