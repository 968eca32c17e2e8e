"""The run directory: results.jsonl, trajectories beside it, what ``--resume`` skips (controller side)."""
from __future__ import annotations

import functools
import json
import os
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .collection import Case, Plan

if TYPE_CHECKING:
    from mltb_core.analysis.results import TrialRecord
    from mltb_core.analysis.runstore import RunStore

__all__ = ["RunBook"]


class RunBook:
    """The controller's side of the run store (``mltb_core.analysis.runstore``): what ``--resume`` skips,
    and the records it appends; only the controller writes them."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        self.unreadable: list = []
        self._existing: list | None = None
        self._lock: Any = None   # a filelock.FileLock while this session owns the run directory

    @functools.cached_property
    def store(self) -> RunStore:
        """The run directory's layout; built on first use, so a pytest run without benchmark items imports no
        analysis module (the plugin loads in every pytest run of the environment)."""
        from mltb_core.analysis.runstore import RunStore

        return RunStore(self.run_dir)

    def claim(self) -> None:
        """Take the run directory for this session, once: two sessions appending to one results.jsonl and
        recreating each other's live sandboxes would interleave records and spoil trials. The controller
        claims it; its xdist workers share it (they never call this). A second session is refused with one
        line naming the owner."""
        if self._lock is not None:
            return
        from filelock import FileLock, Timeout

        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            lock = FileLock(str(self.store.session_lock_path))
            lock.acquire(timeout=0)
        except Timeout:
            raise pytest.UsageError(f"mltb: the run directory {self.run_dir} is in use by another session "
                                    f"({self._owner()}); wait for it to end or choose another --mltb-out") from None
        except OSError as exc:
            raise pytest.UsageError(f"mltb: cannot use the run directory {self.run_dir}: "
                                    f"{exc.strerror or exc}") from None
        self._lock = lock
        owner = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        self.store.session_owner_path.write_text(json.dumps(owner) + "\n", encoding="utf-8")

    def _owner(self) -> str:
        try:
            owner = json.loads(self.store.session_owner_path.read_text(encoding="utf-8")[:1_000])
            return f"pid {int(owner['pid'])} on {str(owner['host'])[:100]}, started {str(owner['started'])[:40]}"
        except (OSError, ValueError, KeyError, TypeError):
            return "owner unknown"

    def release(self) -> None:
        """Give the run directory up (end of session)."""
        if self._lock is not None:
            self.store.session_owner_path.unlink(missing_ok=True)
            self._lock.release()
            self._lock = None

    @property
    def results_path(self) -> Path:
        return self.store.results_path

    def read_existing(self) -> list:
        """The records already in the file, read once. A directory or an unreadable file is a usage
        error before anything runs; lines that are not records are kept in ``unreadable`` (reported,
        then skipped, so --resume reruns their trials) instead of crashing the run."""
        if self._existing is None:
            from mltb_core.analysis.results import ResultsFileError

            try:
                self.store.check()
                self._existing, self.unreadable = self.store.scan()
            except ResultsFileError as exc:
                raise pytest.UsageError(f"mltb: {exc}") from None
        return self._existing

    def done_records(self, plan: Plan) -> dict[str, TrialRecord]:
        """The records of ``plan``'s cases already recorded with a real outcome (infra errors are rerun)
        under the configuration that case runs with now, by case id."""
        from mltb_core.analysis.results import Outcome, latest_records

        done: dict[str, TrialRecord] = {}
        for record in latest_records(self.read_existing()):
            case = plan.case_of_record(record)
            if case and record.outcome != Outcome.INFRA_ERROR and record.config_hash == plan.config(case).config_hash():
                done[case.id] = record
        return done

    def write(self, record, trajectory_text: str | None) -> None:
        """Append ``record`` and its trajectory (if any) to the run store."""
        self.store.write(record, trajectory_text)

    @staticmethod
    def crash_record(case: Case, config, why: str):
        """The infrastructure-error record of a case whose worker died while running it (built like every
        record from the case's configuration, so it names the board and toolset like the others)."""
        from mltb_core.analysis.results import Outcome, StopKind, TrialRecord

        return TrialRecord.for_config(case.task, config, Outcome.INFRA_ERROR, stop_reason="worker crashed",
                                      stop_kind=StopKind.ERROR,
                                      error=f"{why} (killed, segfault or out of memory)")

    def run_records(self, plan: Plan | None) -> list:
        """This run's records: the plan's cases under their configuration, deduplicated (latest wins)."""
        from mltb_core.analysis.results import latest_records

        if plan is None or not self.results_path.is_file():
            return []
        # Unreadable lines were reported at start-up; lines this run appended are whole.
        wanted = {c.id: plan.config(c).config_hash() for c in plan.cases}
        return [r for r in latest_records(self.store.scan()[0])
                if wanted.get(r.case_id) == r.config_hash]
