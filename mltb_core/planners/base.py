"""The planner interface and registry: one small class per planner over the shared episode/tree.

Planners are registered by name in :data:`PLANNERS` under the one registry rule (``mltb_core.plugins``):
the built-ins by ``mltb_core.planners`` (in the tables' column order), a third party's through the
entry-point group ``mltb.planners`` (loaded on first read, after the built-ins), or from code with
:func:`register`. A planner declares its own settings next to its class (``knobs``); they join the
settings table when it is registered.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from mltb_core.config import Setting, TrialConfig, declare_knobs
from mltb_core.plugins import Registry, RegistryError, did_you_mean, origin_of
from mltb_core.planners.episode import BudgetExhausted, Episode
from mltb_core.bench.stops import StopKind
from mltb_core.planners.tree import Node

__all__ = ["Planner", "SearchResult", "PLANNERS", "ENTRY_POINT_GROUP", "register", "get_planner_class",
           "UnknownPlannerError", "planner_names"]

ENTRY_POINT_GROUP = "mltb.planners"


class UnknownPlannerError(ValueError):
    pass


@dataclass
class SearchResult:
    best: Node            # the node whose path is the answer (a valid submission when best.terminal)
    stop_reason: str      # the detail a person reads
    stop_kind: StopKind = StopKind.UNSPECIFIED   # what tables count (bench/stops.py); plug-ins may omit it


class Planner:
    """Subclasses implement :meth:`search`; ``run`` turns budget exhaustion into a clean stop."""

    name: ClassVar[str]
    # This planner's own settings (config.knob(...)); a subclass has its bases' too. Each is a flag, ini
    # key and MLTB_* variable of both front ends, read with config.knob(name), hashed for its planners only.
    knobs: ClassVar[tuple[Setting, ...]] = ()
    # True on a class that deliberately replaces a registered planner of the same name (a clash otherwise).
    overrides: ClassVar[bool] = False
    # Defaults of the ablation switches; TrialConfig values of None mean "use these".
    default_feedback: ClassVar[bool] = True
    default_shaping: ClassVar[bool] = True
    default_masking: ClassVar[bool] = False
    default_decomposition: ClassVar[bool] = False

    def __init__(self, episode: Episode, config: TrialConfig):
        self.ep = episode
        self.config = config
        self.shaping = _pick(config.reward_shaping, self.default_shaping)
        self.masking = _pick(config.tool_masking, self.default_masking)
        self.decomposition = _pick(config.decomposition, self.default_decomposition)

    @classmethod
    def feedback_enabled(cls, config: TrialConfig) -> bool:
        return _pick(config.feedback, cls.default_feedback)

    @classmethod
    def after_trial(cls, config: TrialConfig, task_slug: str, trajectory_path: Path, valid: bool) -> None:
        """In the parent process after a trial (its ``valid``: the search's own last-stage check, never the
        graded labels): a planner that keeps something across a run's trials (agent_k's memory) notes it
        here, so the runner needs to know no planner's internals. Nothing by default."""

    def run(self) -> SearchResult:
        try:
            result = self.search()
        except BudgetExhausted as exc:
            result = SearchResult(self.ep.best, exc.reason, exc.kind)
        return result

    def search(self) -> SearchResult:  # pragma: no cover - interface
        raise NotImplementedError


def _pick(value: bool | None, default: bool) -> bool:
    return default if value is None else bool(value)


def declared_knobs(cls: type[Planner]) -> list[tuple[Setting, str]]:
    """``(knob, origin)`` of every knob ``cls`` and its bases declare, bases first."""
    found: dict[str, tuple[Setting, str]] = {}
    for klass in reversed(cls.__mro__):
        for declared in vars(klass).get("knobs", ()):
            found[declared.name] = (declared, origin_of(klass))
    return list(found.values())


def _check_entry_point(name: str, obj: Any) -> bool:
    """An ``mltb.planners`` entry point loads a Planner subclass of the same name; returns its ``overrides``."""
    if not (isinstance(obj, type) and issubclass(obj, Planner)):
        raise RegistryError(f"planner entry point {name!r} (group {ENTRY_POINT_GROUP}) loads {obj!r}, "
                            f"not a mltb_core.planners.Planner subclass")
    if getattr(obj, "name", None) != name:
        raise RegistryError(f"planner entry point {name!r} loads {origin_of(obj)} named "
                            f"{getattr(obj, 'name', None)!r}; the names must match")
    return bool(vars(obj).get("overrides", False))


# name -> class, in registration order: the built-ins (mltb_core.planners) in the tables' column order,
# then the entry points' by name. This order is the display order of every table and help text.
PLANNERS: Registry[type[Planner]] = Registry(
    "planner", ENTRY_POINT_GROUP, check=_check_entry_point,
    hint="set overrides = True on the new class to replace it deliberately",
    on_register=lambda name, cls: declare_knobs(name, declared_knobs(cls)))


def register(cls: type[Planner] | None = None, *, overrides: bool = False) -> Any:
    """Register a Planner subclass under its ``name`` (``@register`` or ``@register(overrides=True)``)."""
    def add(klass: type[Planner]) -> type[Planner]:
        if not (isinstance(klass, type) and issubclass(klass, Planner)) or not getattr(klass, "name", None):
            raise TypeError(f"register takes a Planner subclass with a name, got {klass!r}")
        return PLANNERS.register(klass.name, klass, overrides=overrides or bool(vars(klass).get("overrides")))
    return add(cls) if cls is not None else add


def planner_names() -> list[str]:
    """Every registered planner, in display order."""
    return list(PLANNERS)


def get_planner_class(name: str) -> type[Planner]:
    try:
        return PLANNERS[name]
    except KeyError:
        raise UnknownPlannerError(f"unknown planner {name!r}{did_you_mean(name, PLANNERS)}; "
                                  f"valid planners: {', '.join(PLANNERS)}") from None
