"""Hierarchical MCTS: the task as ten ordered subtasks, searched one after another.

For each subtask, MCTS below every seed node enumerates solution nodes (nodes that
pass the subtask's stage) up to a maximum subtask depth; the best of them seed the
next subtask. Tool masking offers only the subtask's tools. No solution for a
subtask ends the search with "No Solution Found".
"""
from __future__ import annotations

from mltb_core.config import Range, knob
from mltb_core.llm import prompts
from mltb_core.stages.rewards import REWARD_STAGES
from mltb_core.planners.base import SearchResult
from mltb_core.bench.stops import StopKind
from mltb_core.stages.masking import subtask_tools
from mltb_core.planners.mcts import TreeSearch
from mltb_core.planners.tree import Node
from mltb_core.stages.events import EventKind


class HierarchicalMCTS(TreeSearch):
    name = "hierarchical_mcts"
    default_shaping = False       # within a subtask only "solved or not" counts
    default_masking = True
    default_decomposition = True
    knobs = (
        knob("subtask_depth", 6, "max depth within one subtask", range=Range(int, 1)),
        knob("subtask_iterations", 8, "iterations per subtask and seed node", range=Range(int, 1)),
        knob("max_solutions", 3, "solution nodes carried into the next subtask", range=Range(int, 1)),
    )

    def search(self) -> SearchResult:
        if not self.decomposition:
            return super().search()
        seeds = [self.ep.root]
        for stage in REWARD_STAGES:
            self._stage = stage
            self.ep.trajectory.write(EventKind.SUBTASK_START, stage=stage.number, name=stage.name,
                                     seeds=[s.id for s in seeds])
            solutions: list[Node] = []
            for seed in seeds:
                wanted = self.config.knob("max_solutions") - len(solutions)
                if wanted <= 0:
                    break
                seed.dead = False
                self._seed_depth = seed.depth
                solutions += self.mcts(seed, self.config.knob("subtask_iterations"),
                                       lambda n, s=stage.number: n.progress.stage >= s,
                                       seed.depth + self.config.knob("subtask_depth"), stop_after=wanted)
            if not solutions:
                return SearchResult(self.ep.best, f"No Solution Found for subtask {stage.number} ({stage.name})",
                                    StopKind.STAGE_FAILED)
            solutions.sort(key=lambda n: (n.progress.reward, n.value, -n.depth), reverse=True)
            seeds = solutions[: self.config.knob("max_solutions")]
        return SearchResult(seeds[0], "valid submission", StopKind.VALID_SUBMISSION)

    def evaluate(self, node: Node) -> float:
        if not self.decomposition:
            return super().evaluate(node)
        solved = 1.0 if node.progress.stage >= self._stage.number else 0.0
        return solved - self.config.knob("depth_penalty") * (node.depth - self._seed_depth)

    def system_for(self, node: Node) -> str:
        if not self.decomposition:
            return super().system_for(node)
        return prompts.subtask_system(self._stage.name)

    def allowed_for(self, node: Node):
        if not self.decomposition:
            return super().allowed_for(node)
        return subtask_tools(self._stage.name, self.ep.registry) if self.masking else None
