"""Running one case in the process that runs its item (an xdist worker, or the only process)."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from .collection import Case

__all__ = ["InfraErrorOutcome", "WorkerContext", "run_case", "failure_message", "INFRA_BACKOFF_SECONDS"]

INFRA_BACKOFF_SECONDS = 0.5


class InfraErrorOutcome(Exception):
    """Raised in the trial fixture so pytest reports an ERROR, not a failure."""


def run_case(config: pytest.Config, case: Case, trial_config, task, run_dir: Path, retries: int, split=None):
    """Run one trial through the ``pytest_mltb_run_trial`` hook, retrying infrastructure errors ``retries`` times."""
    from mltb_core.analysis.provenance import code_version, machine_facts
    from mltb_core.analysis.records import Outcome
    from mltb_core.analysis.runstore import RunStore

    earlier_cost = 0.0   # what attempts that ended in an infrastructure error spent: it counts against --run-max-cost
    for attempt in range(1, retries + 2):
        out_dir = RunStore(run_dir).work_dir(case.id, attempt)
        record = config.hook.pytest_mltb_run_trial(case=case, task=task, config=trial_config, out_dir=out_dir,
                                                   split=split)
        if record is None:
            raise RuntimeError("mltb: no pytest_mltb_run_trial implementation returned a record")
        record.extra["attempts"] = attempt
        if earlier_cost:
            record.extra["retried_cost_usd"] = earlier_cost
            record.cost_usd += earlier_cost
        # percentiles of invalid trials count as 0 only where a leaderboard exists (see results.py); run_trial
        # sets it, a pytest_mltb_run_trial of a conftest may not
        record.extra.setdefault("leaderboard", task.has_leaderboard)
        if record.code is None:   # TrialRecord.for_config stamps it; a record a conftest built may lack it
            record.code = code_version()
        if record.machine is None:
            record.machine = dict(machine_facts())
        if record.outcome != Outcome.INFRA_ERROR:
            break
        earlier_cost = record.cost_usd
        if attempt <= retries:
            time.sleep(INFRA_BACKOFF_SECONDS * attempt)
    return record


def failure_message(record) -> str:
    """A few lines: what the trial reached and why it stopped."""
    from mltb_core.analysis.safety import one_line as display_text  # one line, no control characters
    from mltb_core.stages.specs import stage_label

    # the stop reason, feedback and error quote what the model and the worker wrote: no terminal sequences
    lines = [f"{record.outcome}: reached stage {stage_label(record.stage_reached)}"
             f"; stopped: {display_text(record.stop_reason or 'unknown', 300)}"]
    if record.feedback:
        feedback = record.feedback.strip().splitlines()
        lines.append("feedback: " + display_text(" / ".join(feedback[:3]), 300))
    if record.error:
        lines.append("error: " + display_text(record.error.strip().splitlines()[-1], 300))
    lines.append(f"{record.tool_calls} tool calls, {record.llm_calls} LLM calls, {record.wall_seconds:.1f}s")
    resumed = record.extra.get("resumed")
    if isinstance(resumed, dict):   # docs/reports.md, "An interrupted trial"
        lines.append(display_text(f"resumed: {resumed.get('replayed_llm_calls')} LLM calls replayed from the "
                                  f"interrupted run ({resumed.get('replay_stopped')})", 300))
    return "\n".join(lines)


class WorkerContext:
    """What every process that runs items needs: settings, the run directory, the cases to skip, and
    the plan (built once per process, on first use)."""

    def __init__(self, config: pytest.Config, settings, run_dir: Path, skip: set[str]):
        self.config = config
        self.settings = settings
        self.run_dir = run_dir
        self.skip = skip

    def plan(self):
        from .collection import plan_for

        return plan_for(self.config, self.settings)

    def cases(self) -> list[Case]:
        return list(self.plan().cases)
