"""Which items exist: name validation, the (task, planner, model, trial) cases, their ids and markers.

The case list of a process is built once (:func:`plan_for`) and shared by parametrisation, resume,
crash records and the summary. Heavy core modules (planners, tasks) are imported inside functions: this
module is imported by every pytest run in the environment.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

import pytest

from mltb_core.config import TrialConfig, case_id, is_case_id, trial_fields

from .options import ALL_PLANNERS, Settings, check_trial_environment

if TYPE_CHECKING:
    from mltb_core.llm.backends import ModelRef

__all__ = ["Case", "Plan", "plan_for", "case_marker_names", "planner_names", "resolve_planners",
           "resolve_models", "resolve_tasks", "build_cases", "case_id", "case_id_of_nodeid", "trial_config",
           "check_task_inputs", "check_models", "CASE_FIXTURE"]

CASE_FIXTURE = "mltb_case"    # the fixture the plugin parametrises with the cases


def planner_names() -> list[str]:
    """Registered planner names, in display order; a broken or clashing plug-in is a usage error."""
    from mltb_core.planners import planner_names as registered
    from mltb_core.plugins import RegistryError

    try:
        return registered()
    except RegistryError as exc:
        raise pytest.UsageError(f"mltb: {exc}") from None


def _unknown(kind: str, names: Iterable[str], valid: Iterable[str]) -> pytest.UsageError:
    from mltb_core.plugins import did_you_mean

    names, valid = list(names), list(valid)
    return pytest.UsageError(f"mltb: unknown {kind}(s) {', '.join(map(repr, names))}{did_you_mean(names, valid)}; "
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


def resolve_models(settings: Settings) -> list:
    """The models, parsed once (ModelRefs); malformed model strings are usage errors naming the valid forms."""
    return settings.model_refs()


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
    """Usage errors for a task whose inputs are broken (data file, its columns, boards), before any trial
    runs: the core's one check (:func:`mltb_core.bench.tasks.check_task_inputs`), as a pytest usage error."""
    from mltb_core.bench.tasks import TaskSpecError, check_task_inputs as check

    for task in tasks:
        try:
            check(task)
        except TaskSpecError as exc:
            raise pytest.UsageError(f"mltb: task {task.slug!r}: {exc}") from None


def check_confinement_here(unconfined: bool) -> None:
    """Fail closed: no Landlock here and no --unconfined is a usage error before any trial."""
    from mltb_core.runner.solve import ConfinementError, check_confinement

    try:
        check_confinement(unconfined)
    except ConfinementError as exc:
        raise pytest.UsageError(f"mltb: {exc}") from None


def check_models(models: list) -> list[str]:
    """One usage error listing whatever the models lack before a run (API key, price, package, model
    file); returns the notes to show (e.g. an unpriced model on a custom server counted at $0)."""
    from mltb_core.llm.backends import preflight
    from mltb_core.llm.prices import PriceTableError

    try:
        checked = preflight(models)
    except PriceTableError as exc:   # the table itself is broken
        raise pytest.UsageError(f"mltb: {exc}") from None
    if checked.problems:
        raise pytest.UsageError("mltb: " + "; ".join(checked.problems))
    return checked.notes


def case_id_of_nodeid(nodeid: str) -> str | None:
    """The case id in an item's node id (``...::test_x[<case id>]``), or None when it has none."""
    if not nodeid.endswith("]") or "[" not in nodeid:
        return None
    param = nodeid.rsplit("[", 1)[-1][:-1]
    return param if is_case_id(param) else None


@dataclass(frozen=True)
class Case:
    """One pytest item: a trial of a planner with a model (parsed once: a ModelRef) on a task."""
    task: str
    planner: str
    model: ModelRef
    trial: int

    @property
    def id(self) -> str:
        return case_id(self.task, self.planner, self.model, self.trial)


def case_marker_names(case: Case) -> tuple[str, str, str]:
    """The markers of a case's item: planner, model kind and task (dashes → underscores), so that
    ``-m "mcts_shaped and not sim and spaceship_titanic"`` selects items."""
    return case.planner, case.model.kind, re.sub(r"\W", "_", case.task)


