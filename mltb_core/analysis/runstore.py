"""The run directory: the one module that names a file in it.

Both front ends (``mltb run`` and the pytest plugin) write the same layout, and every reader (``mltb
report``, ``export``, ``compare``, ``--resume``) finds files through :class:`RunStore`::

    <run>/results.jsonl                        the trial records (analysis/records.py: one JSON line each)
    <run>/prompts.json                         every prompt text the run used
    <run>/trajectories/<config hash>/<case>.jsonl   each trial's trajectory; records hold this path, relative
    <run>/work/<case>/[attempt<n>/]            one trial attempt's working files (:class:`TrialFiles`), removed
                                               once its record is written (:meth:`RunStore.write`):
        trajectories/<case>.jsonl              the trajectory while the trial writes it
        checkpoints/<case>.jsonl               every answered LLM request, which a resumed trial replays
                                               (mltb_core/runner/checkpoint.py); removed by a trial that
                                               ends with a record other than an infrastructure error
        sandboxes/<case>/                      the tool worker's sandbox
        submissions/<case>.csv                 the parent's copy of the submission it grades
        data/<task>-seed<seed>/                the task's train/test files the agent may read
    <run>/report/                              ``mltb report``'s default output
    <run>/.mltb-session.lock, .mltb-session.json    the session (pytest or ``mltb run``) that owns the run,
                                               and who it is

Older run directories stay readable: a record of ``mltb run`` before this layout holds its trajectory's
absolute path (``<run>/trajectories/<case>.jsonl``), which :meth:`RunStore.trajectory_path` still finds.
"""
from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mltb_core.analysis.records import TrialRecord
    from mltb_core.analysis.resultsfile import UnreadableLine

__all__ = ["bounded_file_name", "MAX_FILE_NAME_BYTES", "RunStore", "TrialFiles", "RESULTS_FILE", "TRAJECTORY_DIR", "PROMPTS_FILE", "REPORT_DIR", "WORK_DIR",
           "NotARunError", "RunInUseError", "agent_data_dir"]

RESULTS_FILE = "results.jsonl"
TRAJECTORY_DIR = "trajectories"
PROMPTS_FILE = "prompts.json"
REPORT_DIR = "report"
WORK_DIR = "work"
SESSION_LOCK = ".mltb-session.lock"    # held by the session that owns the run directory
SESSION_OWNER = ".mltb-session.json"   # who holds it: pid, host, start time
_SANDBOX_DIR = "sandboxes"
_CHECKPOINT_DIR = "checkpoints"
_SUBMISSION_DIR = "submissions"
_DATA_DIR = "data"


class NotARunError(FileNotFoundError):
    """A directory given as a run holds no results file."""


class RunInUseError(RuntimeError):
    """The run directory is owned by another session, or cannot be claimed; the message says which."""


# File names made from record content (a trial's case id holds its model string) stay below the 255 bytes
# a file system allows: a longer one keeps its start and ends in a digest of the whole.
MAX_FILE_NAME_BYTES = 200


def bounded_file_name(stem: str, suffix: str) -> str:
    """``stem + suffix``, or when that is longer than :data:`MAX_FILE_NAME_BYTES` (UTF-8), the stem's first
    characters and 16 hex digits of its SHA-256 (so two long names stay apart)."""
    if len((stem + suffix).encode()) <= MAX_FILE_NAME_BYTES:
        return stem + suffix
    head = stem.encode()[:MAX_FILE_NAME_BYTES - len(suffix.encode()) - 17].decode(errors="ignore")
    return f"{head}-{hashlib.sha256(stem.encode()).hexdigest()[:16]}{suffix}"


def _is_file(path: Path) -> bool:
    """``path.is_file()``, False for a path the system refuses (too long: a records file names it)."""
    try:
        return path.is_file()
    except OSError:
        return False


@dataclass(frozen=True)
class TrialFiles:
    """Where one attempt of a trial keeps its working files (``root`` is its work directory)."""

    root: Path
    case_id: str

    @property
    def trajectory(self) -> Path:
        return self.root / TRAJECTORY_DIR / bounded_file_name(self.case_id, ".jsonl")

    @property
    def checkpoint(self) -> Path:
        return self.root / _CHECKPOINT_DIR / f"{self.case_id}.jsonl"

    @property
    def sandbox(self) -> Path:
        return self.root / _SANDBOX_DIR / bounded_file_name(self.case_id, "")

    @property
    def submission(self) -> Path:
        return self.root / _SUBMISSION_DIR / bounded_file_name(self.case_id, ".csv")

    def data(self, task: str, seed: int) -> Path:
        return agent_data_dir(self.root, task, seed)


def agent_data_dir(root: Path | str, task: str, seed: int) -> Path:
    """The read-only copy of a task's split the agent reads, under a work directory (or a replay's)."""
    return Path(root) / _DATA_DIR / f"{task}-seed{seed}"


