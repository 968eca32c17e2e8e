"""Trial records and the results.jsonl store.

One record per (task, planner, model, trial). Records are plain JSON so they can
travel inside pytest reports (``user_properties``) to the xdist controller and be
appended there; the file is the run's single source of truth and ``--resume`` reads it.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Iterator

from filelock import FileLock

__all__ = ["TrialRecord", "OUTCOMES", "append_records", "read_records", "record_key"]

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
