"""Why a trial stopped: a closed set of kinds, returned by the planner beside its free-text reason.

The kind is what tables count and group by; the reason (``stop_reason``) is the detail a person reads
(which budget, how large, which stage). Nothing parses the reason back into a kind: a planner says the
kind when it stops (``SearchResult(best, reason, kind)``, ``BudgetExhausted(reason, kind)``), the trial
runner says it for the stops it causes (the worker failed, an infrastructure error). Records written
before the kind existed get theirs once, when they are read (``analysis/records.py``'s migration).
"""
from __future__ import annotations

from enum import StrEnum

__all__ = ["StopKind", "STOP_KIND_MEANINGS"]


class StopKind(StrEnum):
    """How a trial's search ended (records keep the value)."""

    VALID_SUBMISSION = "valid_submission"
    LLM_CALL_BUDGET = "llm_call_budget"
    TOKEN_BUDGET = "token_budget"
    COST_BUDGET = "cost_budget"
    TIME_LIMIT = "time_limit"
    ITERATION_BUDGET = "iteration_budget"
    CONTEXT_FULL = "context_full"
    MODEL_ENDED_TURN = "model_ended_turn"
    NO_REPLY = "no_reply"
    TREE_EXHAUSTED = "tree_exhausted"
    STAGE_FAILED = "stage_failed"
    NO_VALID_SOLUTION = "no_valid_solution"
    SEARCH_COMPLETE = "search_complete"
    WORKER_FAILED = "worker_failed"
    MODEL_FAULT = "model_fault"
    ERROR = "error"
    UNSPECIFIED = "unspecified"


# The documented meaning of every kind (docs and the report's stop table read it).
STOP_KIND_MEANINGS: dict[StopKind, str] = {
    StopKind.VALID_SUBMISSION: "the search found a valid submission",
    StopKind.LLM_CALL_BUDGET: "the trial's LLM-call budget (--max-llm-calls) was used up",
    StopKind.TOKEN_BUDGET: "the trial's token budget (--max-tokens) was used up",
    StopKind.COST_BUDGET: "the trial's cost budget (--max-cost) was used up",
    StopKind.TIME_LIMIT: "the trial's time budget (--max-seconds) was used up",
    StopKind.ITERATION_BUDGET: "the planner's own step count ran out (--max-iterations; ReAct's steps, MCTS "
                               "iterations, AutoMind actions, MLE-STAR rounds)",
    StopKind.CONTEXT_FULL: "the conversation outgrew the model's context window",
    StopKind.MODEL_ENDED_TURN: "the model replied without a tool call (ended its turn) before a valid submission",
    StopKind.NO_REPLY: "the model returned no reply",
    StopKind.TREE_EXHAUSTED: "every branch of the search tree was closed",
    StopKind.STAGE_FAILED: "a stage's own search gave up (Hierarchical MCTS's subtask, Agent K's unit test)",
    StopKind.NO_VALID_SOLUTION: "a whole-solution planner found no valid initial solution",
    StopKind.SEARCH_COMPLETE: "the planner ran its whole plan (MLE-STAR refined every block)",
    StopKind.WORKER_FAILED: "the tool worker failed under the search (the model's failure)",
    StopKind.MODEL_FAULT: "handling what the model produced raised outside the worker (the model's failure)",
    StopKind.ERROR: "an infrastructure or internal error ended the trial (never counted)",
    StopKind.UNSPECIFIED: "the planner did not say (a plug-in planner, or an old record whose reason names no kind)",
}
