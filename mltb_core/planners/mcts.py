"""MCTS over tool calls: UCT selection, expansion of k candidates, depth-0 rollouts, mean backup.

``mcts_outcome`` pays only for a fitted model and a valid submission; ``mcts_shaped``
pays for each of the ten stages. Both subtract a per-level depth penalty.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

from mltb_core.config import Range, knob
from mltb_core.llm import prompts
from mltb_core.stages.rewards import REWARD_STAGES
from mltb_core.planners.base import Planner, SearchResult
from mltb_core.bench.stops import StopKind
from mltb_core.stages.masking import subtask_tools
from mltb_core.planners.tree import Node, backpropagate, uct_select

__all__ = ["MCTSOutcome", "MCTSShaped", "TreeSearch"]


class TreeSearch(Planner):
    """The MCTS machinery shared by every tree planner; subclasses choose values and prompts."""

    system_prompt = prompts.EXPANSION_SYSTEM
    knobs = (
        # Each candidate is one LLM call per expansion: past 20 a single expansion costs more than a
        # whole default search, and a huge k (1e6) just hangs the trial.
        knob("expansion_k", 3, "candidates proposed per expansion",
             range=Range(int, 1, 20, why="each candidate is one LLM call")),
        knob("exploration", 1.0, "UCT exploration weight w", range=Range(float, 0)),
        knob("depth_penalty", 0.1, "per-level penalty on node values", range=Range(float, 0)),
        knob("rollout_depth", 0, "rollout depth (0: the immediate reward, the paper's depth-0 rollouts)",
             range=Range(int, 0)),
    )

    # -- values --------------------------------------------------------------------
    def evaluate(self, node: Node) -> float:
        """Depth-0 rollout: the reward of the node's own state, penalised per level."""
        p = node.progress
        if self.shaping:
            earned = p.reward
        else:
            fitted = any(self.ep.registry.fits_model(t) for t in node.log.tools_used)
            earned = (1.0 if fitted else 0.0) + (1.0 if node.terminal else 0.0)
        # Stage rewards are ~1 each, so the paper's 0.1 per level and UCT weights near 1 keep their meaning.
        return earned - self.config.knob("depth_penalty") * node.depth

    def rollout_value(self, node: Node) -> float:
        """Optional deeper rollouts: follow the model's first candidate ``rollout_depth`` steps."""
        value = self.evaluate(node)
        cur = node
        for _ in range(self.config.knob("rollout_depth")):
            if cur.terminal:
                break
            cands = self.ep.propose(cur, self.system_for(cur), n=1, allowed=self.allowed_for(cur))
            if not cands:
                break
            cur = self.ep.step(cur, cands[0], self.allowed_for(cur))
            cur.dead = True  # rollout nodes are for estimation only, never expanded by the search
            value = max(value, self.evaluate(cur))
        return value

    # -- prompts and masking --------------------------------------------------------
    def system_for(self, node: Node) -> str:
        return self.system_prompt

    def allowed_for(self, node: Node) -> list[str] | None:
        """With masking outside decomposition: only the next unmet stage's tools."""
        if not self.masking or node.progress.done:
            return None
        return subtask_tools(REWARD_STAGES[node.progress.stage].name, self.ep.registry)

    def extra_messages(self, node: Node) -> Iterable[str]:
        return ()

    # -- the loop ------------------------------------------------------------------
    def expand(self, node: Node) -> list[Node]:
        allowed = self.allowed_for(node)
        candidates = self.ep.propose(node, self.system_for(node), n=self.config.knob("expansion_k"), allowed=allowed,
                                     extra=self.extra_messages(node))
        node.expanded = True
        seen: set[str] = set()
        children = []
        for cand in candidates:
            key = cand.key()
            if key in seen:
                continue
            seen.add(key)
            children.append(self.ep.step(node, cand, allowed))
        if not children:
            node.dead = True
        return children

    @staticmethod
    def _back_up(node: Node, reward: float, root: Node) -> None:
        node.reward = reward     # what the tree viewer shows as the node's R
        backpropagate(node, reward, stop_at=root)

    def mcts(self, root: Node, iterations: int, is_solution: Callable[[Node], bool], depth_limit: int,
             stop_after: int = 1, on_child: Callable[[Node], None] | None = None) -> list[Node]:
        """Search below ``root``; return up to ``stop_after`` solution nodes (in order of discovery)."""
        solutions = [root] if is_solution(root) else []
        if len(solutions) >= stop_after:
            return solutions
        for _ in range(iterations):
            leaf = uct_select(root, self.config.knob("exploration"),
                              is_leaf=lambda n: n is not root and (is_solution(n) or n.depth >= depth_limit))
            if leaf is None:
                break
            if leaf is not root and (is_solution(leaf) or leaf.depth >= depth_limit):
                leaf.dead = True
                self._back_up(leaf, self.evaluate(leaf), root)
                continue
            for child in self.expand(leaf):
                self._back_up(child, self.rollout_value(child), root)
                if on_child:
                    on_child(child)
                if is_solution(child):
                    solutions.append(child)
                    child.dead = True   # solved: nothing to expand below it in this search
            if len(solutions) >= stop_after:
                break
        return solutions

    def search(self) -> SearchResult:
        solutions = self.mcts(self.ep.root, self.config.max_iterations, lambda n: n.terminal,
                              self.config.max_depth, on_child=self.after_child)
        if solutions:
            return SearchResult(solutions[0], "valid submission", StopKind.VALID_SUBMISSION)
        if self.ep.root.dead:
            return SearchResult(self.ep.best, "tree exhausted", StopKind.TREE_EXHAUSTED)
        return SearchResult(self.ep.best, f"iteration budget ({self.config.max_iterations}) used up",
                            StopKind.ITERATION_BUDGET)

    def after_child(self, child: Node) -> None:
        """Hook for planners that learn from each new node (LATS reflections)."""


class MCTSOutcome(TreeSearch):
    name = "mcts_outcome"
    default_shaping = False


class MCTSShaped(TreeSearch):
    name = "mcts_shaped"
    default_shaping = True
