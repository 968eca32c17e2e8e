"""The confined solve-and-grade step that trials and replays share.

:func:`solve_and_grade` starts a trial's tool worker (:mod:`mltb_core.runner.worker`, confined to the
sandbox and the agent's copy of the data, never the labels), lets the caller's solver drive it — a
planner's search (:func:`mltb_core.runner.trial.run_trial`) or a fixed list of calls
(:func:`mltb_core.runner.expert.run_calls`) — ends the worker, and grades the answer's submission bytes
here, in the trusted process, the only one that reads the held-out labels. It returns a :class:`Solved`.

Outcome by origin: a worker that dies, hangs, floods or overruns its quota while running what the model
asked for, and a submission the grader refuses, are the model's failure with the reason (in the result,
never raised); a worker that cannot be confined or started, and whatever the solver itself raises (the
LLM server, the machine), propagate for the caller to record as an infrastructure error.
"""
from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Optional, TypeVar

from filelock import FileLock

from mltb_core.bench.tasks import SUBMISSION_FILE, Task, percentile_note
from mltb_core.toolkit.textsafety import cap_text

from mltb_core.config import TrialConfig

if TYPE_CHECKING:
    from mltb_core.bench.grading import Grade
    from mltb_core.runner.worker import WorkerWorkspace

__all__ = ["Solved", "WorkerSettings", "solve_and_grade", "prepare_agent_data", "solver_paths", "check_grants",
           "ConfinementError", "start_worker", "fresh_dirs", "UNCONFINED_HINT", "check_confinement",
           "NO_SUBMISSION", "confinement_label", "trial_default"]

T = TypeVar("T")
NO_SUBMISSION = "no submission written"


def prepare_agent_data(split: Any, out_dir: Path) -> Path:
    """Copy train.csv and test.csv (never the labels) to a read-only data dir the agent may read."""
    from mltb_core.analysis.runstore import agent_data_dir

    dest = agent_data_dir(out_dir, split.task.slug, split.seed)
    marker = dest / ".complete"
    if marker.exists():
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    with FileLock(str(dest) + ".lock"):
        if not marker.exists():
            for src in (split.train_path, split.test_path):
                shutil.copyfile(src, dest / Path(src).name)
                (dest / Path(src).name).chmod(0o444)   # the task's files: nobody writes them
            marker.touch()
    return dest


def solver_paths(data_dir: Path, sandbox: Path, scratch: Path) -> tuple[list[str], list[str]]:
    """What a trial's tool worker may read, and read and write (see :func:`confine.confine`).

    Read: the Python installation and imported packages, system libraries, the agent's data dir
    (train.csv and test.csv). Read and write: the sandbox and a scratch dir for temporary files.
    Nothing else: not the split cache (held-out labels), not the bundled raw data, not the LLM
    response cache, not other trials' sandboxes, not the run directory.
    """
    from mltb_core.runner.confine import SYSTEM_READ_WRITE, python_read_paths, system_read_paths

    read_only = system_read_paths() + python_read_paths() + [str(Path(data_dir).resolve())]
    read_write = [str(Path(sandbox).resolve()), str(Path(scratch).resolve()), *SYSTEM_READ_WRITE]
    return read_only, read_write


class ConfinementError(RuntimeError):
    """The tool worker cannot be confined as required (no Landlock without the opt-in, or grants that
    would expose the held-out labels)."""


UNCONFINED_HINT = ("without Landlock the worker could read the held-out labels: use a Linux kernel with "
                   "Landlock (5.13+), or pass --unconfined (MLTB_UNCONFINED=1) to run anyway; every record "
                   "and table then says the run was unconfined")


def check_confinement(unconfined: bool) -> str:
    """Fail closed before any trial: without Landlock a run needs the explicit opt-in. Returns the
    confinement that trials will have, in words."""
    from mltb_core.runner.confine import landlock_abi

    abi, reason = landlock_abi()
    if abi:
        return f"landlock-abi{abi}"
    if not unconfined:
        raise ConfinementError(f"Landlock is unavailable here ({reason}); {UNCONFINED_HINT}")
    return f"none: {reason} (unconfined: opted in)"


