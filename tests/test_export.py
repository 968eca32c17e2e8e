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
