"""Search-tree nodes, UCT selection and backpropagation shared by every planner.

A node is one executed tool call. It owns a path-local scratchpad (only what its
call wrote), the tool log of its path and the stage progress reached there.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mltb_core.toolkit.registry import ToolCall
from mltb_core.planners.rewards import PathLog, Progress
from mltb_core.toolkit.scratchpad import Scratchpad

__all__ = ["Node", "uct_select", "backpropagate", "path_to"]

@dataclass(eq=False)
class Node:
    pad: Scratchpad
    parent: Node | None = None
    call: ToolCall | None = None        # None for the root and for replies without a tool call
    call_id: str = ""
    assistant_text: str = ""
    observation: str = ""               # what the model sees after this step (tool result + feedback)
    ok: bool = True                     # the tool call succeeded
    log: PathLog = field(default_factory=PathLog)
    progress: Progress = field(default_factory=Progress)
    found: dict[str, Any] = field(default_factory=dict)
    reward: float = 0.0
    visits: int = 0
    value_sum: float = 0.0
    children: list[Node] = field(default_factory=list)
    expanded: bool = False
    dead: bool = False                  # nothing left to expand below (depth limit, all children dead)
    id: int = 0                         # numbered by the episode, so runs are reproducible

    @property
    def depth(self) -> int:
        return self.pad.depth

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