def check_grants(grants: list[str], secrets: list[Path]) -> None:
    """Refuse grants that contain a secret path (e.g. the data dir placed inside the split cache)."""
    from mltb_core.toolkit.sandbox import is_inside

    for grant in grants:
        for secret in secrets:
            if is_inside(Path(secret).resolve(), Path(grant).resolve()):
                raise ConfinementError(f"the tool worker would be allowed to read {secret} through {grant}; "
                                       "keep the run directory and caches apart from MLTB_CACHE (splits)")


def trial_default(name: str) -> Any:
    """The default of a TrialConfig field: a replay runs its calls under a trial's defaults."""
    return TrialConfig.__dataclass_fields__[name].default


@dataclass(frozen=True)
class WorkerSettings:
    """How a trial's or replay's tool worker runs (where it works is given apart)."""

    toolset: str | None          # None: every registered tool (a replay without a declared toolset)
    threads: int
    seed: int
    tool_time_limit: float | None
    max_features: int = trial_default("max_features")
    unconfined: bool = False     # the user's explicit opt-in to run without Landlock

    @classmethod
    def of(cls, config: TrialConfig) -> WorkerSettings:
        """A trial's worker settings, from its configuration."""
        return cls(toolset=config.toolset, threads=config.threads, seed=config.trial_seed,
                   tool_time_limit=config.tool_time_limit, max_features=config.max_features,
                   unconfined=config.unconfined)


def start_worker(task: Task, data_dir: Path, sandbox: Path, scratch: Path, secrets: list[Path],
                 settings: WorkerSettings) -> WorkerWorkspace:
    """The tool worker of a trial or replay, confined to the sandbox and the agent's data (never
    ``secrets``); without Landlock it refuses unless ``settings.unconfined`` (the user's explicit opt-in)."""
    from mltb_core.runner.worker import WorkerInit, WorkerWorkspace
    from mltb_core.toolkit.limits import sandbox_quota, tool_memory_limit
    from mltb_core.toolkit.registry import REGISTRY, tool_modules

    read_only, read_write = solver_paths(data_dir, sandbox, scratch)
    check_grants(read_only + read_write, secrets)
    workspace = WorkerWorkspace(WorkerInit(
        task=task, toolset=settings.toolset, data_dir=str(data_dir), sandbox=str(sandbox), scratch=str(scratch),
        read_only=read_only, read_write=read_write, max_features=settings.max_features, threads=settings.threads,
        seed=settings.seed, tool_time_limit=settings.tool_time_limit, memory_budget=tool_memory_limit(),
        disk_quota=sandbox_quota(), tool_modules=tuple(tool_modules(REGISTRY))))
    if not workspace.landlock and not settings.unconfined:
        workspace.close()
        raise ConfinementError(f"the tool worker could not be confined ({workspace.confinement}); "
                               f"{UNCONFINED_HINT}")
    return workspace


def fresh_dirs(*directories: Path) -> None:
    """Empty directories for a new trial or replay (a rerun starts from nothing)."""
    for directory in directories:
        if directory.exists():
            shutil.rmtree(directory)
        directory.mkdir(parents=True)


def confinement_label(workspace: WorkerWorkspace) -> str:
    """The confinement a worker reported before any model text reached it; records and tables keep it."""
    return workspace.confinement + ("" if workspace.landlock else " (unconfined: opted in)")


@dataclass(frozen=True)
class Solved(Generic[T]):
    """What the trusted process knows after a confined solve: the solver's own result and the answer's
    submission, graded here."""

    result: T | None               # what the solver returned; None when the worker failed under it
    submission: bytes | None       # the answer's submission bytes, as graded
    grade: Grade | None            # None: nothing to grade (no submission, or the worker failed)
    worker_failure: str | None     # why the worker died, hung, flooded or overran its quota (the model's failure)
    worker_stderr: str             # the tail of the worker's stderr after such a failure
    confinement: str               # see confinement_label
    worker_start_seconds: float
    solve_seconds: float           # the solver's run, the worker's end included
    peak_mib: float | None         # the worker's peak resident memory above its size when ready

    @property
    def valid(self) -> bool:
        return self.grade is not None and self.grade.valid

    @property
    def invalid_reason(self) -> str:
        """Why the answer is not a valid submission ("" when it is)."""
        if self.worker_failure is not None:
            return self.worker_failure
        return NO_SUBMISSION if self.grade is None else ("" if self.grade.valid else self.grade.reason)

    def grade_fields(self, task: Task, board: str, counted: bool = True) -> dict[str, Any]:
        """The grade's fields of a TrialRecord (the one place they are mapped onto the record). A trial
        without a valid grade carries the task's percentile note too, so tables can exclude the task
        without a valid trial. ``counted=False``: a valid file the trial does not count (made without a
        model, see rewards.PathLog.valid_submission) is recorded as no valid grade."""
        valid = self.valid and counted
        grade = self.grade if valid else None
        return {"valid": valid, "score": grade.score if grade else None,
                "percentile": grade.percentile if grade else None, "medal": grade.medal if grade else None,
                "normalized": grade.normalized if grade else None,
                "percentile_note": grade.percentile_note if grade else percentile_note(task, board=board),
                **(grade.row_bootstrap_fields() if grade else {})}


