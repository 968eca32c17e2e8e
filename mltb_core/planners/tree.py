"""Search-tree nodes, UCT selection and backpropagation shared by every planner.

A node is one executed tool call, as the planner knows it: the call, what the model was shown, the
names it wrote, the tool log of its path and the stage progress reached there. The objects themselves
live in the trial's workspace (see :mod:`mltb_core.stages.workspace`), under the node's ``state`` id.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mltb_core.toolkit.registry import ToolCall
from mltb_core.stages.rewards import PathLog, Progress

__all__ = ["Node", "uct_select", "backpropagate", "path_to"]

@dataclass(eq=False)
class Node:
    parent: Node | None = None
    call: ToolCall | None = None        # None for the root and for replies without a tool call
    call_id: str = ""
    assistant_text: str = ""
    observation: str = ""               # what the model sees after this step (tool result + feedback)
    ok: bool = True                     # the tool call succeeded
    log: PathLog = field(default_factory=PathLog)
    progress: Progress = field(default_factory=Progress)
    found: dict[str, Any] = field(default_factory=dict)
    # the reward the search backed up for this node when it evaluated it (its rollout value: MCTS-Shaped's stage
    # rewards less the depth penalty, LATS's judge score); None: never evaluated (the root, ReAct's steps)
    reward: float | None = None
    visits: int = 0
    value_sum: float = 0.0
    children: list[Node] = field(default_factory=list)
    expanded: bool = False
    dead: bool = False                  # nothing left to expand below (depth limit, all children dead)
    id: int = 0                         # numbered by the episode, so runs are reproducible
    depth: int = 0                      # tool-call steps from the root
    state: int = 0                      # the workspace state it sees: its own id, its parent's when no call ran
    written: tuple[str, ...] = ()       # object names its call stored
    cv_scores: dict[str, float] = field(default_factory=dict)   # model a fitting tool wrote -> CV (Episode.step)

    def writer(self, name: str) -> Node | None:
        """The nearest node on the root→self path whose call stored ``name`` (None: never stored)."""
        cur: Node | None = self
        while cur is not None:
            if name in cur.written:
                return cur
            cur = cur.parent
        return None

    @property
    def value(self) -> float:
        return self.value_sum / self.visits if self.visits else 0.0

    @property
    def terminal(self) -> bool:
        """A valid submission was written on this path (whatever stages it skipped)."""
        return self.log.valid_submission

    def add_child(self, child: Node) -> Node:
        self.children.append(child)
        return child


def path_to(node: Node) -> list[Node]:
    """Root→node, root included."""
    out = []
    cur: Node | None = node
    while cur is not None:
        out.append(cur)
        cur = cur.parent
    return out[::-1]


def uct_select(root: Node, exploration: float, is_leaf: Callable[[Node], bool] | None = None) -> Node | None:
    """Descend from ``root`` by UCT to a node to expand; None when the whole tree is exhausted."""
    if root.dead:
        return None
    node = root
    while True:
        if (is_leaf and is_leaf(node)) or not node.expanded:
            return node
        live = [c for c in node.children if not c.dead]
        if not live:
            node.dead = True
            if node is root:
                return None
            node = root
            continue
        unvisited = [c for c in live if c.visits == 0]
        if unvisited:
            node = unvisited[0]
            continue
        log_n = math.log(max(node.visits, 1))
        node = max(live, key=lambda c: c.value + exploration * math.sqrt(log_n / c.visits))


def backpropagate(node: Node, reward: float, stop_at: Node | None = None) -> None:
    """Add ``reward`` to every node from ``node`` up to the root (or ``stop_at``): running means."""
    cur: Node | None = node
    while cur is not None:
        cur.visits += 1
        cur.value_sum += reward
        if cur is stop_at:
            break
        cur = cur.parent
