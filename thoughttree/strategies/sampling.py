"""Flat sampling: best-of-N and self-consistency.

Both draw ``n`` complete answers from the root in one batch. Best-of-N scores them with the
task's evaluator and returns the best (a verified solution first). Self-consistency extracts
each answer with ``task.answer`` and returns a node carrying the most common one (majority vote,
ties to the answer seen first); ``metadata["votes"]`` of every sample says how many agreed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ..tree import Node, Status
from .base import Outcome, Step, StrategyBase, best_node, positive_int


@dataclass(frozen=True)
class BestOfNConfig:
    n: int = 8
    evaluations: int | None = None

    def __post_init__(self) -> None:
        positive_int(self.n, "n", "BestOfN")
        positive_int(self.evaluations, "evaluations", "BestOfN", allow_none=True)


class BestOfN(StrategyBase):
    """Sample ``n`` answers at once, score them all in one batch, keep the best."""

    Config = BestOfNConfig
    config: BestOfNConfig

    def step(self) -> Step | None:
        pending = self.pending()
        if pending:
            return Step(evaluate=pending, evaluations=self.config.evaluations)
        root = self.tree.root
        if root.status is not Status.OPEN:
            return None
        return Step(expand=[root], n=self.config.n, evaluations=self.config.evaluations)


@dataclass(frozen=True)
class SelfConsistencyConfig:
    n: int = 8

    def __post_init__(self) -> None:
        positive_int(self.n, "n", "SelfConsistency")


class SelfConsistency(StrategyBase):
    """Sample ``n`` answers at once and take the majority answer (no evaluation calls)."""

    Config = SelfConsistencyConfig
    config: SelfConsistencyConfig

    def step(self) -> Step | None:
        root = self.tree.root
        if root.status is not Status.OPEN:
            return None
        return Step(expand=[root], n=self.config.n, evaluate_children=False)

    def update(self, outcome: Outcome) -> None:
        ctx = self.ctx
        for node in self.samples():
            if "answer" not in node.metadata:
                node.metadata["answer"] = ctx.task.answer(ctx.problem, node)
        counts = self.votes()
        for node in self.samples():
            answer = node.metadata.get("answer")
            node.metadata["votes"] = counts[answer] if answer is not None else 0

    def samples(self) -> list[Node]:
        """Every sample that voted: duplicates pruned by the task's dedupe still count."""
        return [n for n in self.tree.root.children if n.metadata.get("rejected") in (None, "duplicate")]

    def votes(self) -> Counter[str]:
        return Counter(a for a in (n.metadata.get("answer") for n in self.samples()) if a is not None)

    def majority(self) -> str | None:
        counts = self.votes()
        if not counts:
            return None
        top = max(counts.values())
        return next(a for a in (n.metadata.get("answer") for n in self.samples()) if a is not None and counts[a] == top)

    def best(self) -> Node | None:
        answer = self.majority()
        if answer is None:
            return best_node(self.tree)
        holders = [n for n in self.samples() if n.metadata.get("answer") == answer]
        return next((n for n in holders if n.alive), holders[0])
