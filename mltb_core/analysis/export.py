"""``mltb export RUN_DIR... --format csv|parquet|jsonl``: one row per trial, for pandas and friends.

Rows are the records the tables count from: :func:`mltb_core.analysis.reports.load_runs` keeps one
record per (task, planner, model, trial, config hash) — the last written, a real outcome beating an
infra error (:func:`mltb_core.analysis.results.latest_records`) — so a run repeated without
``--resume`` is never double-counted. Runs under different configurations stay apart: ``config_hash``
is a column. Infra errors are rows too (``counted`` is False for them, as in the tables); the list
columns (row-bootstrap samples) and ``extra`` are JSON text in CSV, native in JSONL and parquet.
``quality`` is the normalized score the tables aggregate (:func:`results.quality_value`: 0 = the task's
trivial baseline, 1 = perfect, a failed trial 0), on every task.

Text fields come from a possibly compromised solver (stage_name, stop_reason, feedback, error): in CSV a
cell that a spreadsheet would run as a formula (starting with =, +, -, @, a tab or a carriage return) is
prefixed with a single quote, as OWASP recommends against CSV injection.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any, Sequence

from mltb_core.analysis.results import Outcome, TrialRecord, quality_value

__all__ = ["FORMATS", "export_rows", "write_export", "ExportError"]

FORMATS = ("csv", "jsonl", "parquet")
_NESTED = ("score_samples", "percentile_samples", "extra")


class ExportError(ValueError):
    """The export cannot be written as asked (e.g. parquet without pyarrow)."""


def export_rows(records: Sequence[TrialRecord]) -> list[dict[str, Any]]:
    """One dict per trial: every record field plus ``counted`` (False for infra errors)."""
    rows = []
    for record in records:
        row = record.to_dict()
        row["counted"] = record.outcome != Outcome.INFRA_ERROR
        row["quality"] = quality_value(record) if row["counted"] else None
        rows.append(row)
    return rows


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _csv_value(value: Any) -> Any:
    if isinstance(value, (list, dict)):
        value = json.dumps(value, sort_keys=True)
    if value is None:
        return ""
    if isinstance(value, str):
        value = value.encode("utf-8", "backslashreplace").decode("utf-8")    # lone surrogates cannot be written
        if value.startswith(_FORMULA_START):
            return "'" + value
    return value


def write_export(records: Sequence[TrialRecord], path: Path, fmt: str) -> Path:
    """Write ``records`` to ``path`` in ``fmt``; returns the path."""
    if fmt not in FORMATS:
        raise ExportError(f"unknown export format {fmt!r}: choose one of {', '.join(FORMATS)}")
    rows = export_rows(records)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "parquet":
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            # its own extra: ~100 MB for one optional format
            raise ExportError("parquet export needs pyarrow, which is not installed (pip install 'mltb[export]'); "
                              "--format csv or jsonl need nothing extra") from None
        table = pa.Table.from_pylist([{**r, "extra": json.dumps(r["extra"], sort_keys=True)} for r in rows])
        pq.write_table(table, path)
    elif fmt == "jsonl":
        path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows), encoding="utf-8")
    else:
        columns = list(rows[0]) if rows else list(TrialRecord.__dataclass_fields__) + ["counted", "quality"]
        with open(path, "w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=columns)
            writer.writeheader()
            for row in rows:
                writer.writerow({k: _csv_value(v) for k, v in row.items()})
    return path