def build_cases(tasks: list, planners: list[str], models: list[ModelRef], trials: int) -> list[Case]:
    """Every combination in a fixed order: trial, then task, planner, model (as given; defaults are sorted).
    Trial outermost: every cell's trial t is started before any cell's trial t+1, so a run stopped part-way is
    nearly balanced across cells (under xdist a worker holds queued items, so a cell can lag by a trial or
    two while another worker runs later ones; ``--resume`` fills such gaps by case id)."""
    return [Case(task.slug, planner, model, trial)
            for trial in range(trials) for task in tasks for planner in planners for model in models]


def trial_config(settings: Settings, planner: str, model: ModelRef, trial: int) -> TrialConfig:
    """The TrialConfig of one case: the trial settings that were set override the field defaults
    (the table maps each setting to its field); a value TrialConfig rejects is a usage error."""
    try:
        return TrialConfig(**{**trial_fields(settings.values), "planner": planner, "model": model, "trial": trial})
    except ValueError as exc:
        raise pytest.UsageError(f"mltb: bad trial configuration: {exc}") from None


class Plan:
    """The cases of this run in collection order, with the TrialConfig each one runs with."""

    def __init__(self, cases: list[Case], configs: dict[str, TrialConfig], models: list[ModelRef]):
        self.cases = tuple(cases)
        self.configs = configs          # by case id
        self.models = tuple(models)
        self._by_id = {c.id: c for c in self.cases}

    def case(self, case_id: str) -> Case | None:
        return self._by_id.get(case_id)

    def config(self, case: Case) -> TrialConfig:
        return self.configs[case.id]

    def config_hashes(self) -> list[str]:
        return sorted({config.config_hash() for config in self.configs.values()})

    def case_of_nodeid(self, nodeid: str) -> Case | None:
        """The case of an item's node id (``...::test_x[<case id>]``), or None for other items."""
        found = case_id_of_nodeid(nodeid)
        return None if found is None else self.case(found)

    def case_of_record(self, record) -> Case | None:
        """The case a record (from this run or an earlier one) is a trial of, or None."""
        return self.case(record.case_id)


_PLAN = pytest.StashKey[Plan]()
_MARKERS = pytest.StashKey[set]()


def plan_for(config: pytest.Config, settings: Settings) -> Plan:
    """This process's Plan, built on first use: names resolved (unknown ones are usage errors), every
    case's TrialConfig built once (through the ``pytest_mltb_trial_config`` hook) and its markers registered."""
    plan = config.stash.get(_PLAN, None)
    if plan is not None:
        return plan
    check_trial_environment()
    models = resolve_models(settings)
    cases = build_cases(resolve_tasks(settings), resolve_planners(settings), models, settings.trials)
    configs = {}
    for case in cases:
        base = trial_config(settings, case.planner, case.model, case.trial)
        configs[case.id] = config.hook.pytest_mltb_trial_config(case=case, config=base) or base
    plan = Plan(cases, configs, models)
    register_markers(config, plan)
    config.stash[_PLAN] = plan
    return plan


def register_markers(config: pytest.Config, plan: Plan) -> None:
    """Register the planner, model-kind and task markers (so ``--strict-markers`` accepts them): every
    registered planner and backend, whether or not this run has items of it (``-m "mcts_shaped and local"``
    in a sim-only run selects nothing; it is not an unknown marker), and the plan's tasks."""
    from mltb_core.llm.backends import available_backends
    from mltb_core.planners import PLANNERS

    registered = config.stash.setdefault(_MARKERS, set())
    what = ("planner", "model kind", "task")
    names = [("planner", p) for p in PLANNERS] + [("model kind", k) for k in available_backends()]
    names += [pair for case in plan.cases for pair in zip(what, case_marker_names(case))]
    for kind, name in names:
        if name not in registered:
            registered.add(name)
            config.addinivalue_line("markers", f"{name}: mltb benchmark items of the {kind} {name!r}")
