"""Planners, registered by name: react, lats, mcts_outcome, mcts_shaped, hierarchical_mcts,
automind, mle_star, agent_k."""
from mltb_core.planners.base import PLANNERS, Planner, SearchResult, UnknownPlannerError, get_planner_class
from mltb_core.planners import react, mcts, lats, hierarchical, automind, mle_star, agent_k  # noqa: F401  (registration)

__all__ = ["PLANNERS", "Planner", "SearchResult", "UnknownPlannerError", "get_planner_class"]
