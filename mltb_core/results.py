"""Trial records and the results.jsonl store.

One record per (task, planner, model, trial). Records are plain JSON so they can
travel inside pytest reports (``user_properties``) to the xdist controller and be
appended there; the file is the run's single source of truth and ``--resume`` reads it.
"""
from __future__ import annotations

import json
import os
from functools import lru_cache
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Iterator

from filelock import FileLock

__all__ = ["TrialRecord", "OUTCOMES", "append_records", "read_records", "record_key", "sort_records",
           "latest_records", "counted_records", "consistency_values", "percentile_values", "normalized_values",
           "group_by", "read_run_records", "PercentileCell", "percentile_cell",
           "percentile_exclusion", "NO_LEADERBOARD", "NOT_COMPARABLE", "RESULTS_FILE", "TRAJECTORY_DIR", "SYNTHETIC_LABEL", "model_label"]

RESULTS_FILE = "results.jsonl"
TRAJECTORY_DIR = "trajectories"
# Shown wherever a synthetic (sim) model's figures appear, so nobody mistakes them for an LLM's.
SYNTHETIC_LABEL = "(synthetic policy, not an LLM)"

# valid: a valid submission (pass); planner_failure: searched and failed (fail);
# infra_error: API outage, server crash, OOM... (error; never counted against consistency)
OUTCOMES = ("valid", "planner_failure", "infra_error")


@dataclass
class TrialRecord:
    task: str
    planner: str
    model: str
    trial: int
    seed: int
    config_hash: str
    outcome: str
    valid: bool = False
    score: float | None = None
    percentile: float | None = None
    medal: str | None = None
    normalized: float | None = None
    # held-out-row bootstrap from grading (see mltb_core.stats.row_bootstrap): the score and its
    # leaderboard percentile on each row resample, and the seed that drew the resamples (same seed
    # and row count = same resamples, so replicate b pairs across trials, planners and runs)
    score_samples: list[float | None] | None = None
    percentile_samples: list[float | None] | None = None
    row_seed: int | None = None
    stage_reached: int = 0
    stage_name: str = ""
    stop_reason: str = ""
    feedback: str = ""
    tokens_in: int = 0
    tokens_out: int = 0
    llm_calls: int = 0
    llm_retries: int = 0
    cost_usd: float = 0.0
    tool_calls: int = 0
    tree_nodes: int = 0
    wall_seconds: float = 0.0
    tool_seconds: float = 0.0
    llm_seconds: float = 0.0
    trajectory: str | None = None
    synthetic: bool = False
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {OUTCOMES}, got {self.outcome!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialRecord:
        known = {f.name for f in fields(cls)}
        missing = [f.name for f in fields(cls) if f.name in ("task", "planner", "model", "trial", "seed",
                                                              "config_hash", "outcome") and f.name not in data]
        if missing:
            raise ValueError(f"trial record lacks field(s) {missing}")
        return cls(**{k: v for k, v in data.items() if k in known})

    @property
    def key(self) -> tuple[str, str, str, int, str]:
        return record_key(self.task, self.planner, self.model, self.trial, self.config_hash)


def record_key(task: str, planner: str, model: str, trial: int, config_hash: str) -> tuple[str, str, str, int, str]:
    return (task, planner, model, int(trial), config_hash)


def append_records(path: Path, records: Iterable[TrialRecord]) -> None:
    """Append records as JSON lines, under a lock, flushed and fsynced (survives a kill)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps(r.to_dict(), sort_keys=True, default=str) + "\n" for r in records)
    if not lines:
        return
    with FileLock(str(path) + ".lock"):
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(lines)
            fh.flush()
            os.fsync(fh.fileno())


def read_records(path: Path, *, strict: bool = False) -> Iterator[TrialRecord]:
    """Read records; a torn last line (a run killed mid-write) is skipped unless ``strict``."""
    path = Path(path)
    if not path.exists():
        return
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield TrialRecord.from_dict(json.loads(line))
            except (json.JSONDecodeError, ValueError, TypeError) as exc:
                if strict:
                    raise ValueError(f"{path}:{lineno}: not a trial record: {exc}") from None


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
        if previous is None or record.outcome != "infra_error" or previous.outcome == "infra_error":
            chosen[record.key] = record
    return sort_records(chosen.values())


def counted_records(records: Iterable[TrialRecord]) -> list[TrialRecord]:
    """Records that count towards consistency and percentiles: infra errors never do."""
    return [r for r in records if r.outcome != "infra_error"]


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
        from .tasks import load_tasks

        task = load_tasks().get(slug)
    except Exception:  # noqa: BLE001 - a broken spec directory must not break reading results
        return False
    return task is not None and bool(task.leaderboard) and task.source != "replica"


NO_LEADERBOARD = "no leaderboard (schema replica or none given)"
NOT_COMPARABLE = "valid submissions got no comparable leaderboard percentile"


@dataclass
class PercentileCell:
    """The percentile figures of one cell's counted trials (the paper's rule: a trial without a
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
    the record has one). Without any valid trial the task's leaderboard flag decides.
    """
    counted = counted_records(records)
    valid = [r for r in counted if r.valid]
    if any(r.percentile is not None for r in valid):
        return None
    if valid:
        notes = sorted({str(getattr(r, "percentile_note", None) or r.extra.get("percentile_note") or "")
                        for r in valid} - {""})
        return "; ".join(notes) if notes else NOT_COMPARABLE
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


def normalized_values(records: Iterable[TrialRecord]) -> list[float]:
    """Normalized scores of counted trials (invalid → 0); empty when the task has no leaderboard."""
    counted = counted_records(records)
    if not (any(r.percentile is not None for r in counted) or _has_leaderboard(counted)):
        return []
    return [float(r.normalized) if r.valid else 0.0 for r in counted if not r.valid or r.normalized is not None]


def group_by(records: Iterable[TrialRecord], *attrs: str) -> dict[tuple, list[TrialRecord]]:
    """Records grouped by the given attributes, keys in sorted order."""
    groups: dict[tuple, list[TrialRecord]] = {}
    for record in records:
        groups.setdefault(tuple(getattr(record, a) for a in attrs), []).append(record)
    return {k: groups[k] for k in sorted(groups)}


def read_run_records(run_dir: Path) -> list[TrialRecord]:
    """The deduplicated, sorted records of one run directory (empty when it has no results yet)."""
    return latest_records(read_records(Path(run_dir) / RESULTS_FILE))


def model_label(model: str, synthetic: bool) -> str:
    """The model name, marked when it is the synthetic policy."""
    return f"{model} {SYNTHETIC_LABEL}" if synthetic else model
