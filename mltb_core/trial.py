"""One trial: (task, planner, model, seed) → search → graded submission → TrialRecord.

Both ``mltb run`` and the pytest item call :func:`run_trial`. It never raises for
planner or infrastructure trouble; the record's ``outcome`` says what happened:
``valid`` (a valid submission), ``planner_failure`` (searched and failed) or
``infra_error`` (the model API or the machine failed; never counted against the planner).
"""
from __future__ import annotations

import json
import re
import shutil
import time
import traceback
from pathlib import Path
from typing import Any

from filelock import FileLock

from . import prompts
from .config import TrialConfig
from .limits import limit_threads
from .registry import ToolContext
from .results import TrialRecord
from .rewards import StageContext
from .tasks import SUBMISSION_FILE, Task
from .trajectory import TrajectoryWriter

__all__ = ["run_trial", "item_id", "model_id", "prepare_agent_data"]


def model_id(model: str) -> str:
    """A model string as it appears in test ids and file names: 'openai:gpt-4o' → 'openai-gpt-4o'."""
    if model.startswith("sim:"):
        return "sim" + model[4:]
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", model).strip("-")


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


def run_trial(task: Task, config: TrialConfig, out_dir: Path, split: Any = None) -> TrialRecord:
    """Run one trial and grade it; ``split`` may be given when the caller already prepared it."""
    from .grading import grade_submission
    from .llm import make_backend
    from .llm.base import InfraError
    from .planners import get_planner_class
    from .splits import prepare_split
    from . import tools  # noqa: F401  (registers the toolset)

    out_dir = Path(out_dir)
    ident = item_id(task.slug, config)
    started = time.monotonic()
    seed = config.trial_seed
    base = dict(task=task.slug, planner=config.planner, model=config.model, trial=config.trial, seed=seed,
                config_hash=config.config_hash(), synthetic=config.model.split(":")[0] == "sim")
    planner_cls = get_planner_class(config.planner)   # unknown names are usage errors: raise
    trajectory_path = out_dir / "trajectories" / f"{ident}.jsonl"
    writer = TrajectoryWriter(trajectory_path)
    llm = None
    try:
        split = split or prepare_split(task, seed=config.seed)
        data_dir = prepare_agent_data(split, out_dir)
        sandbox = out_dir / "sandboxes" / ident
        if sandbox.exists():
            shutil.rmtree(sandbox)
        sandbox.mkdir(parents=True)
        llm = make_backend(config.model, seed=seed, cache=True if config.llm_cache else None)
        stage_ctx = StageContext.from_split(task, split, config.max_features)
        tool_ctx = ToolContext(sandbox=sandbox, data_dir=data_dir, task=task, threads=config.threads,
                               seed=seed, time_limit=config.tool_time_limit)
        from .planners.episode import Episode

        feedback = planner_cls.feedback_enabled(config)
        episode = Episode(task, config, llm, stage_ctx, tool_ctx, data_dir, writer, feedback=feedback)
        writer.write("trial_start", task=task.slug, config=config.to_dict(), seed=seed,
                     synthetic=llm.synthetic, feedback=feedback, prompt=episode.task_prompt)
        planner = planner_cls(episode, config)
        with limit_threads(config.threads):
            result = planner.run()
        best = result.best
        writer.write("search_summary", **episode.summary(best, result.stop_reason))
        # Files are shared by all branches of a tree: put back the answer's own submission.
        submission = sandbox / SUBMISSION_FILE
        submission.unlink(missing_ok=True)
        if best.log.submission is not None:
            submission.write_bytes(best.log.submission)
        grade = grade_submission(task, submission, split) if submission.exists() else None
        valid = bool(grade and grade.valid)
        feedback_text = best.progress.feedback or ("" if valid else (grade.reason if grade else ""))
        return TrialRecord(
            **base, outcome="valid" if valid else "planner_failure", valid=valid,
            score=grade.score if grade else None, percentile=grade.percentile if grade else None,
            medal=grade.medal if grade else None, normalized=grade.normalized if grade else None,
            **(grade.row_bootstrap_fields() if grade else {}),
            stage_reached=best.progress.stage, stage_name=best.progress.stage_name,
            stop_reason=result.stop_reason, feedback=feedback_text[:500],
            tokens_in=episode.usage.prompt_tokens, tokens_out=episode.usage.completion_tokens,
            llm_calls=episode.usage.calls, llm_retries=episode.usage.retries, cost_usd=episode.usage.cost_usd,
            tool_calls=episode.tool_calls, tree_nodes=episode.nodes,
            wall_seconds=time.monotonic() - started, tool_seconds=episode.tool_seconds,
            llm_seconds=episode.usage.seconds, trajectory=str(trajectory_path),
            extra={"cached_llm_calls": episode.usage.cached_calls, "best_depth": best.depth,
                   "submission_reason": "" if valid else (grade.reason if grade else "no submission written")})
    except (InfraError, MemoryError, OSError) as exc:
        writer.write("infra_error", error=repr(exc))
        return TrialRecord(**base, outcome="infra_error", error=f"{type(exc).__name__}: {exc}",
                           wall_seconds=time.monotonic() - started, trajectory=str(trajectory_path),
                           stop_reason="infrastructure error")
    except Exception as exc:  # noqa: BLE001 - a harness bug must not look like a planner failure
        writer.write("infra_error", error=traceback.format_exc())
        return TrialRecord(**base, outcome="infra_error",
                           error=f"internal error {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=6)}",
                           wall_seconds=time.monotonic() - started, trajectory=str(trajectory_path),
                           stop_reason="internal error")
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
