"""What a run's records give a table cell: the latest record of each trial, those that count, and their
consistency, leaderboard percentiles and normalized scores (with the notes that explain a missing one).

The records themselves are :mod:`mltb_core.analysis.records`; results.jsonl is
:mod:`mltb_core.analysis.resultsfile`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterable

from mltb_core.analysis.records import Outcome, TrialRecord

__all__ = ["sort_records", "latest_records", "counted_records", "consistency_values", "group_by",
           "PercentileCell", "percentile_cell", "percentile_exclusion", "percentile_values", "NO_LEADERBOARD",
           "NOT_COMPARABLE", "quality_value", "normalized_cell", "normalized_values", "QUALITY_FLOOR_NOTE"]


def _sort_key(record: TrialRecord) -> tuple:
    return (record.task, record.model, record.planner, record.config_hash, record.trial, record.seed)


def sort_records(records: Iterable[TrialRecord]) -> list[TrialRecord]:
    """Deterministic order independent of completion order (xdist finishes items in any order)."""
    return sorted(records, key=_sort_key)


def latest_records(records: Iterable[TrialRecord]) -> list[TrialRecord]:
    """One record per key: the last one written, except that a real outcome beats an infra error.

    An infra error followed by a resumed rerun leaves both lines in results.jsonl; the rerun counts.
    Output is sorted (see :func:`sort_records`).
    """
    chosen: dict[tuple, TrialRecord] = {}
    for record in records:
        previous = chosen.get(record.key)
        if previous is None or record.outcome != Outcome.INFRA_ERROR or previous.outcome == Outcome.INFRA_ERROR:
            chosen[record.key] = record
    return sort_records(chosen.values())


def counted_records(records: Iterable[TrialRecord]) -> list[TrialRecord]:
    """Records that count towards consistency and percentiles: infra errors never do."""
    return [r for r in records if r.outcome != Outcome.INFRA_ERROR]


def consistency_values(records: Iterable[TrialRecord]) -> list[float]:
    """1.0 per valid trial and 0.0 per planner failure; their mean is the paper's consistency."""
    return [1.0 if r.valid else 0.0 for r in counted_records(records)]


def _has_leaderboard(records: list[TrialRecord]) -> bool:
    """Whether the task has a leaderboard at all (replica tasks have none)."""
    flags = [r.extra.get("leaderboard") for r in records if "leaderboard" in r.extra]
    if flags:
        return all(flags)
    return bool(records) and _task_has_leaderboard(records[0].task)


@lru_cache(maxsize=None)
def _task_has_leaderboard(slug: str) -> bool:
    """Fallback for records without the flag: ask the task spec (unknown tasks have none)."""
    try:
        from mltb_core.bench.tasks import load_tasks

        task = load_tasks().get(slug)
    except Exception:  # noqa: BLE001 - a broken spec directory must not break reading results
        return False
    return task is not None and task.has_leaderboard


NO_LEADERBOARD = "no leaderboard (schema replica or none given)"
NOT_COMPARABLE = "valid submissions got no comparable leaderboard percentile"


@dataclass
class PercentileCell:
    """The percentile (or normalized-score, :func:`normalized_cell`) figures of one cell's counted trials (the paper's rule: a trial without a
    valid submission counts as percentile 0).

    ``excluded`` says why the task has no comparable percentile (then ``values`` is empty).
    A valid trial whose grade has no percentile while others of the task have one is left out
    and counted in ``unscored``.
    """
    values: list[float] = field(default_factory=list)
    replicates: list[list[float | None] | None] = field(default_factory=list)
    row_seeds: list[int | None] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)      # trial seed of each value (pairs runs in the gate)
    counted: int = 0
    scored: int = 0          # valid trials with a percentile
    failed: int = 0          # counted trials without a valid submission (percentile 0)
    unscored: int = 0        # valid trials without a percentile (left out)
    excluded: str | None = None


