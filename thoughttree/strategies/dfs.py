"""Depth-first search with backtracking, as in Tree of Thoughts.

The next node to expand is the first open leaf in depth-first order, children visited best
value first; children scoring below ``threshold`` are pruned, so when a node's children are all
pruned or exhausted the search backtracks to the next sibling. ``width`` > 1 expands the first
``width`` open leaves of that order in one round (a batched DFS).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..tree import Node, Status
from .base import Outcome, Step, StrategyBase, positive_int, sorted_by_value


@dataclass(frozen=True)
class DFSConfig:
    """``samples``: children per expansion; ``threshold``: prune children valued below it (None = keep
    all); ``depth``: deepest level expanded to; ``width``: leaves expanded per round."""

    samples: int = 3
    threshold: float | None = None
    depth: int = 3
    width: int = 1
    evaluations: int | None = None
    stop_on_solution: bool = True

    def __post_init__(self) -> None:
        for name in ("samples", "depth", "width"):
            positive_int(getattr(self, name), name, "DFS")
        positive_int(self.evaluations, "evaluations", "DFS", allow_none=True)
        t = self.threshold
        if t is not None and not (isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t)):
            raise ValueError(f"DFS threshold must be a finite number or None, got {t!r}")


class DFS(StrategyBase):
    """Depth-first search; its stack is the tree itself (open leaves in value order)."""

    Config = DFSConfig
    config: DFSConfig

    def step(self) -> Step | None:
        pending = self.pending()
        if pending:
            return Step(evaluate=pending, evaluations=self.config.evaluations)
        self._prune_below_threshold()
        order = self.open_leaves()
        if not order:
            return None
        return Step(expand=order[: self.config.width], n=self.config.samples, evaluations=self.config.evaluations)

    def update(self, outcome: Outcome) -> None:
        for node in outcome.expanded:
            node.visits += 1
        self._prune_below_threshold()

    def open_leaves(self) -> list[Node]:
        """Expandable leaves in depth-first order, best-valued child first."""
        out: list[Node] = []
        stack = list(reversed(self.tree.roots))
        while stack:
            node = stack.pop()
            if not node.alive:
                continue
            if node.status is Status.OPEN and node.is_leaf:
                if node.depth < self.config.depth:
                    out.append(node)
                continue
            stack.extend(reversed(sorted_by_value(node.children)))
        return out

    def _prune_below_threshold(self) -> None:
        t = self.config.threshold
        if t is None:
            return
        for node in self.tree.nodes:
            if node.status is Status.OPEN and node.value is not None and node.value < t and node.parent is not None:
                node.metadata["rejected"] = f"value below threshold {t}"
                self.tree.prune(node)