def _grade(task: Task, submission: bytes | None, graded: Path, split: Any, board: str) -> Grade | None:
    """Grade the answer's bytes here (the only process that reads labels); None when there are none. A
    submission the grader cannot take is an invalid grade with the reason, never an error of the harness."""
    from mltb_core.bench.grading import Grade, grade_submission

    graded.parent.mkdir(parents=True, exist_ok=True)
    graded.unlink(missing_ok=True)
    if submission is None:
        return None
    graded.write_bytes(submission)
    try:
        return grade_submission(task, graded, split, board)
    except Exception as exc:  # noqa: BLE001 - hostile bytes must not become an infrastructure error
        return Grade.invalid(cap_text(f"the grader refused the submission ({type(exc).__name__}: {exc})", 500))


def _restore_submission(path: Path, data: bytes | None) -> None:
    """Put the answer's submission bytes at the sandbox's submission path, whatever the solver left
    there (a file, a symlink, a directory); never writing through a link."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)
    if data is None:
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


# The solver: drives the worker, returns its own result and the answer's submission bytes (None: none).
Solver = Callable[["WorkerWorkspace"], tuple[T, Optional[bytes]]]


def solve_and_grade(task: Task, split: Any, data_dir: Path, sandbox: Path, graded: Path,
                    settings: WorkerSettings, solve: Solver[T], board: str) -> Solved[T]:
    """Run ``solve`` against a fresh confined tool worker in a fresh ``sandbox`` and grade its answer.

    ``data_dir`` is the agent's copy of the data (:func:`prepare_agent_data`); the worker's scratch dir
    is ``<sandbox>.tmp``, emptied too and removed at the end; the answer's bytes are graded from the copy
    ``graded`` and put back at the sandbox's submission path (the files of a search tree's branches are
    shared). A :class:`~mltb_core.runner.worker.WorkerFailed` under ``solve`` is the model's failure,
    returned in the result; everything else ``solve`` raises propagates, the worker ended.
    """
    from mltb_core.runner.worker import QuotaExceeded, WorkerFailed

    scratch = sandbox.with_name(sandbox.name + ".tmp")
    fresh_dirs(sandbox, scratch)
    workspace = start_worker(task, data_dir, sandbox, scratch, [split.dir, split.labels_path], settings)
    started = time.perf_counter()
    result, submission, failure, peak = None, None, None, None
    try:
        result, submission = solve(workspace)
        peak = workspace.peak_memory_mib()
    except WorkerFailed as exc:
        failure = str(exc)
        if isinstance(exc, QuotaExceeded):   # what overran the quota must not outlive the trial on disk
            fresh_dirs(sandbox)   # the worker is dead already (_fail killed its session)
    finally:
        workspace.close()
        shutil.rmtree(scratch, ignore_errors=True)   # the worker's temporary files
    common = dict(confinement=confinement_label(workspace), worker_start_seconds=workspace.start_seconds,
                  solve_seconds=time.perf_counter() - started, peak_mib=peak)
    if failure is not None:
        return Solved(result=None, submission=None, grade=None, worker_failure=failure,
                      worker_stderr=workspace.stderr_tail(), **common)
    grade = _grade(task, submission, graded, split, board)
    _restore_submission(sandbox / SUBMISSION_FILE, submission)
    return Solved(result=result, submission=submission, grade=grade, worker_failure=None, worker_stderr="",
                  **common)