class RunStore:
    """One run directory: its records, trajectories, trial work directories and report."""

    def __init__(self, run_dir: Path | str):
        self.run_dir = Path(run_dir)

    def __repr__(self) -> str:
        return f"RunStore({str(self.run_dir)!r})"

    # ---- names -------------------------------------------------------------------------------------
    @property
    def results_path(self) -> Path:
        return self.run_dir / RESULTS_FILE

    @property
    def prompts_path(self) -> Path:
        return self.run_dir / PROMPTS_FILE

    @property
    def report_dir(self) -> Path:
        return self.run_dir / REPORT_DIR

    @property
    def session_lock_path(self) -> Path:
        return self.run_dir / SESSION_LOCK

    @property
    def session_owner_path(self) -> Path:
        return self.run_dir / SESSION_OWNER

    def work_dir(self, case_id: str, attempt: int = 1) -> Path:
        """The work directory of a trial's attempt (the first attempt's is the case's own)."""
        root = self.run_dir / WORK_DIR / bounded_file_name(case_id, "")
        return root if attempt <= 1 else root / f"attempt{attempt}"

    def checkpoints(self) -> list[Path]:
        """The checkpoints of trials that ran here without a record (or with an infrastructure error's): what a
        resumed trial's first attempt replays."""
        work = self.run_dir / WORK_DIR
        if not work.is_dir():
            return []
        found = (TrialFiles(self.work_dir(case.name), case.name).checkpoint for case in sorted(work.iterdir()))
        return [path for path in found if path.is_file()]

    @staticmethod
    def trajectory_name(record: TrialRecord) -> Path:
        """Where a recorded trial's trajectory goes, relative to the run directory (what the record holds)."""
        return Path(TRAJECTORY_DIR) / record.config_hash / bounded_file_name(record.case_id, ".jsonl")

    def trajectory_path(self, record: TrialRecord) -> Path | None:
        """The trajectory file of ``record`` in this run, or None when it has none that exists. Reads every
        layout mltb wrote: a path relative to the run (now), an absolute path (``mltb run`` before), and
        the flat ``trajectories/<case>.jsonl`` beside the records of a copied run."""
        if not record.trajectory:
            return None
        given = Path(record.trajectory)
        candidates = [given] if given.is_absolute() else [self.run_dir / given]
        candidates += [self.run_dir / self.trajectory_name(record),
                       self.run_dir / TRAJECTORY_DIR / bounded_file_name(record.case_id, ".jsonl")]
        return next((path for path in candidates if _is_file(path)), None)

    # ---- ownership ---------------------------------------------------------------------------------
    def claim(self) -> Any:
        """Take the run directory for this session and return the held lock (``release`` it at the end).

        Two sessions appending to one results.jsonl and recreating each other's live sandboxes would
        interleave records and spoil trials, so a second session (``mltb run`` or pytest) is refused with
        :class:`RunInUseError` naming the owner. pytest's controller claims it; its xdist workers share it."""
        import json
        import os
        import socket
        import time

        from filelock import FileLock, Timeout

        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            lock = FileLock(str(self.session_lock_path))
            lock.acquire(timeout=0)
        except Timeout:
            raise RunInUseError(f"the run directory {self.run_dir} is in use by another session "
                                f"({self._owner()})") from None
        except OSError as exc:
            raise RunInUseError(f"cannot use the run directory {self.run_dir}: {exc.strerror or exc}") from None
        owner = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        self.session_owner_path.write_text(json.dumps(owner) + "\n", encoding="utf-8")
        return lock

    def release(self, lock: Any) -> None:
        """Give up a run directory :meth:`claim` took."""
        self.session_owner_path.unlink(missing_ok=True)
        lock.release()

    def _owner(self) -> str:
        import json

        try:   # bounded: the owner file is in a directory a user hands in
            owner = json.loads(self.session_owner_path.read_text(encoding="utf-8")[:1_000])
            return f"pid {int(owner['pid'])} on {str(owner['host'])[:100]}, started {str(owner['started'])[:40]}"
        except (OSError, ValueError, KeyError, TypeError):
            return "owner unknown"

    # ---- records -----------------------------------------------------------------------------------
    def check(self) -> None:
        """:class:`~mltb_core.analysis.resultsfile.ResultsFileError` when the results file cannot be used."""
        from mltb_core.analysis.resultsfile import check_results_file

        check_results_file(self.results_path)

    def scan(self) -> tuple[list[TrialRecord], list[UnreadableLine]]:
        """Every record of the run as written, and the lines that are not records."""
        from mltb_core.analysis.resultsfile import scan_records

        return scan_records(self.results_path)

    def read(self) -> list[TrialRecord]:
        """The run's records as written (unreadable lines warned about and skipped)."""
        from mltb_core.analysis.resultsfile import read_records

        return list(read_records(self.results_path)) if self.results_path.is_file() else []

    def load(self) -> list[TrialRecord]:
        """The records a report reads: each with its trajectory as an absolute path (None when the file is
        gone); :class:`NotARunError` when the directory holds no results file."""
        if not self.results_path.is_file():
            raise NotARunError(f"{self.run_dir} is not an mltb run directory: {self.results_path} does not exist")
        out = []
        for record in self.read():
            path = self.trajectory_path(record)
            out.append(replace(record, trajectory=None if path is None else str(path.resolve())))
        return out

    def write(self, record: TrialRecord, trajectory_text: str | None, *, keep_work: bool = False) -> None:
        """Record a finished trial: its trajectory (if any) to :meth:`trajectory_name`, which the record then
        holds, and the record appended to the results file. Then its work directory (every attempt's) goes:
        the record and trajectory are the result, and ``mltb replay`` rebuilds a sandbox from the trajectory;
        a run of thousands of trials would otherwise keep a sandbox and a data copy for each. It stays with
        ``keep_work`` (``--keep-work``) and after an infrastructure error, whose cause may be in its files."""
        from mltb_core.analysis.records import Outcome
        from mltb_core.analysis.resultsfile import append_records

        if trajectory_text is not None:
            relative = self.trajectory_name(record)
            target = self.run_dir / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(trajectory_text, encoding="utf-8")
            record.trajectory = relative.as_posix()
        append_records(self.results_path, [record])
        work = self.work_dir(record.case_id).resolve()
        # a record a conftest built names its own task and model: remove only a directory of this run's work/
        if not keep_work and record.outcome != Outcome.INFRA_ERROR and work.parent == (self.run_dir / WORK_DIR).resolve():
            shutil.rmtree(work, ignore_errors=True)
