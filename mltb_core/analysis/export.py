"""``mltb export RUN_DIR... --format csv|parquet|jsonl``: one row per trial, for pandas and friends.

Rows are the records the tables count from: :func:`mltb_core.analysis.reports.load_runs` keeps one
record per (task, planner, model, trial, config hash) — the last written, a real outcome beating an
infra error (:func:`mltb_core.analysis.results.latest_records`) — so a run repeated without
``--resume`` is never double-counted. Runs under different configurations stay apart: ``config_hash``
is a column. Infra errors are rows too (``counted`` is False for them, as in the tables).

The score columns hold what the tables count, so ``frame.groupby(...).median()`` agrees with them:

| column | what it holds |
|---|---|
| every TrialRecord field | as in ``results.jsonl`` (``mltb_core/analysis/records.py``), but the two below |
| ``counted`` | False for an infrastructure error (never counted, as in the tables) |
| ``normalized`` | the normalized score the tables count (:func:`results.quality_value`): 0 = the task's trivial baseline, 1 = perfect; a failed trial, or a valid one below the baseline, 0; empty for an infra error |
| ``normalized_raw`` | the grader's normalized score (below 0 under the baseline; empty for a failed trial) |
| ``percentile`` | the leaderboard percentile the tables count: a failed trial 0, as in the paper; empty where the task has no comparable percentile (the tables' reason is ``percentile_note``) or for an infra error |
| ``percentile_raw`` | the grader's percentile (empty for a failed trial) |
| ``*_samples`` | the figure on each held-out-row resample (row bootstrap): a list in jsonl and parquet; in csv three columns ``<name>_n`` (resamples), ``<name>_lo`` and ``<name>_hi`` (their 2.5 and 97.5 percentiles) |
| ``extra`` | a mapping in jsonl; JSON text in csv and parquet |

Text fields come from a possibly compromised solver (stage_name, stop_reason, feedback, error): in CSV a
cell that a spreadsheet would run as a formula (starting with =, +, -, @, a tab or a carriage return) is
prefixed with a single quote, as OWASP recommends against CSV injection.
"""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any, Sequence

from mltb_core.analysis.records import Outcome, TrialRecord
from mltb_core.analysis.results import group_by, percentile_exclusion, quality_value

__all__ = ["FORMATS", "export_rows", "write_export", "ExportError"]

FORMATS = ("csv", "jsonl", "parquet")
SAMPLE_COLUMNS = tuple(name for name in TrialRecord.__dataclass_fields__ if name.endswith("_samples"))


class ExportError(ValueError):
    """The export cannot be written as asked (e.g. parquet without pyarrow)."""


def export_rows(records: Sequence[TrialRecord]) -> list[dict[str, Any]]:
    """One dict per trial: every record field, ``counted``, and the score columns as the tables count them
    (the grader's own values in ``normalized_raw`` and ``percentile_raw``)."""
    # as the percentile table decides it: a task (per model) without a comparable percentile has none at all
    excluded = {key: percentile_exclusion(cell) is not None for key, cell in group_by(records, "task", "model").items()}
    rows = []
    for record in records:
        row = record.to_dict()
        counted = record.outcome != Outcome.INFRA_ERROR
        row["counted"] = counted
        row["normalized_raw"], row["percentile_raw"] = row["normalized"], row["percentile"]
        row["normalized"] = quality_value(record) if counted else None
        row["percentile"] = (None if not counted or excluded[(record.task, record.model)]
                             else record.percentile if record.valid else 0.0)
        rows.append(row)
    return rows


def _sample_summary(name: str, samples: list[float | None] | None) -> dict[str, Any]:
    """A samples list in three csv cells: how many resamples, and their 2.5 and 97.5 percentiles."""
    values = sorted(v for v in samples or () if v is not None and math.isfinite(v))
    if not values:
        return {f"{name}_n": len(samples or ()), f"{name}_lo": None, f"{name}_hi": None}

    def quantile(q: float) -> float:   # linear interpolation, as numpy's default
        position = q * (len(values) - 1)
        low = math.floor(position)
        high = min(low + 1, len(values) - 1)
        return values[low] + (values[high] - values[low]) * (position - low)

    return {f"{name}_n": len(samples or ()), f"{name}_lo": quantile(0.025), f"{name}_hi": quantile(0.975)}


def _csv_columns() -> list[str]:
    """The csv header of an export without rows (a row's keys otherwise, in the same order)."""
    fields = dict.fromkeys([*TrialRecord.__dataclass_fields__, "counted", "normalized_raw", "percentile_raw"])
    return list(_csv_row(fields))


def _csv_row(row: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in row.items():
        if key in SAMPLE_COLUMNS:
            out.update(_sample_summary(key, value))
        else:
            out[key] = value
    return out


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
        columns = list(_csv_row(rows[0])) if rows else _csv_columns()
        with open(path, "w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=columns)
            writer.writeheader()
            for row in rows:
                writer.writerow({k: _csv_value(v) for k, v in _csv_row(row).items()})
    return path
