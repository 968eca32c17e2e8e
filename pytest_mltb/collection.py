"""Which items exist: name validation, the (task, planner, model, trial) cases and their ids."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import pytest

from mltb_core.config import TrialConfig, trial_fields

from .options import ALL_PLANNERS, Settings, validate_model_name

__all__ = ["Case", "planner_names", "resolve_planners", "resolve_models", "resolve_tasks", "build_cases",
           "model_id", "case_id", "trial_config", "check_task_inputs", "check_model_prices"]

CASE_FIXTURE = "mltb_case"


def planner_names() -> list[str]:
    """Registered planner names, in the paper's order."""
    from mltb_core.planners import PLANNERS
    from mltb_core.analysis.tables import PLANNER_ORDER

    return sorted(PLANNERS, key=lambda p: (PLANNER_ORDER.index(p) if p in PLANNER_ORDER else 99, p))


def _unknown(kind: str, names: Iterable[str], valid: Iterable[str]) -> pytest.UsageError:
    return pytest.UsageError(f"mltb: unknown {kind}(s) {', '.join(map(repr, names))}; "
                             f"valid {kind}s: {', '.join(valid) or '(none)'}")


def resolve_planners(settings: Settings) -> list[str]:
    """The planner list (``all`` expands to every registered planner); unknown names are usage errors."""
    valid = planner_names()
    requested = settings.planners
    if not requested or requested == [ALL_PLANNERS]:
        return valid
    bad = [p for p in requested if p not in valid]
    if bad:
        raise _unknown("planner", bad, valid + [ALL_PLANNERS])
    return requested


def resolve_models(settings: Settings) -> list[str]:
    """The model list; malformed model strings are usage errors naming the valid forms."""
    from mltb_core.llm import MODEL_FORMS

    models = settings.models
    if not models:
        raise pytest.UsageError("mltb: --model is empty")
    problems = [f"{m!r} ({why})" for m in models if (why := validate_model_name(m))]
    if problems:
        raise pytest.UsageError(f"mltb: unknown model(s) {', '.join(problems)}; valid forms: {', '.join(MODEL_FORMS)}")
    return models


def _load_tasks(settings: Settings) -> dict:
    from mltb_core.bench.tasks import TaskSpecError, load_tasks

    try:
        return load_tasks(settings.task_dirs)
    except TaskSpecError as exc:
        raise pytest.UsageError(f"mltb: {exc}") from None


def resolve_tasks(settings: Settings) -> list:
    """Task objects: the requested slugs, or every task whose data is available offline."""
    tasks = _load_tasks(settings)
    requested = settings.tasks
    if not requested:
        return [t for t in tasks.values() if t.has_offline_data]
    bad = [slug for slug in requested if slug not in tasks]
    if bad:
        raise _unknown("task", bad, list(tasks))
    return [tasks[slug] for slug in requested]


def check_task_inputs(tasks: list) -> None:
    """Usage errors for a task whose inputs are broken, before any trial runs.

    User tasks (specs outside the bundled fixtures) get their data read and checked (a corrupt or
    truncated CSV, a target or id column missing from the data); every task's leaderboard file is
    read and validated. Both are cached, so the trials pay nothing for the check.
    """
    from mltb_core.bench.datasources import DataSourceError, load_labelled_frame
    from mltb_core.bench.grading import task_leaderboard
    from mltb_core.bench.leaderboards import LeaderboardError
    from mltb_core.bench.tasks import BOARDS, TASKS_DIR

    for task in tasks:
        try:
            if Path(task.spec_path).resolve().parent != TASKS_DIR.resolve() and task.has_offline_data:
                load_labelled_frame(task)
            for board in BOARDS:
                task_leaderboard(task, board=board)
        except (DataSourceError, LeaderboardError) as exc:
            raise pytest.UsageError(f"mltb: task {task.slug!r} ({task.spec_path}): {exc}") from None


def check_model_prices(models: list[str]) -> None:
    """Usage error when an ``openai:`` model has no entry in the price table (or the table is broken)."""
    from mltb_core.llm.prices import PriceTableError, load_price_table

    paid = [m.partition(":")[2] for m in models if m.partition(":")[0] == "openai"]
    if not paid:
        return
    try:
        table = load_price_table()
        for model in paid:
            table.price(model)
    except PriceTableError as exc:
        raise pytest.UsageError(f"mltb: {exc}") from None


def model_id(model: str) -> str:
    """An id-safe model name: ``openai:gpt-4o`` → ``openai-gpt-4o``, ``sim:0.6`` → ``sim0.6``,
    ``local:/models/x.gguf`` → ``local-x``."""
    kind, sep, arg = model.partition(":")
    if not sep:
        text = kind
    elif kind == "sim":
        text = f"sim{arg}"
    elif kind == "local":
        stem = re.split(r"[\\/]", arg.rstrip("/\\"))[-1]
        text = f"local-{stem.removesuffix('.gguf')}"
    else:
        text = f"{kind}-{arg}"
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")


def case_id(task: str, planner: str, model: str, trial: int) -> str:
    return f"{task}-{planner}-{model_id(model)}-t{trial:02d}"


@dataclass(frozen=True)
class Case:
    """One pytest item: a trial of a planner with a model on a task."""
    task: str
    planner: str
    model: str
    trial: int

    @property
    def id(self) -> str:
        return case_id(self.task, self.planner, self.model, self.trial)


def build_cases(tasks: list, planners: list[str], models: list[str], trials: int) -> list[Case]:
    """Every combination in a fixed order: task, planner, model, trial (as given; defaults are sorted)."""
    return [Case(task.slug, planner, model, trial)
            for task in tasks for planner in planners for model in models for trial in range(trials)]


def trial_config(settings: Settings, planner: str, model: str, trial: int) -> TrialConfig:
    """The TrialConfig of one case: the trial settings that were set override the field defaults
    (the table maps each setting to its field); a value TrialConfig rejects is a usage error."""
    try:
        return TrialConfig(**{**trial_fields(settings.values), "planner": planner, "model": model, "trial": trial})
    except ValueError as exc:
        raise pytest.UsageError(f"mltb: bad trial configuration: {exc}") from None
