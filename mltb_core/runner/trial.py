"""One trial: (task, planner, model, seed) → search → graded submission → TrialRecord.

Both ``mltb run`` and the pytest item call :func:`run_trial`. It never raises for
planner or infrastructure trouble; the record's ``outcome`` says what happened:
``valid`` (a valid submission), ``planner_failure`` (searched and failed) or
``infra_error`` (the model API or the machine failed; never counted against the planner).
"""
from __future__ import annotations

import json
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mltb_core.llm import prompts
from mltb_core.config import TrialConfig, case_id
from mltb_core.analysis.provenance import LoadMeter
from mltb_core.analysis.records import Outcome, TrialRecord
from mltb_core.analysis.runstore import RunStore, TrialFiles
from mltb_core.stages.specs import STAGE_COUNT
from mltb_core.bench.tasks import Task
from mltb_core.bench.stops import StopKind
from mltb_core.planners.trajectory import TrajectoryWriter
from mltb_core.runner.checkpoint import ReplayingBackend, TrialCheckpoint
from mltb_core.runner.solve import (ConfinementError, WorkerSettings, confinement_label, prepare_agent_data,
                                    solve_and_grade)
from mltb_core.stages.events import EventKind

__all__ = ["run_trial", "SearchOutcome", "write_prompts"]


def _prepare_backend(llm: Any) -> None:
    """Start or join a long-lived model server (local llama.cpp) before the trial starts."""
    server = getattr(llm, "server", None)
    if server is not None:
        server.acquire()


@dataclass(frozen=True)
class SearchOutcome:
    """What the trusted side knows after the search: the answer's node (None when the worker failed under
    the search) and its own counters."""

    best: Any
    stop_reason: str
    stop_kind: StopKind
    usage: Any
    tool_calls: int
    tree_nodes: int
    tool_seconds: float

    @classmethod
    def of(cls, episode: Any, best: Any, stop_reason: str, stop_kind: StopKind) -> SearchOutcome:
        return cls(best, stop_reason, StopKind(stop_kind), episode.usage, episode.tool_calls, episode.nodes,
                   episode.tool_seconds)

    def record_fields(self) -> dict[str, Any]:
        """The search's fields of a TrialRecord (the one place they are mapped onto the record): what was
        spent counts even when the worker failed under the search."""
        usage, best = self.usage, self.best
        reached = {} if best is None else {"stage_reached": best.progress.stage,
                                           "stage_name": best.progress.stage_name}
        return {**reached, "stop_reason": self.stop_reason, "stop_kind": self.stop_kind, "tokens_in": usage.prompt_tokens,
                "tokens_in_cached": usage.cached_input_tokens, "tokens_out": usage.completion_tokens,
                "llm_calls": usage.calls, "llm_retries": usage.retries, "cost_usd": usage.cost_usd,
                "tool_calls": self.tool_calls, "tree_nodes": self.tree_nodes, "tool_seconds": self.tool_seconds,
                "llm_seconds": usage.seconds}


MAX_ENDPOINT_CHARS = 500   # a base URL from the environment, as the record keeps it


def endpoint_of(llm: Any) -> str | None:
    """What answered ``llm``'s calls, for the record (None: no backend yet, the synthetic policy, or a model
    file that can no longer be read, which the trial's own error then names)."""
    from mltb_core.llm.base import InfraError

    if llm is None:
        return None
    try:
        endpoint = llm.endpoint
    except (InfraError, OSError):
        return None
    return None if endpoint is None else str(endpoint)[:MAX_ENDPOINT_CHARS]


