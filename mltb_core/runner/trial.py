"""One trial: (task, planner, model, seed) → search → graded submission → TrialRecord.

Both ``mltb run`` and the pytest item call :func:`run_trial`. It never raises for
planner or infrastructure trouble; the record's ``outcome`` says what happened:
``valid`` (a valid submission), ``planner_failure`` (searched and failed) or
``infra_error`` (the model API or the machine failed; never counted against the planner).
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from filelock import FileLock

from mltb_core.llm import prompts
from mltb_core.config import TrialConfig
from mltb_core.toolkit.limits import limit_threads
from mltb_core.llm.backends import is_synthetic, model_id
from mltb_core.toolkit.registry import ToolContext
from mltb_core.analysis.results import TrialRecord
from mltb_core.planners.rewards import StageContext
from mltb_core.bench.tasks import SUBMISSION_FILE, Task, percentile_note
from mltb_core.planners.trajectory import TrajectoryWriter

__all__ = ["run_trial", "item_id", "model_id", "prepare_agent_data", "solver_paths", "check_grants",
           "ConfinementError"]


def item_id(task_slug: str, config: TrialConfig) -> str:
    return f"{task_slug}-{config.planner}-{model_id(config.model)}-t{config.trial:02d}"


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
            marker.touch()
    return dest


def solver_paths(data_dir: Path, sandbox: Path, scratch: Path, llm: Any = None) -> tuple[list[str], list[str]]:
    """What a trial's solver process may read, and read and write (see :func:`confine.confine`).

    Read: the Python installation and imported packages, system libraries, the agent's data dir
    (train.csv and test.csv). Read and write: the sandbox, a scratch dir for temporary files and the
    LLM response cache. Nothing else: not the split cache (held-out labels), not the bundled raw
    data, not other trials' sandboxes, not the run directory (the trajectory is written through a
    file descriptor opened before the solver starts).
    """
    from mltb_core.runner.confine import SYSTEM_READ_WRITE, python_read_paths, system_read_paths

    read_only = system_read_paths() + python_read_paths() + [str(Path(data_dir).resolve())]
    read_write = [str(Path(sandbox).resolve()), str(Path(scratch).resolve()), *SYSTEM_READ_WRITE]
    cache = getattr(llm, "cache", None)
    if cache is not None and getattr(cache, "enabled", True):
        root = Path(cache.root).resolve()
        root.mkdir(parents=True, exist_ok=True)
        read_write.append(str(root))
    return read_only, read_write


class ConfinementError(RuntimeError):
    """The solver's grants would expose the held-out labels (a cache dir configured inside another)."""


def check_grants(grants: list[str], secrets: list[Path]) -> None:
    """Refuse grants that contain a secret path (e.g. the LLM cache dir set to the split cache's parent)."""
    from mltb_core.toolkit.sandbox import is_inside

    for grant in grants:
        for secret in secrets:
            if is_inside(Path(secret).resolve(), Path(grant).resolve()):
                raise ConfinementError(f"the solver would be allowed to read {secret} through {grant}; "
                                       "keep MLTB_CACHE_DIR (LLM cache) apart from MLTB_CACHE (splits)")


def _prepare_backend(llm: Any) -> None:
    """Start or join a long-lived model server here, in the unconfined parent (local llama.cpp):
    the confined solver only talks to it over loopback."""
    server = getattr(llm, "server", None)
    if server is not None:
        server.acquire()


