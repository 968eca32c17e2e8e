"""The planner interface and registry: one small class per planner over the shared episode/tree."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from mltb_core.config import TrialConfig
from mltb_core.planners.episode import BudgetExhausted, Episode
from mltb_core.planners.tree import Node

__all__ = ["Planner", "SearchResult", "PLANNERS", "register", "get_planner_class", "UnknownPlannerError"]


class UnknownPlannerError(ValueError):
    pass


@dataclass
class SearchResult:
    best: Node            # the node whose path is the answer (a valid submission when best.terminal)
    stop_reason: str


class Planner:
    """Subclasses implement :meth:`search`; ``run`` turns budget exhaustion into a clean stop."""

    name: ClassVar[str]
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

    def run(self) -> SearchResult:
        try:
            result = self.search()
        except BudgetExhausted as exc:
            result = SearchResult(self.ep.best, exc.reason)
        return result

    def search(self) -> SearchResult:  # pragma: no cover - interface
        raise NotImplementedError


def _pick(value: bool | None, default: bool) -> bool:
    return default if value is None else bool(value)


PLANNERS: dict[str, type[Planner]] = {}


def register(cls: type[Planner]) -> type[Planner]:
    PLANNERS[cls.name] = cls
    return cls


def get_planner_class(name: str) -> type[Planner]:
    try:
        return PLANNERS[name]
    except KeyError:
        raise UnknownPlannerError(f"unknown planner {name!r}; valid planners: {', '.join(PLANNERS)}") from None
