"""The environment every planner searches in: prompts → LLM candidates → executed tool calls → nodes.

Planners decide *which* node to grow; the episode does the growing: it builds the
message history of a path, asks the model for candidates (charging the budget),
has the trial's workspace execute a candidate's tool call below the node and check
the reward stages there, and writes every step to the trajectory. The episode itself
never touches a model-made object: in a trial the workspace is an untrusted worker
process (:mod:`mltb_core.runner.worker`) and what it reports is plain, checked data.
"""
from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mltb_core.llm import prompts
from mltb_core.config import TrialConfig
from mltb_core.llm.base import (MAX_ASSISTANT_CHARS, Candidate, ContextOverflowError, InfraError, LLMBackend,
                                LLMResponse, Usage)
from mltb_core.toolkit.registry import REGISTRY, ToolContext, ToolRegistry
from mltb_core.toolkit.textsafety import cap_text, encodable
from mltb_core.stages.masking import stage_tools
from mltb_core.stages.rewards import REWARD_STAGES, StageContext
from mltb_core.bench.stops import StopKind
from mltb_core.stages.workspace import MAX_OBSERVATION_CHARS, LocalWorkspace, ModelFault, Workspace
from mltb_core.bench.tasks import SUBMISSION_FILE
from mltb_core.planners import progress
from mltb_core.planners.trajectory import TrajectoryWriter
from mltb_core.planners.tree import Node, path_to
from mltb_core.stages.events import EventKind

__all__ = ["Episode", "BudgetExhausted", "Budget"]

STAGE_CHECK = "Stage check: "


class BudgetExhausted(Exception):
    """A search budget ran out; the planner stops cleanly and returns its best node."""

    def __init__(self, reason: str, kind: StopKind = StopKind.UNSPECIFIED):   # a plug-in's own may omit the kind
        super().__init__(reason)
        self.reason = reason
        self.kind = kind


@dataclass
class Budget:
    config: TrialConfig
    started: float

    def check(self, usage: Usage) -> None:
        c = self.config
        if c.max_llm_calls is not None and usage.calls >= c.max_llm_calls:
            raise BudgetExhausted(f"LLM-call budget ({c.max_llm_calls}) used up", StopKind.LLM_CALL_BUDGET)
        if c.max_tokens is not None and usage.prompt_tokens + usage.completion_tokens >= c.max_tokens:
            raise BudgetExhausted(f"token budget ({c.max_tokens}) used up", StopKind.TOKEN_BUDGET)
        if c.max_cost_usd is not None and usage.cost_usd >= c.max_cost_usd:
            raise BudgetExhausted(f"cost budget (${c.max_cost_usd}) used up", StopKind.COST_BUDGET)
        if c.max_seconds is not None and time.monotonic() - self.started >= c.max_seconds:
            raise BudgetExhausted(f"time budget ({c.max_seconds} s) used up", StopKind.TIME_LIMIT)

    def candidates(self, usage: Usage, n: int, calls_per_candidate: bool) -> int:
        """How many of ``n`` candidates one request may ask for: all, unless each costs a call of its own
        and fewer calls are left (a budget of 10 calls must not end at 12)."""
        left = None if self.config.max_llm_calls is None else self.config.max_llm_calls - usage.calls
        return max(1, min(n, left)) if calls_per_candidate and left is not None else n


