"""Breadth-first search over thoughts, as in Tree of Thoughts.

Every round expands the whole kept frontier at once (``samples`` children each), scores all new
children in one batch, and keeps the best ``breadth`` of them ("greedy") or ``breadth`` drawn in
proportion to their values ("sample"). The rest are pruned, which frees their KV.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ..tree import Node, Status, derive_seed
from .base import Step, StrategyBase, choose, positive_int, sorted_by_value


@dataclass(frozen=True)
class BFSConfig:
    """``breadth``: nodes kept per level; ``samples``: children per kept node; ``depth``: levels below
    the root; ``evaluations``: value samples per node (None = the evaluator's own); ``selection``:
    "greedy" or "sample"."""

    breadth: int = 5
    samples: int = 3
    depth: int = 3
    evaluations: int | None = None
    selection: str = "greedy"
    stop_on_solution: bool = True

    def __post_init__(self) -> None:
        for name in ("breadth", "samples", "depth"):
            positive_int(getattr(self, name), name, "BFS")
        positive_int(self.evaluations, "evaluations", "BFS", allow_none=True)
        choose("greedy|sample", self.selection, "selection", "BFS")


class BFS(StrategyBase):
    """Tree of Thoughts' breadth-first search; the level's state lives in the tree's open leaves."""

    Config = BFSConfig
    config: BFSConfig

    def step(self) -> Step | None:
        pending = self.pending()
        if pending:  # resumed between expansion and evaluation: finish that round's scoring first
            return Step(evaluate=pending, evaluations=self.config.evaluations)
        frontier = [n for n in self.tree.frontier() if n.status is Status.OPEN]
        if not frontier:
            return None
        keep = self.select(frontier)
        for node in frontier:
            if all(node is not k for k in keep):
                self.tree.prune(node)
        if max(n.depth for n in frontier) >= self.config.depth:  # the last level is selected too
            return None
        return Step(expand=keep, n=self.config.samples, evaluations=self.config.evaluations)

    def select(self, frontier: list[Node]) -> list[Node]:
        """The nodes to keep, in id order."""
        b = self.config.breadth
        if len(frontier) <= b:
            return frontier
        if self.config.selection == "greedy":
            chosen = sorted_by_value(frontier)[:b]
        else:
            # Weighted sampling without replacement (Efraimidis-Spirakis keys); the generator is
            # seeded from the level so a resumed search draws the same nodes.
            rng = random.Random(derive_seed(self.ctx.seed, "bfs-select", frontier[0].depth))
            weights = [max(n.value or 0.0, 0.0) for n in frontier]
            if not any(weights):
                weights = [1.0] * len(frontier)
            keys = [(rng.random() ** (1.0 / w) if w > 0 else -1.0, -n.id) for n, w in zip(frontier, weights)]
            order = sorted(range(len(frontier)), key=lambda i: keys[i], reverse=True)
            chosen = [frontier[i] for i in order[:b]]
        return sorted(chosen, key=lambda n: n.id)
