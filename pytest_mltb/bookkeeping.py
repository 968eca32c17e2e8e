"""The run directory: results.jsonl, trajectories beside it, what ``--resume`` skips (controller side)."""
from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .collection import Case, Plan

if TYPE_CHECKING:
    from mltb_core.analysis.records import TrialRecord
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
        """Take the run directory for this session, once (the run store's lock; a second session is a
        usage error naming the owner)."""
        if self._lock is not None:
            return
        from mltb_core.analysis.runstore import RunInUseError

        try:
            self._lock = self.store.claim()
        except RunInUseError as exc:
            raise pytest.UsageError(f"mltb: {exc}; wait for it to end or choose another --mltb-out") from None

    def release(self) -> None:
        """Give the run directory up (end of session)."""
        if self._lock is not None:
            self.store.release(self._lock)
            self._lock = None

    @property
    def results_path(self) -> Path:
        return self.store.results_path

    def read_existing(self) -> list:
        """The records already in the file, read once. A directory or an unreadable file is a usage
        error before anything runs; lines that are not records are kept in ``unreadable`` (reported,
        then skipped, so --resume reruns their trials) instead of crashing the run."""
        if self._existing is None:
            from mltb_core.analysis.resultsfile import ResultsFileError

            try:
                self.store.check()
                self._existing, self.unreadable = self.store.scan()
            except ResultsFileError as exc:
                raise pytest.UsageError(f"mltb: {exc}") from None
        return self._existing

    def done_records(self, plan: Plan) -> dict[str, TrialRecord]:
        """The records of ``plan``'s cases already recorded with a real outcome (infra errors are rerun)
        under the configuration that case runs with now, by case id."""
        from mltb_core.analysis.records import Outcome
        from mltb_core.analysis.results import latest_records

        done: dict[str, TrialRecord] = {}
        for record in latest_records(self.read_existing()):
            case = plan.case_of_record(record)
            if case and record.outcome != Outcome.INFRA_ERROR and record.config_hash == plan.config(case).config_hash():
                done[case.id] = record
        return done

    def write(self, record, trajectory_text: str | None, keep_work: bool) -> None:
        """Append ``record`` and its trajectory (if any) to the run store (which then clears its work directory
        unless ``keep_work``)."""
        self.store.write(record, trajectory_text, keep_work=keep_work)

    @staticmethod
    def crash_record(case: Case, config, why: str):
        """The infrastructure-error record of a case whose worker died while running it (built like every
        record from the case's configuration, so it names the board and toolset like the others)."""
        from mltb_core.analysis.records import Outcome, TrialRecord
        from mltb_core.bench.stops import StopKind

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
