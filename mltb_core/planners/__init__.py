"""Planners, registered by name (``PLANNERS``; ``mltb_core.planners.base`` has the rules). The built-ins
are registered here, once, in the tables' column order: the paper's planners, then the whole-solution
planners of the seed systems. Planners of other packages come through the ``mltb.planners`` entry points."""
from mltb_core.planners.base import (ENTRY_POINT_GROUP, PLANNERS, Planner, SearchResult, UnknownPlannerError,
                                     get_planner_class, planner_names, register)
from mltb_core.planners import react, mcts, lats, hierarchical, automind, mle_star, agent_k

for _builtin in (react.ReAct, lats.LATS, mcts.MCTSOutcome, mcts.MCTSShaped, hierarchical.HierarchicalMCTS,
                 automind.AutoMind, mle_star.MLEStar, agent_k.AgentK):
    register(_builtin)

__all__ = ["PLANNERS", "Planner", "SearchResult", "UnknownPlannerError", "get_planner_class", "planner_names",
           "register", "ENTRY_POINT_GROUP"]
