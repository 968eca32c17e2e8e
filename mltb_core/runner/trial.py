"""One trial: (task, planner, model, seed) → search → graded submission → TrialRecord.

Both ``mltb run`` and the pytest item call :func:`run_trial`. It never raises for
planner or infrastructure trouble; the record's ``outcome`` says what happened:
``valid`` (a valid submission), ``planner_failure`` (searched and failed) or
``infra_error`` (the model API or the machine failed; never counted against the planner).
"""
from __future__ import annotations

import json
import os
import shutil
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock

from mltb_core.llm import prompts
from mltb_core.config import TrialConfig, case_id
from mltb_core.toolkit.textsafety import cap_text
from mltb_core.analysis.results import TrialRecord
from mltb_core.bench.stages import STAGE_COUNT
from mltb_core.bench.tasks import SUBMISSION_FILE, Task, percentile_note
from mltb_core.planners.trajectory import TrajectoryWriter

__all__ = ["run_trial", "prepare_agent_data", "solver_paths", "check_grants",
           "ConfinementError", "start_worker", "fresh_dirs", "UNCONFINED_HINT", "check_confinement"]


def prepare_agent_data(split: Any, out_dir: Path) -> Path:
    """Copy train.csv and test.csv (never the labels) to a read-only data dir the agent may read."""
    dest = Path(out_dir) / "data" / f"{split.task.slug}-seed{split.seed}"
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


def _prepare_backend(llm: Any) -> None:
    """Start or join a long-lived model server (local llama.cpp) before the trial starts."""
    server = getattr(llm, "server", None)
    if server is not None:
        server.acquire()


@dataclass
class SearchOutcome:
    """What the trusted side knows after the search: the answer's node and its own counters."""

    best: Any
    stop_reason: str
    usage: Any
    tool_calls: int
    tree_nodes: int
    tool_seconds: float


def _search(task: Task, config: TrialConfig, llm: Any, workspace: Any, data_dir: Path, writer: TrajectoryWriter,
            planner_cls: Any) -> SearchOutcome:
    """Planner + LLM calls here, in the trusted process; every tool call runs in ``workspace``."""
    from mltb_core.planners.episode import Episode

    feedback = planner_cls.feedback_enabled(config)
    episode = Episode(task, config, llm, workspace, data_dir, writer, feedback=feedback)
    writer.write("trial_start", task=task.slug, config=config.to_dict(), seed=config.trial_seed,
                 synthetic=llm.synthetic, feedback=feedback, prompt=episode.task_prompt)
    result = planner_cls(episode, config).run()
    writer.write("search_summary", **episode.summary(result.best, result.stop_reason))
    return SearchOutcome(result.best, result.stop_reason, episode.usage, episode.tool_calls, episode.nodes,
                         episode.tool_seconds)


def start_worker(task: Task, data_dir: Path, sandbox: Path, scratch: Path, secrets: list[Path], *,
                 toolset: str | None, threads: int, seed: int, tool_time_limit: float | None,
                 max_features: int = 1000, unconfined: bool = False) -> Any:
    """The tool worker of a trial or replay, confined to the sandbox and the agent's data (never
    ``secrets``); without Landlock it refuses unless ``unconfined`` (the user's explicit opt-in)."""
    from mltb_core.runner.worker import WorkerInit, WorkerWorkspace
    from mltb_core.toolkit.limits import sandbox_quota, tool_memory_limit
    from mltb_core.toolkit.registry import REGISTRY, tool_modules

    read_only, read_write = solver_paths(data_dir, sandbox, scratch)
    check_grants(read_only + read_write, secrets)
    workspace = WorkerWorkspace(WorkerInit(
        task=task, toolset=toolset, data_dir=str(data_dir), sandbox=str(sandbox), scratch=str(scratch),
        read_only=read_only, read_write=read_write, max_features=max_features, threads=threads, seed=seed,
        tool_time_limit=tool_time_limit, memory_budget=tool_memory_limit(), disk_quota=sandbox_quota(),
        tool_modules=tuple(tool_modules(REGISTRY))))
    if not workspace.landlock and not unconfined:
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


def _grade(task: Task, submission: bytes | None, graded: Path, split: Any, board: str) -> tuple[Any, str]:
    """Grade the answer's bytes here (the only process that reads labels). A submission the grader
    cannot take is the model's failure with the reason, never an error of the harness."""
    from mltb_core.bench.grading import grade_submission

    graded.parent.mkdir(parents=True, exist_ok=True)
    graded.unlink(missing_ok=True)
    if submission is None:
        return None, "no submission written"
    graded.write_bytes(submission)
    try:
        grade = grade_submission(task, graded, split, board)
    except Exception as exc:  # noqa: BLE001 - hostile bytes must not become an infrastructure error
        return None, cap_text(f"the grader refused the submission ({type(exc).__name__}: {exc})", 500)
    return grade, "" if grade.valid else grade.reason


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