def run_trial(task: Task, config: TrialConfig, out_dir: Path, split: Any = None) -> TrialRecord:
    """Run one trial and grade it; ``split`` may be given when the caller already prepared it. ``out_dir`` is
    the attempt's work directory (:class:`~mltb_core.analysis.runstore.TrialFiles` names its files); the
    record holds the trajectory's path there until the run store records it (:meth:`RunStore.write`).

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
    from mltb_core.planners.episode import Episode
    from mltb_core.stages.rewards import NO_MODEL_REASON
    from mltb_core.stages.workspace import ModelFault
    from mltb_core.bench.splits import prepare_split
    from mltb_core.toolkit import tools  # noqa: F401  (registers the toolset)

    out_dir = Path(out_dir)
    ident = case_id(task.slug, config.planner, config.model, config.trial)
    started = time.monotonic()
    planner_cls = get_planner_class(config.planner)   # unknown names are usage errors: raise
    files = TrialFiles(out_dir, ident)
    trajectory_path = files.trajectory
    # an unfinished earlier run of this attempt left its answered requests: read before anything is rewritten
    checkpoint = TrialCheckpoint(files.checkpoint, started)
    writer = TrajectoryWriter(trajectory_path)
    llm: Any = None
    episode = None
    extra: dict[str, Any] = {"leaderboard": task.has_leaderboard}   # every front end's records carry it

    load = LoadMeter()   # started in the try below, stopped in its finally

    def record(outcome: Outcome, **fields: Any) -> TrialRecord:
        resumed = checkpoint.summary()
        if resumed is not None:
            extra["resumed"] = resumed
        if outcome != Outcome.INFRA_ERROR:   # finished: only an infrastructure error's rerun replays it
            checkpoint.discard()
        return TrialRecord.for_config(task.slug, config, outcome, wall_seconds=checkpoint.seconds(),
                                      trajectory=str(trajectory_path), load_per_core=load.mean(), **fields,
                                      endpoint=endpoint_of(llm), extra=extra)

    def spent(stop_reason: str, stop_kind: StopKind) -> dict[str, Any]:
        """A record's counters when the trial ended early: what was spent still counts (calls, tokens, cost;
        the backend's running total, which includes a reply that failed on its way to the search), so that
        no early end hides spend from the run's cost budget."""
        fields = ({"stop_reason": stop_reason, "stop_kind": stop_kind} if episode is None
                  else SearchOutcome.of(episode, None, stop_reason, stop_kind).record_fields())
        usage = getattr(llm, "usage", None)
        if usage is not None and usage.calls >= fields.get("llm_calls", 0):
            fields.update(tokens_in=usage.prompt_tokens, tokens_out=usage.completion_tokens,
                          tokens_in_cached=usage.cached_input_tokens, llm_calls=usage.calls,
                          llm_retries=usage.retries, cost_usd=usage.cost_usd, llm_seconds=usage.seconds)
        return fields

    def search(workspace: Any) -> tuple[SearchOutcome, bytes | None]:
        """Planner + LLM calls here, in the trusted process; every tool call runs in ``workspace``."""
        nonlocal episode
        # noted first, so that an infrastructure error's record keeps them too
        extra.update(confinement=confinement_label(workspace), worker_start_seconds=round(workspace.start_seconds, 3))
        feedback = planner_cls.feedback_enabled(config)
        episode = Episode(task, config, llm, workspace, writer, feedback=feedback)
        writer.write(EventKind.TRIAL_START, task=task.slug, config=config.to_dict(), seed=config.trial_seed,
                     synthetic=llm.synthetic, feedback=feedback, prompt=episode.task_prompt,
                     **({"resumed_from": checkpoint.kept_summary()} if checkpoint.summary() is not None else {}))
        result = planner_cls(episode, config).run()
        writer.write(EventKind.SEARCH_SUMMARY, **episode.summary(result.best, result.stop_reason),
                     stop_kind=str(result.stop_kind))
        return (SearchOutcome.of(episode, result.best, result.stop_reason, result.stop_kind),
                result.best.log.submission)

    try:
        load.start()
        split = split or prepare_split(task, seed=config.seed)
        data_dir = prepare_agent_data(split, out_dir)
        llm = make_backend(config.model, seed=config.trial_seed, cache=True if config.llm_cache else None)
        _prepare_backend(llm)
        llm = ReplayingBackend(llm, checkpoint, writer)
        solved = solve_and_grade(task, split, data_dir, files.sandbox, files.submission, WorkerSettings.of(config),
                                 search, config.board)
        if solved.worker_failure is not None:
            reason = f"the tool worker failed: {solved.worker_failure}"
            writer.write(EventKind.WORKER_FAILED, reason=reason, stderr=solved.worker_stderr)
            return record(Outcome.PLANNER_FAILURE, **solved.grade_fields(task, config.board), **spent(reason, StopKind.WORKER_FAILED),
                          error=reason)
        found = solved.result
        best = found.best
        stage = best.progress.stage
        # the search's own validity check (the last stage), never the graded labels
        planner_cls.after_trial(config, task.slug, trajectory_path, stage >= STAGE_COUNT)
        # the paper's consistency counts a valid file only when a model predicted it (PathLog.valid_submission)
        counted = solved.valid and best.log.predicted_by_model
        reason = solved.invalid_reason or ("" if counted else NO_MODEL_REASON)
        extra.update(cached_llm_calls=found.usage.cached_calls, best_depth=best.depth,
                     submission_reason=reason, worker_peak_mib=solved.peak_mib)
        return record(Outcome.VALID if counted else Outcome.PLANNER_FAILURE,
                      **solved.grade_fields(task, config.board, counted=counted), **found.record_fields(),
                      feedback=(best.progress.feedback or reason)[:500])
    except ModelFault as exc:   # raised handling the model's output outside the worker (Episode.model_output)
        reason = f"the model's output could not be handled: {exc}"
        writer.write(EventKind.MODEL_FAULT, reason=reason)
        return record(Outcome.PLANNER_FAILURE, **spent(reason, StopKind.MODEL_FAULT), error=reason)
    except (InfraError, MemoryError, OSError, ConfinementError) as exc:
        writer.write(EventKind.INFRA_ERROR, error=repr(exc))
        return record(Outcome.INFRA_ERROR, **spent("infrastructure error", StopKind.ERROR), error=f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # noqa: BLE001 - a harness bug must not look like a planner failure
        writer.write(EventKind.INFRA_ERROR, error=traceback.format_exc())
        return record(Outcome.INFRA_ERROR, **spent("internal error", StopKind.ERROR),
                      error=f"internal error {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=6)}")
    finally:
        load.stop()
        writer.close()
        checkpoint.close()
        if llm is not None:
            llm.close()


def write_prompts(out_dir: Path) -> Path:
    """Write every prompt text into the run directory (the run is reproducible from it)."""
    path = RunStore(out_dir).prompts_path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(prompts.all_prompts(), indent=2))
    return path