def percentile_exclusion(records: Iterable[TrialRecord]) -> str | None:
    """Why these records' task has no comparable leaderboard percentile, or None when it has one.

    Decided by the valid trials: one with a percentile makes the task comparable; valid trials all
    without one mean the grader found no comparable board (its ``percentile_note`` says why, when
    the record has one). Without any valid trial the records' notes (every trial carries its task's
    note) or, for older records without one, the task's leaderboard flag decide.
    """
    counted = counted_records(records)
    valid = [r for r in counted if r.valid]
    if any(r.percentile is not None for r in valid):
        return None
    notes = sorted({str(getattr(r, "percentile_note", None) or r.extra.get("percentile_note") or "")
                    for r in (valid or counted)} - {""})
    if valid:
        return "; ".join(notes) if notes else NOT_COMPARABLE
    if notes:
        return "; ".join(notes)
    return None if _has_leaderboard(counted) else NO_LEADERBOARD


def percentile_cell(records: Iterable[TrialRecord]) -> PercentileCell:
    """Percentiles of counted trials with their row replicates (see :class:`PercentileCell`)."""
    counted = counted_records(records)
    cell = PercentileCell(counted=len(counted), excluded=percentile_exclusion(counted))
    if cell.excluded is not None:
        return cell
    for record in counted:
        if not record.valid:
            cell.failed += 1
            cell.values.append(0.0)
            cell.replicates.append(None)   # 0 on every row resample
        elif record.percentile is None:
            cell.unscored += 1
            continue
        else:
            cell.scored += 1
            cell.values.append(float(record.percentile))
            cell.replicates.append(record.percentile_samples)
        cell.row_seeds.append(record.row_seed)
        cell.seeds.append(record.seed)
    return cell


def percentile_values(records: Iterable[TrialRecord]) -> list[float]:
    """Leaderboard percentiles of counted trials (invalid → 0); empty when the task has no comparable one."""
    return percentile_cell(records).values


# The normalized score's floor: a valid submission no better than the trivial baseline counts as 0, as a
# failed trial does, so a valid submission never ranks under a failure (its raw value stays in the record).
QUALITY_FLOOR_NOTE = ("normalized score: 0 = the task's trivial constant baseline, 1 = a perfect prediction; a "
                      "failed trial, or a valid one below the baseline, counts 0")


def _floor(value: float | None) -> float | None:
    return None if value is None else max(float(value), 0.0)


def quality_value(record: TrialRecord) -> float | None:
    """A counted trial's normalized score on the benchmark's scale (see :data:`QUALITY_FLOOR_NOTE`);
    None for a valid trial whose task has no normalized score (its baseline is already perfect)."""
    if not record.valid:
        return 0.0
    return _floor(record.normalized)


def normalized_cell(records: Iterable[TrialRecord]) -> PercentileCell:
    """The normalized scores of a cell's counted trials, with their held-out-row replicates: every task
    has one (``excluded`` stays None), a valid trial without one is counted in ``unscored``."""
    counted = counted_records(records)
    cell = PercentileCell(counted=len(counted))
    for record in counted:
        value = quality_value(record)
        if value is None:
            cell.unscored += 1
            continue
        if record.valid:
            cell.scored += 1
            samples = record.normalized_samples
            cell.replicates.append(None if samples is None else [_floor(v) for v in samples])
        else:
            cell.failed += 1
            cell.replicates.append(None)
        cell.values.append(value)
        cell.row_seeds.append(record.row_seed)
        cell.seeds.append(record.seed)
    return cell


def normalized_values(records: Iterable[TrialRecord]) -> list[float]:
    """Normalized scores of counted trials (:func:`quality_value`), on every task with or without a leaderboard."""
    return normalized_cell(records).values


def group_by(records: Iterable[TrialRecord], *attrs: str) -> dict[tuple, list[TrialRecord]]:
    """Records grouped by the given attributes, keys in sorted order."""
    groups: dict[tuple, list[TrialRecord]] = {}
    for record in records:
        groups.setdefault(tuple(getattr(record, a) for a in attrs), []).append(record)
    return {k: groups[k] for k in sorted(groups)}