def _search(task: Task, config: TrialConfig, llm: Any, stage_ctx: StageContext, tool_ctx: ToolContext,
            data_dir: Path, writer: TrajectoryWriter, planner_cls: Any, status: Any) -> dict[str, Any]:
    """The solver: planner + tool calls + LLM calls, in the confined child. Returns JSON-ready facts."""
    from mltb_core.llm.base import InfraError
    from mltb_core.planners.episode import Episode

    try:
        feedback = planner_cls.feedback_enabled(config)
        episode = Episode(task, config, llm, stage_ctx, tool_ctx, data_dir, writer, feedback=feedback)
        writer.write("trial_start", task=task.slug, config=config.to_dict(), seed=config.trial_seed,
                     synthetic=llm.synthetic, feedback=feedback, prompt=episode.task_prompt)
        planner = planner_cls(episode, config)
        with limit_threads(config.threads):
            result = planner.run()
        best = result.best
        writer.write("search_summary", **episode.summary(best, result.stop_reason))
        usage = episode.usage
        return {"submission": base64.b64encode(best.log.submission).decode() if best.log.submission is not None
                else None,
                "stage": best.progress.stage, "stage_name": best.progress.stage_name,
                "feedback": best.progress.feedback, "stop_reason": result.stop_reason,
                "tokens_in": usage.prompt_tokens, "tokens_in_cached": usage.cached_input_tokens,
                "tokens_out": usage.completion_tokens, "llm_calls": usage.calls,
                "llm_retries": usage.retries, "cost_usd": usage.cost_usd, "llm_seconds": usage.seconds,
                "cached_llm_calls": usage.cached_calls, "tool_calls": episode.tool_calls,
                "tree_nodes": episode.nodes, "tool_seconds": episode.tool_seconds, "best_depth": best.depth,
                "steps": writer.steps}
    except InfraError as exc:
        writer.write("infra_error", error=repr(exc))
        return {"infra_error": f"{type(exc).__name__}: {exc}", "steps": writer.steps}
    finally:
        writer.close()   # the backend is closed by the parent (a local server is its reference)


_NUMBERS = {"stage": int, "tokens_in": int, "tokens_in_cached": int, "tokens_out": int, "llm_calls": int, "llm_retries": int,
            "cost_usd": float, "llm_seconds": float, "cached_llm_calls": int, "tool_calls": int, "tree_nodes": int,
            "tool_seconds": float, "best_depth": int}
_TEXTS = ("stage_name", "feedback", "stop_reason")


def _checked(result: Any) -> dict[str, Any]:
    """The solver's result with every field of the expected type (it is hostile input: a child that
    escaped the tools could send anything); raises ValueError naming the bad field."""
    if not isinstance(result, dict):
        raise ValueError("the result is not an object")
    out: dict[str, Any] = {}
    for name, kind in _NUMBERS.items():
        value = result.get(name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"field {name!r} is not a number")
        out[name] = kind(value)
    for name in _TEXTS:
        if not isinstance(result.get(name), str):
            raise ValueError(f"field {name!r} is not text")
        out[name] = result[name]
    submission = result.get("submission")
    if submission is not None and not isinstance(submission, str):
        raise ValueError("field 'submission' is not base64 text")
    out["submission"] = base64.b64decode(submission, validate=True) if submission is not None else None
    return out


def _death_record(child: Any, budget: int | None) -> tuple[str, str]:
    """(outcome, stop reason) for a solver that sent no usable result.

    The rule: what the trial did to itself is a planner failure, what the machine did is an
    infrastructure error. A MemoryError (the trial's own address-space cap: RLIMIT_AS makes the
    trial's allocations fail instead of waking the kernel's OOM killer) and a native crash
    (SIGSEGV/SIGABRT/SIGBUS/SIGFPE/SIGILL in a library running the model's call) or an exit without a
    result (a tool calling os._exit) are the trial's doing. SIGKILL/SIGTERM/SIGHUP come from outside
    (the machine's OOM killer, an operator, a time-out of the harness) and are infrastructure errors,
    and so is any other exception the search raised (a harness bug must not count against a planner).
    """
    import signal as signals

    error = (child.payload or {}).get("error") if isinstance(child.payload, dict) else None
    if isinstance(error, dict) and error.get("memory"):
        size = f" of {budget / 2**30:.3g} GiB" if budget else ""
        return "planner_failure", f"the trial used up its memory budget{size} outside a tool call"
    if isinstance(error, dict):
        return "infra_error", "internal error in the solver process"
    if child.signal in (signals.SIGKILL, signals.SIGTERM, signals.SIGHUP):
        return "infra_error", f"solver process {child.death} (from outside the trial: OOM killer or operator)"
    if child.signal is not None:
        return "planner_failure", f"solver process {child.death} (a native library crashed on a tool call)"
    return "planner_failure", child.problem or f"solver process {child.death}"


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