def run_trial(task: Task, config: TrialConfig, out_dir: Path, split: Any = None) -> TrialRecord:
    """Run one trial and grade it; ``split`` may be given when the caller already prepared it.

    Privilege separation: the planner and the LLM calls run here, every tool call in a fresh, confined
    worker process (:mod:`mltb_core.runner.worker`) that holds the scratchpads and answers with checked
    plain data. This process counts tokens and cost, writes the trajectory and the record, and alone
    reads the held-out labels to grade the answer's bytes. The outcome follows the origin: the LLM
    server or API failing, the machine, or a bug of mltb's own is an ``infra_error``; anything that
    happened while running, observing, scoring or rewarding what the model asked for (the worker dying
    or hanging included) is the model's ``planner_failure``.
    """
    from mltb_core.llm import make_backend
    from mltb_core.llm.base import InfraError
    from mltb_core.planners import get_planner_class
    from mltb_core.bench.splits import prepare_split
    from mltb_core.runner.worker import WorkerFailed
    from mltb_core.toolkit import tools  # noqa: F401  (registers the toolset)

    out_dir = Path(out_dir)
    ident = case_id(task.slug, config.planner, config.model, config.trial)
    started = time.monotonic()
    seed = config.trial_seed
    base = dict(task=task.slug, planner=config.planner, model=config.model.text, trial=config.trial, seed=seed,
                config_hash=config.config_hash(), synthetic=config.model.synthetic,
                board=config.board, toolset=config.toolset)
    planner_cls = get_planner_class(config.planner)   # unknown names are usage errors: raise
    trajectory_path = out_dir / "trajectories" / f"{ident}.jsonl"
    writer = TrajectoryWriter(trajectory_path)
    llm = workspace = None
    extra: dict[str, Any] = {"leaderboard": task.has_leaderboard}   # every front end's records carry it

    def ended(outcome: str, reason: str, error: str) -> TrialRecord:
        return TrialRecord(**base, outcome=outcome, stop_reason=reason, error=error,
                           wall_seconds=time.monotonic() - started, trajectory=str(trajectory_path), extra=extra)

    try:
        split = split or prepare_split(task, seed=config.seed)
        data_dir = prepare_agent_data(split, out_dir)
        sandbox = out_dir / "sandboxes" / ident
        scratch = out_dir / "sandboxes" / f"{ident}.tmp"
        fresh_dirs(sandbox, scratch)
        llm = make_backend(config.model, seed=seed, cache=True if config.llm_cache else None)
        _prepare_backend(llm)
        workspace = start_worker(task, data_dir, sandbox, scratch, [split.dir, split.labels_path],
                                 toolset=config.toolset, threads=config.threads, seed=seed,
                                 tool_time_limit=config.tool_time_limit, max_features=config.max_features,
                                 unconfined=config.unconfined)
        extra["confinement"] = workspace.confinement + (" (unconfined: opted in)" if not workspace.landlock else "")
        extra["worker_start_seconds"] = round(workspace.start_seconds, 3)
        try:
            found = _search(task, config, llm, workspace, data_dir, writer, planner_cls)
        except WorkerFailed as exc:
            reason = f"the tool worker failed: {exc}"
            writer.write("worker_failed", reason=reason, stderr=workspace.stderr_tail())
            return ended("planner_failure", reason, reason)
        finally:
            workspace.close()
            shutil.rmtree(scratch, ignore_errors=True)   # the worker's temporary files
        best, usage = found.best, found.usage
        submission = best.log.submission
        grade, why_invalid = _grade(task, submission, out_dir / "submissions" / f"{ident}.csv", split, config.board)
        # Files are shared by all branches of a tree: put back the answer's own submission.
        _restore_submission(sandbox / SUBMISSION_FILE, submission)
        valid = bool(grade and grade.valid)
        stage = best.progress.stage
        if config.agent_memory:   # the search's own validity check (the last stage), never the graded labels
            from mltb_core.planners.agent_k import remember
            remember(task.slug, trajectory_path, stage >= STAGE_COUNT)
        feedback_text = best.progress.feedback or ("" if valid else why_invalid)
        return TrialRecord(
            **base, outcome="valid" if valid else "planner_failure", valid=valid,
            score=grade.score if grade else None, percentile=grade.percentile if grade else None,
            medal=grade.medal if grade else None, normalized=grade.normalized if grade else None,
            # failed trials carry the task's note too, so tables can exclude the task without a valid trial
            percentile_note=grade.percentile_note if grade else percentile_note(task, board=config.board),
            **(grade.row_bootstrap_fields() if grade else {}),
            stage_reached=stage, stage_name=best.progress.stage_name,
            stop_reason=found.stop_reason, feedback=feedback_text[:500],
            tokens_in=usage.prompt_tokens, tokens_in_cached=usage.cached_input_tokens,
            tokens_out=usage.completion_tokens, llm_calls=usage.calls, llm_retries=usage.retries,
            cost_usd=usage.cost_usd, tool_calls=found.tool_calls, tree_nodes=found.tree_nodes,
            wall_seconds=time.monotonic() - started, tool_seconds=found.tool_seconds,
            llm_seconds=usage.seconds, trajectory=str(trajectory_path),
            extra={"cached_llm_calls": usage.cached_calls, "best_depth": best.depth,
                   "submission_reason": "" if valid else why_invalid, **extra})
    except (InfraError, MemoryError, OSError, ConfinementError) as exc:
        writer.write("infra_error", error=repr(exc))
        return ended("infra_error", "infrastructure error", f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # noqa: BLE001 - a harness bug must not look like a planner failure
        writer.write("infra_error", error=traceback.format_exc())
        return ended("infra_error", "internal error",
                     f"internal error {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=6)}")
    finally:
        writer.close()
        if workspace is not None:
            workspace.close()
        if llm is not None:
            llm.close()


def write_prompts(out_dir: Path) -> Path:
    """Write every prompt text into the run directory (the run is reproducible from it)."""
    path = Path(out_dir) / "prompts.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(prompts.all_prompts(), indent=2))
    return path