class Episode:
    def __init__(self, task: Any, config: TrialConfig, llm: LLMBackend, workspace: Workspace,
                 trajectory: TrajectoryWriter | None = None, registry: ToolRegistry | None = None,
                 feedback: bool = True):
        self.task, self.config, self.llm, self.workspace = task, config, llm, workspace
        # The model sees, and may call, only the tools of the trial's toolset (catalogue, schemas, masking, executor).
        self.registry = toolset_registry(config, registry)
        self.trajectory = trajectory or TrajectoryWriter(None)
        self.feedback = feedback
        self.budget = Budget(config, time.monotonic())
        self.usage = Usage()
        self.tool_calls = 0
        self.tool_seconds = 0.0
        self.nodes = 0
        # Relative paths only (tools read relative paths from the data directory and write them into the
        # trial's own sandbox): an absolute path would differ per run, planner and trial and break the
        # shared prompt prefix.
        self.task_prompt = task.prompt(Path(SUBMISSION_FILE))
        self._schemas = {t.name: t.schema() for t in self.registry}
        if config.context == "trimmed":
            self._schemas = {name: prompts.compact_schema(s) for name, s in self._schemas.items()}
        # First system message of every request: depends on the task and the toolset only (stable prefix).
        self.preamble = prompts.shared_preamble(self.task_prompt, list(self._schemas.values()))
        # State-aware constrained calls (toolkit/constraints.py): unset means the backend's default.
        self.constrained = (config.constrained_calls if config.constrained_calls is not None
                            else llm.constrains_by_default)
        self.root = Node()
        self.best: Node = self.root   # furthest stage reached so far (ties: test predictions made, then the shallower)
        self._stage_notes: dict[tuple[int, bool, tuple[str, ...] | None], str] = {}
        # node id -> the stage note of the first proposal request from that node: where a note was shown, it
        # stays in every later request along the path (proposal_messages) unless the next step's note replaces
        # it, so each request extends the last.
        self._shown_notes: dict[int, str] = {}
        # Older tool results cut (prompts.trim_observation): from the start with --context trimmed, else from
        # the first request that outgrew the model's context window (see _complete).
        self.trimming = config.context == "trimmed"
        # --context-budget: node id -> how many of its path's first steps have their tool results cut
        self._compacted: dict[int, int] = {0: 0}

    @classmethod
    def in_process(cls, task: Any, config: TrialConfig, llm: LLMBackend, stage_ctx: StageContext,
                   tool_ctx: ToolContext, trajectory: TrajectoryWriter | None = None,
                   registry: ToolRegistry | None = None, feedback: bool = True) -> Episode:
        """An episode whose tool calls run in this process (what the worker itself does; scripts, tests)."""
        workspace = LocalWorkspace(stage_ctx, tool_ctx, toolset_registry(config, registry))
        return cls(task, config, llm, workspace, trajectory, registry, feedback)

    # -- prompts ---------------------------------------------------------------------
    def tool_schemas(self, allowed: Iterable[str] | None = None) -> list[dict[str, Any]]:
        if allowed is None:
            return list(self._schemas.values())
        allowed = set(allowed)
        return [s for name, s in self._schemas.items() if name in allowed]

    def messages(self, node: Node, system: str, extra: Iterable[str] = (),
                 stage_notes: bool = False) -> list[dict[str, Any]]:
        """The chat history of the root→node path, OpenAI style.

        Order, longest shared part first: the shared preamble (task, tool catalogue), the planner's
        ``system`` instructions, ``extra`` user turns, then the path. With ``stage_notes`` (proposal
        requests), the stage note shown at a node of the path follows that node's step, unless it repeats
        the last note shown before it or the next step's note replaces it (:meth:`_path_notes`); a trimmed
        request shows none of them.
        When trimming (``context="trimmed"``,
        or since the full path outgrew the context window) tool results older than the last
        :data:`prompts.TRIMMED_FULL_OBSERVATIONS` are cut to their first lines and the last one lists every
        scratchpad object with its columns.
        """
        msgs: list[dict[str, Any]] = [{"role": "system", "content": self.preamble},
                                      {"role": "system", "content": system}]
        msgs += [{"role": "user", "content": text} for text in extra]
        path = path_to(node)
        steps = path[1:]
        trimmed = self.trimming
        # a trimmed request keeps no note of earlier stages (they would outgrow its bound): the current stage's
        # note ends it instead (proposal_messages); a bounded one drops those of its cut steps
        compacted = 0 if trimmed else self.compacted_steps(path)
        notes = self._path_notes(path, compacted) if stage_notes and not trimmed else {}
        if 0 in notes:
            msgs.append({"role": "user", "content": notes[0]})
        for index, step in enumerate(steps):
            observation = step.observation
            if trimmed:
                if index == len(steps) - 1:
                    observation = self._with_full_listing(step)
                elif index < len(steps) - prompts.TRIMMED_FULL_OBSERVATIONS:
                    observation = prompts.trim_observation(observation)
            elif index < compacted:
                observation = prompts.trim_observation(observation)
            if step.call is None:
                msgs.append({"role": "assistant", "content": step.assistant_text or ""})
                msgs.append({"role": "user", "content": observation})
            else:
                arguments = json.dumps(step.call.to_dict()["tool_args"], default=str)
                msgs.append({"role": "assistant", "content": step.assistant_text or None, "tool_calls": [{
                    "id": step.call_id, "type": "function",
                    "function": {"name": encodable(step.call.tool_name), "arguments": encodable(arguments)}}]})
                msgs.append({"role": "tool", "tool_call_id": step.call_id, "content": observation})
            if index + 1 in notes:
                msgs.append({"role": "user", "content": notes[index + 1]})
        return msgs

    def _path_notes(self, path: list[Node], compacted: int) -> dict[int, str]:
        """The stage notes a proposal request along ``path`` shows, by position (0: before the first step, i:
        after step i): each node's recorded note where it differs from the last one shown, none after a cut
        step, and none that the very next step replaces with another. Dropping a note replaced one step later
        costs the prefix cache little: the request that showed it ended with it, and the next one shares
        everything before it and evaluates the new step's result and note either way; only the new step's call
        (the reply a server may still hold after the note, ~50 tokens) is evaluated again. A tree search that
        changes stage at most steps would otherwise carry a note per step (~1,000 tokens each) at every depth."""
        notes: dict[int, str] = {}
        shown = ""
        for position, node in enumerate(path):
            note = self._shown_notes.get(node.id, "") if position > compacted or not compacted else ""
            if note and note != shown:
                notes.pop(position - 1, None)
                notes[position] = shown = note
        return notes

    def compacted_steps(self, path: list[Node]) -> int:
        """How many of ``path``'s first steps (root excluded) a request cuts under ``--context-budget``
        (:data:`prompts.BOUNDED_LOW_WATER`): 0 when unbounded. Decided once per node from its parent's
        count, so the cut point only moves forward along a path and every request from a node agrees."""
        budget = self.config.context_budget
        if budget is None:
            return 0
        for depth, node in enumerate(path):
            if node.id in self._compacted:
                continue
            count = self._compacted[path[depth - 1].id]
            # the results that may be cut (all but the last few) against the budget, in characters: a cut
            # then always takes a block, however long the last few are
            last_cut = max(depth - prompts.TRIMMED_FULL_OBSERVATIONS, 0)
            sizes = [len(step.observation) for step in path[1:last_cut + 1]]
            whole, limit = sum(sizes[count:]), budget * prompts.CHARS_PER_TOKEN
            if whole > limit:
                while count < last_cut and whole > limit * prompts.BOUNDED_LOW_WATER:
                    whole -= sizes[count]
                    count += 1
            self._compacted[node.id] = count
        return self._compacted[path[-1].id]

    def stage_tools_note(self, node: Node, allowed: Iterable[str] | None = None) -> str:
        """The parameters of the tools for ``node``'s next stage (those of ``allowed`` only, when given), a
        user turn of a proposal request (:func:`prompts.stage_tools_note`); '' once every stage passed."""
        if node.progress.done:
            return ""
        progress = node.progress
        key = (progress.stage, progress.predicted, tuple(allowed) if allowed is not None else None)
        if key not in self._stage_notes:
            names = stage_tools(REWARD_STAGES[progress.stage].name, self.registry, progress.predicted)
            if allowed is not None:
                names = [name for name in names if name in set(allowed)]
            self._stage_notes[key] = prompts.stage_tools_note([self._schemas[name] for name in names])
        return self._stage_notes[key]

    def proposal_messages(self, node: Node, system: str, allowed: Iterable[str] | None = None,
                          extra: Iterable[str] = ()) -> list[dict[str, Any]]:
        """What a proposal request from ``node`` sends: :meth:`messages` with the stage notes of the path.

        The note of the next stage's tools is a user turn after the step that led to it, shown where it first
        changed along the path and kept there: the first proposal from a node records its note, every later
        request below the node shows that note after the node's step unless it repeats the last note shown
        before it or the next step's note replaces it (:meth:`_path_notes`). So along a path each request is
        the previous one plus the new turn (a prefix cache evaluates the new step and, when the stage changed,
        its note; after a replaced note, the new step's call too), instead of a note at the end that changes
        with the stage and is re-evaluated by every call. A repeated proposal from a node whose note
        differs from the recorded one (other ``allowed`` tools) ends with its own note."""
        note = self.stage_tools_note(node, allowed)
        self._shown_notes.setdefault(node.id, note)
        msgs = self.messages(node, system, extra, stage_notes=True)
        last = next((m["content"] for m in reversed(msgs) if prompts.is_stage_tools_note(m)), "")
        return msgs + ([{"role": "user", "content": note}] if note and note != last else [])

    def _with_full_listing(self, node: Node) -> str:
        """``node``'s observation with its scratchpad listing replaced by every object and its columns
        (the trimmed context's summary of the current state: older listings were cut)."""
        text = self.workspace.listing(node.state)
        if not text:
            return node.observation
        listing = prompts.scratchpad_note(cap_text(text, MAX_OBSERVATION_CHARS))
        parts = [p for p in node.observation.split("\n\n") if not p.startswith(prompts.SCRATCHPAD_HEADER)]
        # The listing goes where _observation puts it: after the tool's message, before stage checks.
        checks = [i for i, p in enumerate(parts) if p.startswith(STAGE_CHECK)]
        at = checks[0] if checks else len(parts)
        return "\n\n".join(parts[:at] + [listing] + parts[at:])

    # -- the model -------------------------------------------------------------------
    def propose(self, node: Node, system: str, n: int, allowed: Iterable[str] | None = None,
                extra: Iterable[str] = ()) -> list[Candidate]:
        """Ask the model for ``n`` candidate next steps from ``node`` (one budgeted LLM request)."""
        self.budget.check(self.usage)
        n = self.budget.candidates(self.usage, n, self.llm.calls_per_candidate)
        allowed = list(allowed) if allowed is not None else None
        schema = self.call_schema(node, allowed) if self.constrained else None
        response = self._complete(node, lambda: self.proposal_messages(node, system, allowed, extra),
                                  self.tool_schemas(allowed), n=n, temperature=self.config.temperature,
                                  call_schema=schema)
        self.usage = self.usage + response.usage
        self._report_progress()
        with model_output("the model's reply"):
            self.trajectory.write(EventKind.LLM_CALL, node_id=node.id, purpose="propose", n=n,
                                  constrained=schema is not None,
                                  candidates=[{"text": c.text[:300], "tool_calls": [t.to_dict() for t in c.tool_calls],
                                               "error": c.error} for c in response.candidates],
                                  usage=response.usage.to_dict())
        return response.candidates

    def call_schema(self, node: Node, allowed: Iterable[str] | None = None) -> dict[str, Any] | None:
        """The JSON schema of a call from ``node``: only tools, objects, columns and files that exist there."""
        return self.workspace.call_schema(node.state, list(allowed) if allowed is not None else None)

    def ask(self, node: Node, system: str, request: str, purpose: str) -> str:
        """A plain-text request about the path (LATS evaluation and reflection)."""
        self.budget.check(self.usage)
        response = self._complete(node, lambda: self.messages(node, system) + [{"role": "user", "content": request}],
                                  [], n=1, temperature=0.0)
        self.usage = self.usage + response.usage
        self._report_progress()
        text = response.candidates[0].text if response.candidates else ""
        with model_output("the model's reply"):
            self.trajectory.write(EventKind.LLM_CALL, node_id=node.id, purpose=purpose, text=text[:500],
                                  usage=response.usage.to_dict())
        return text

    def _complete(self, node: Node, messages: Callable[[], list[dict[str, Any]]], tools: list[dict[str, Any]],
                  **options: Any) -> LLMResponse:
        """One request of ``messages()``. A request longer than the model's context window is sent once more
        with older tool results trimmed, and every later request of the episode is trimmed too (the paper's
        ReAct kept its whole history in GPT-4o's 128k window; a smaller window would otherwise end the
        search there). A trimmed request that still overflows ends the search."""
        if not self.trimming:
            try:
                return self.llm.complete(messages(), tools, **options)
            except ContextOverflowError as exc:
                self.trimming = True
                self.trajectory.write(EventKind.CONTEXT_TRIMMED, node_id=node.id, reason=cap_text(str(exc), 300))
        with _context_overflow_ends_search():
            return self.llm.complete(messages(), tools, **options)

    def _report_progress(self) -> None:
        progress.report(progress.TrialProgress(self.usage.calls, self.config.max_llm_calls, self.best.progress.stage,
                                               time.monotonic() - self.budget.started))

    # -- the environment -------------------------------------------------------------
    def step(self, parent: Node, candidate: Candidate, allowed: Iterable[str] | None = None) -> Node:
        """Execute ``candidate``'s tool call below ``parent`` and return the new child."""
        call = candidate.tool_calls[0].tool_name if candidate.tool_calls else "a reply without a call"
        with model_output(f"running {call!r}"):
            return self._step(parent, candidate, allowed)

    def _step(self, parent: Node, candidate: Candidate, allowed: Iterable[str] | None) -> Node:
        self.nodes += 1
        child = Node(parent=parent, assistant_text=cap_text(candidate.text or "", MAX_ASSISTANT_CHARS),
                     log=parent.log, progress=parent.progress, id=self.nodes, depth=parent.depth + 1,
                     state=parent.state)
        child.call_id = f"call_{child.id}"
        if not candidate.tool_calls:
            detail = f": {cap_text(candidate.error, 1_000)}" if candidate.error else ""
            child.ok = False
            child.observation = prompts.NO_TOOL_CALL.format(detail=detail)
            self.trajectory.write(EventKind.INVALID_REPLY, node_id=child.id, parent_id=parent.id,
                                  content_preview=child.observation[:300])
            return parent.add_child(child)
        call = candidate.tool_calls[0]
        child.call, child.state = call, child.id
        self.trajectory.tool_started(child.id, parent.id, call.to_dict(), child.call_id)
        facts = self.workspace.step(parent.state, child.id, call, list(allowed) if allowed is not None else None)
        self.tool_calls += 1
        self.tool_seconds += facts.seconds
        self.trajectory.tool_completed(child.id, facts.ok, facts.message, facts.seconds)
        # CV scores count only from a tool that fits models (decided here, on the trusted side, by its roles)
        cv_scores = facts.cv_scores if self.registry.fits_model(call.tool_name) else {}
        child.ok, child.written, child.cv_scores = facts.ok, tuple(facts.written), cv_scores
        # the worker's rule on the facts it answered, so both logs agree, but for `predictions`: telling names
        # restated from a renaming takes the data, which stays in the worker (its stage checks alone read them)
        child.log = parent.log.extend(call, facts.ok, facts.written, facts.submission, facts.submission_check)
        child.progress = facts.progress
        child.observation = self._observation(child, facts.message)
        if child.progress.newly_passed or child.progress.feedback:
            self.trajectory.write(EventKind.REWARD_FEEDBACK, node_id=child.id, stage=child.progress.stage,
                                  passed=list(child.progress.newly_passed), feedback=child.progress.feedback,
                                  predicted=child.progress.predicted, shown_to_model=self.feedback)
        if _furthest(child) > _furthest(self.best):
            self.best = child
        return parent.add_child(child)

    def _observation(self, node: Node, message: str) -> str:
        """The workspace's text (tool result and scratchpad listing), then the stage checks."""
        parts = [message]
        if self.feedback:
            if node.progress.newly_passed:
                done = ", ".join(REWARD_STAGES[i - 1].title for i in node.progress.newly_passed)
                parts.append(f"{STAGE_CHECK}completed ({done}).")
            if node.progress.feedback:
                parts.append(f"{STAGE_CHECK}{node.progress.feedback}")
        return "\n\n".join(parts)

    def summary(self, best: Node, stop_reason: str) -> dict[str, Any]:
        return {"nodes": self.nodes, "best_node": best.id, "best_stage": best.progress.stage,
                "best_depth": best.depth, "best_value": round(best.value, 4), "stop_reason": stop_reason,
                "best_path": [n.id for n in path_to(best)[1:] if n.call is not None],
                "tree": tree_nodes(path_to(best)[0])}


