"""The run directory: results.jsonl, trajectories beside it, what ``--resume`` skips (controller side)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from .collection import Case, Plan

if TYPE_CHECKING:
    from mltb_core.analysis.results import TrialRecord

__all__ = ["RunBook"]


class RunBook:
    """Reads and appends ``<run_dir>/results.jsonl``; only the controller writes it."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        self.unreadable: list = []
        self._existing: list | None = None

    @property
    def results_path(self) -> Path:
        from mltb_core.analysis.results import RESULTS_FILE   # analysis imports pandas: only when needed

        return self.run_dir / RESULTS_FILE

    def read_existing(self) -> list:
        """The records already in the file, read once. A directory or an unreadable file is a usage
        error before anything runs; lines that are not records are kept in ``unreadable`` (reported,
        then skipped, so --resume reruns their trials) instead of crashing the run."""
        if self._existing is None:
            from mltb_core.analysis.results import ResultsFileError, check_results_file, scan_records

            try:
                check_results_file(self.results_path)
                self._existing, self.unreadable = scan_records(self.results_path)
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
        """Append ``record``; its trajectory (if any) goes to ``trajectories/<hash>/<case id>.jsonl``."""
        from mltb_core.analysis.results import TRAJECTORY_DIR, append_records

        if trajectory_text is not None:
            relative = Path(TRAJECTORY_DIR) / record.config_hash / f"{record.case_id}.jsonl"
            target = self.run_dir / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(trajectory_text, encoding="utf-8")
            record.trajectory = relative.as_posix()
        append_records(self.results_path, [record])

    @staticmethod
    def crash_record(case: Case, config, why: str):
        """The infrastructure-error record of a case whose worker died while running it (built like every
        record from the case's configuration, so it names the board and toolset like the others)."""
        from mltb_core.analysis.results import Outcome, TrialRecord

        return TrialRecord.for_config(case.task, config, Outcome.INFRA_ERROR, stop_reason="worker crashed",
                                      error=f"{why} (killed, segfault or out of memory)")

    def run_records(self, plan: Plan | None) -> list:
        """This run's records: the plan's cases under their configuration, deduplicated (latest wins)."""
        from mltb_core.analysis.results import latest_records, scan_records

        if plan is None or not self.results_path.is_file():
            return []
        # Unreadable lines were reported at start-up; lines this run appended are whole.
        wanted = {c.id: plan.config(c).config_hash() for c in plan.cases}
        return [r for r in latest_records(scan_records(self.results_path)[0])
                if wanted.get(r.case_id) == r.config_hash]