def _resync(writer: TrajectoryWriter, steps: Any) -> None:
    """The parent writes after the solver: continue its step numbers (the file offset is shared)."""
    if isinstance(steps, int) and not isinstance(steps, bool) and steps >= 0:
        writer.steps = steps
    elif writer.path is not None:
        with open(writer.path, "rb") as handle:
            writer.steps = sum(1 for _ in handle)


def run_trial(task: Task, config: TrialConfig, out_dir: Path, split: Any = None) -> TrialRecord:
    """Run one trial and grade it; ``split`` may be given when the caller already prepared it.

    The search runs in a forked solver process confined to the trial's sandbox and the agent's
    data (:func:`confine.run_confined`); it sends back the best node's submission bytes and the
    counters as JSON, and this process, which alone may read the held-out labels, grades them.
    """
    from mltb_core.runner.confine import run_confined
    from mltb_core.bench.grading import grade_submission
    from mltb_core.toolkit.limits import tool_memory_limit
    from mltb_core.llm import make_backend
    from mltb_core.llm.base import InfraError
    from mltb_core.planners import get_planner_class
    from mltb_core.bench.splits import prepare_split
    from mltb_core.toolkit import tools  # noqa: F401  (registers the toolset)

    out_dir = Path(out_dir)
    ident = item_id(task.slug, config)
    started = time.monotonic()
    seed = config.trial_seed
    base = dict(task=task.slug, planner=config.planner, model=config.model, trial=config.trial, seed=seed,
                config_hash=config.config_hash(), synthetic=is_synthetic(config.model),
                board=config.board, toolset=config.toolset)
    planner_cls = get_planner_class(config.planner)   # unknown names are usage errors: raise
    trajectory_path = out_dir / "trajectories" / f"{ident}.jsonl"
    writer = TrajectoryWriter(trajectory_path)
    llm = None
    extra: dict[str, Any] = {}
    try:
        budget = tool_memory_limit()
        split = split or prepare_split(task, seed=config.seed)
        data_dir = prepare_agent_data(split, out_dir)
        sandbox = out_dir / "sandboxes" / ident
        scratch = out_dir / "sandboxes" / f"{ident}.tmp"
        for directory in (sandbox, scratch):
            if directory.exists():
                shutil.rmtree(directory)
            directory.mkdir(parents=True)
        llm = make_backend(config.model, seed=seed, cache=True if config.llm_cache else None)
        _prepare_backend(llm)
        stage_ctx = StageContext.from_agent_data(task, data_dir, config.max_features)
        tool_ctx = ToolContext(sandbox=sandbox, data_dir=data_dir, task=task, threads=config.threads,
                               seed=seed, time_limit=config.tool_time_limit)
        read_only, read_write = solver_paths(data_dir, sandbox, scratch, llm)
        check_grants(read_only + read_write, [split.dir, split.labels_path])

        def solve(status: Any) -> dict[str, Any]:
            os.environ["TMPDIR"] = str(scratch.resolve())
            tempfile.tempdir = str(scratch.resolve())
            return _search(task, config, llm, stage_ctx, tool_ctx, data_dir, writer, planner_cls, status)

        child = run_confined(solve, read_only=read_only, read_write=read_write, memory_budget=budget)
        shutil.rmtree(scratch, ignore_errors=True)   # the solver's temporary files
        extra["confinement"] = (child.payload or {}).get("confinement", "unknown: the solver sent nothing")
        extra["solver_seconds"] = round(child.seconds, 3)
        payload = child.payload or {}
        result = payload.get("result")
        _resync(writer, result.get("steps") if isinstance(result, dict) else None)
        if isinstance(result, dict) and isinstance(result.get("infra_error"), str):
            raise InfraError(result["infra_error"])
        if result is None:
            outcome, reason = _death_record(child, budget)
            error = payload.get("error") if isinstance(payload.get("error"), dict) else {}
            detail = f"{error.get('type', '')}: {error.get('message', '')}".strip(": ") or child.problem
            if error.get("interrupted"):
                raise KeyboardInterrupt  # a real Ctrl-C reached the solver: stop like the parent
            writer.write("solver_died", outcome=outcome, reason=reason, detail=detail,
                         traceback=error.get("traceback", ""))
            return TrialRecord(**base, outcome=outcome, stop_reason=reason, error=detail or reason,
                               wall_seconds=time.monotonic() - started, trajectory=str(trajectory_path),
                               extra=extra)
        try:
            found = _checked(result)
        except (ValueError, TypeError) as exc:
            raise InfraError(f"the solver sent a malformed result: {exc}") from None
        # The graded copy lives where no solver (nor a process it left behind) can write or link.
        graded = out_dir / "submissions" / f"{ident}.csv"
        graded.parent.mkdir(parents=True, exist_ok=True)
        graded.unlink(missing_ok=True)
        grade = None
        if found["submission"] is not None:
            graded.write_bytes(found["submission"])
            grade = grade_submission(task, graded, split, config.board)
        # Files are shared by all branches of a tree: put back the answer's own submission.
        _restore_submission(sandbox / SUBMISSION_FILE, found["submission"])
        valid = bool(grade and grade.valid)
        if config.agent_memory:   # the solver's own validity check (stage 10), never the graded labels
            from mltb_core.planners.agent_k import remember
            remember(task.slug, trajectory_path, found["stage"] >= 10)
        feedback_text = found["feedback"] or ("" if valid else (grade.reason if grade else ""))
        return TrialRecord(
            **base, outcome="valid" if valid else "planner_failure", valid=valid,
            score=grade.score if grade else None, percentile=grade.percentile if grade else None,
            medal=grade.medal if grade else None, normalized=grade.normalized if grade else None,
            # failed trials carry the task's note too, so tables can exclude the task without a valid trial
            percentile_note=grade.percentile_note if grade else percentile_note(task, board=config.board),
            **(grade.row_bootstrap_fields() if grade else {}),
            stage_reached=found["stage"], stage_name=found["stage_name"],
            stop_reason=found["stop_reason"], feedback=feedback_text[:500],
            tokens_in=found["tokens_in"], tokens_in_cached=found["tokens_in_cached"], tokens_out=found["tokens_out"],
            llm_calls=found["llm_calls"], llm_retries=found["llm_retries"], cost_usd=found["cost_usd"],
            tool_calls=found["tool_calls"], tree_nodes=found["tree_nodes"],
            wall_seconds=time.monotonic() - started, tool_seconds=found["tool_seconds"],
            llm_seconds=found["llm_seconds"], trajectory=str(trajectory_path),
            extra={"cached_llm_calls": found["cached_llm_calls"], "best_depth": found["best_depth"],
                   "submission_reason": "" if valid else (grade.reason if grade else "no submission written"),
                   **extra})
    except (InfraError, MemoryError, OSError, ConfinementError) as exc:
        writer.write("infra_error", error=repr(exc))
        return TrialRecord(**base, outcome="infra_error", error=f"{type(exc).__name__}: {exc}",
                           wall_seconds=time.monotonic() - started, trajectory=str(trajectory_path),
                           stop_reason="infrastructure error", extra=extra)
    except Exception as exc:  # noqa: BLE001 - a harness bug must not look like a planner failure
        writer.write("infra_error", error=traceback.format_exc())
        return TrialRecord(**base, outcome="infra_error",
                           error=f"internal error {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=6)}",
                           wall_seconds=time.monotonic() - started, trajectory=str(trajectory_path),
                           stop_reason="internal error", extra=extra)
    finally:
        writer.close()
        if llm is not None:
            llm.close()


def write_prompts(out_dir: Path) -> Path:
    """Write every prompt text into the run directory (the run is reproducible from it)."""
    path = Path(out_dir) / "prompts.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(prompts.all_prompts(), indent=2))
    return path
