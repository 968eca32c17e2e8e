"""Agent K over tool calls: the ten stages as a scaffold, each with a unit test, retried until it passes.

The scaffold walks the ten stages of :data:`mltb_core.stages.rewards.REWARD_STAGES` in order. A stage's
unit test is its stage check (``rewards.advance``: e.g. "no missing values", "a fitted model with a
CV score"); the model is asked for calls, with the stage, its test and the test's last result in the
request, and only the stage's tools offered (tool masking, on by default), until the test passes or
the stage has used ``stage_attempts`` LLM calls; then the run stops at that stage. The modeling stage
offers the ``tune_*`` tools (hyperparameter optimisation as a tool, as in Agent K) when the toolset
has them, instead of the plain ``fit_*`` tools.

Memory (``agent_memory``, off by default; in agent_k's config hash): the tool sequences of
valid solutions found on earlier tasks of the same run, shown in the requests. The parent process
records them after each trial from its trajectory (:meth:`AgentK.after_trial`, :func:`remember`), so the notes reach the next
trial's solver, which is forked from it; trials run by other worker processes do not share them.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from mltb_core.stages.events import EventKind, read_events
from mltb_core.config import Range, knob
from mltb_core.llm import prompts
from mltb_core.planners.base import Planner, SearchResult
from mltb_core.bench.stops import StopKind
from mltb_core.stages.masking import subtask_tools
from mltb_core.stages.rewards import REWARD_STAGES, Stage
from mltb_core.stages.specs import STAGE_COUNT
from mltb_core.planners.tree import Node

__all__ = ["AgentK", "remember", "memory_notes", "MEMORY_NOTES"]

MEMORY_NOTES = 5          # notes shown per request (the most recent)
_EVALUATION = ("evaluate_regression_model", "evaluate_classification_model")
# run directory → notes "task: tool, tool, ..." (filled by the parent process between trials)
_MEMORY: dict[str, list[str]] = {}


def _run_key(trajectory_path: Path | None) -> str | None:
    """Trajectories live in <run dir>/trajectories/: the run directory identifies the run."""
    return str(Path(trajectory_path).resolve().parent.parent) if trajectory_path else None


def memory_notes(trajectory_path: Path | None) -> list[str]:
    key = _run_key(trajectory_path)
    return list(_MEMORY.get(key, []))[-MEMORY_NOTES:] if key else []


def remember(task_slug: str, trajectory_path: Path, valid: bool) -> None:
    """After a trial (parent process): keep the best path's tool sequence when its submission was valid."""
    if not valid or not Path(trajectory_path).exists():
        return
    calls: dict[int, str] = {}
    best_path: list[int] = []
    for step in read_events(trajectory_path).events:   # bounded and typed; a malformed line is passed over
        if step.get("step_type") == EventKind.TOOL_STARTED:
            tools = step.get("tools_to_execute") or [{}]
            calls[int(step.get("node_id", -1))] = str(tools[0].get("tool_name", "?"))
        elif step.get("step_type") == EventKind.SEARCH_SUMMARY:
            best_path = [int(i) for i in step.get("best_path", [])]
    if best_path:
        sequence = ", ".join(calls.get(i, "?") for i in best_path)
        _MEMORY.setdefault(_run_key(trajectory_path), []).append(f"{task_slug}: {sequence}")


class AgentK(Planner):
    name = "agent_k"
    default_masking = True     # each stage offers its own tools
    default_feedback = True    # the unit test's result is part of the stage's request and observations
    knobs = (
        # 8, not 4: with the paper toolset writing the submission alone takes 4 calls after predicting
        knob("stage_attempts", 8, "LLM calls a stage may use before its unit test counts as failed",
             range=Range(int, 1)),
        knob("agent_memory", False, "show what worked on earlier tasks of the same run", switch=True),
    )

    def __init__(self, episode: Any, config: Any):
        super().__init__(episode, config)
        self.memory = memory_notes(self.ep.trajectory.path) if config.knob("agent_memory") else []

    @classmethod
    def after_trial(cls, config: Any, task_slug: str, trajectory_path: Path, valid: bool) -> None:
        if config.knob("agent_memory"):
            remember(task_slug, trajectory_path, valid)

    def allowed(self, stage: Stage) -> list[str] | None:
        if not self.masking:
            return None
        tools = subtask_tools(stage.name, self.ep.registry)
        if stage.tools.fits_models:   # the stage that offers the model fits: tune when it can
            reg = self.ep.registry
            tune = [t for t in tools if reg.get(t).tunes]
            if tune:
                return tune + [t for t in tools if t in _EVALUATION or not reg.fits_model(t)]
        return tools

    def extra(self, stage: Stage, node: Node) -> tuple[str, ...]:
        out = (prompts.stage_request(stage.title, stage.number, STAGE_COUNT, node.progress.feedback),)
        if self.memory:
            out = (prompts.MEMORY_HEADER + "\n" + "\n".join(f"- {m}" for m in self.memory),) + out
        return out

    def run_stage(self, stage: Stage, node: Node) -> tuple[Node, int]:
        """Calls until the stage's unit test passes or its attempts are used up: (last node, attempts)."""
        attempts = 0
        allowed = self.allowed(stage)
        while node.progress.stage < stage.number and attempts < self.config.knob("stage_attempts"):
            candidates = self.ep.propose(node, prompts.AGENT_K_STAGE_SYSTEM, n=1, allowed=allowed,
                                         extra=self.extra(stage, node))
            attempts += 1
            if not candidates:
                break
            node = self.ep.step(node, candidates[0], allowed)
        self.ep.trajectory.write(EventKind.UNIT_TEST, planner=self.name, stage=stage.number, stage_name=stage.name,
                                 passed=node.progress.stage >= stage.number, attempts=attempts, node_id=node.id,
                                 result=node.progress.feedback[:300])
        return node, attempts

    def search(self) -> SearchResult:
        node = self.ep.root
        for stage in REWARD_STAGES:
            node, attempts = self.run_stage(stage, node)
            if node.progress.stage < stage.number:
                return SearchResult(self.ep.best, f"unit test of stage {stage.number} ({stage.name}) failed "
                                                  f"after {attempts} attempt(s)", StopKind.STAGE_FAILED)
        return SearchResult(node, "valid submission", StopKind.VALID_SUBMISSION)