def tree_nodes(root: Node) -> list[dict[str, Any]]:
    """Every node's final search statistics (visits, value, reward, stage, parent), for the tree viewer:
    the per-step lines are written before backpropagation, so only the end of the search knows them."""
    out, stack = [], [root]
    while stack:
        node = stack.pop()
        out.append({"id": node.id, "parent": node.parent.id if node.parent is not None else None,
                    "visits": node.visits, "value": node.value, "reward": node.reward,
                    "stage": node.progress.stage, "ok": node.ok, "dead": node.dead})
        stack.extend(reversed(node.children))
    return sorted(out, key=lambda n: n["id"])


@contextlib.contextmanager
def model_output(what: str):
    """Outcome by origin: an exception while handling what the model produced (its reply, its call, what the
    worker answered about it) is the model's :class:`ModelFault`; the search's own control flow, an
    infrastructure error and a fault already classed pass unchanged."""
    try:
        yield
    except (BudgetExhausted, InfraError, ModelFault, MemoryError, OSError, KeyboardInterrupt):
        raise
    except Exception as exc:  # noqa: BLE001 - classed by origin here, once
        raise ModelFault(cap_text(f"handling {what} raised {type(exc).__name__}: {exc}", 500)) from exc


def _furthest(node: Node) -> tuple[int, bool, int]:
    """How far ``node`` got, for the trial's best node: its stage, then whether it holds predictions for the
    test rows (the report then says the save was missing, not the prediction), then the shallower."""
    return node.progress.stage, node.progress.predicted, -node.depth


@contextlib.contextmanager
def _context_overflow_ends_search():
    """A conversation longer than the model's window is the search's own doing: it ends the search
    cleanly (the best node so far is the answer), it is not an infrastructure error."""
    try:
        yield
    except ContextOverflowError as exc:
        raise BudgetExhausted(f"the conversation outgrew the model's context window ({exc})",
                              StopKind.CONTEXT_FULL) from None


def toolset_registry(config: TrialConfig, registry: ToolRegistry | None = None) -> ToolRegistry:
    """The tools of the trial's toolset: what the model is offered and what the workspace may run."""
    return (registry if registry is not None else REGISTRY).for_toolset(config.toolset)
