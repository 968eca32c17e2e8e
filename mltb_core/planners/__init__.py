"""Planners, registered by name: react, lats, mcts_outcome, mcts_shaped, hierarchical_mcts."""
from .base import PLANNERS, Planner, SearchResult, UnknownPlannerError, get_planner_class
from . import react, mcts, lats, hierarchical  # noqa: F401  (registration)

__all__ = ["PLANNERS", "Planner", "SearchResult", "UnknownPlannerError", "get_planner_class"]
