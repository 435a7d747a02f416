"""Beam search over thoughts or over tokens.

Each round every hypothesis in the beam is expanded (``samples`` sampled thoughts, or the
model's ``samples`` most likely next tokens with ``unit="token"``), and the best ``width``
hypotheses by score survive; the rest are pruned, finished ones too (a verified solution is
kept whatever its score). Finished hypotheses stay while they rank among the best; the search
ends when the beam holds only finished ones or after ``max_steps``, and the answer is the best
finished hypothesis left.

Score: the path's log-probability below the root divided by ``length ** length_penalty``
(length in tokens; 0 = plain sum, 1 = per-token mean), or the evaluator's value
(``score="value"``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..tree import Node, Status
from .base import Step, StrategyBase, choose, positive_int


@dataclass(frozen=True)
class BeamConfig:
    width: int = 4
    samples: int | None = None
    unit: str = "thought"
    length_penalty: float = 1.0
    score: str = "logprob"
    max_steps: int = 8
    evaluations: int | None = None

    def __post_init__(self) -> None:
        positive_int(self.width, "width", "Beam")
        positive_int(self.samples, "samples", "Beam", allow_none=True)
        positive_int(self.max_steps, "max_steps", "Beam")
        positive_int(self.evaluations, "evaluations", "Beam", allow_none=True)
        choose("thought|token", self.unit, "unit", "Beam")
        choose("logprob|value", self.score, "score", "Beam")
        if not self.length_penalty >= 0:
            raise ValueError(f"Beam: length_penalty must be >= 0, got {self.length_penalty!r}")
        if self.unit == "token" and self.score == "value":
            raise ValueError("Beam: unit='token' scores by log-probability; use score='logprob'")


class Beam(StrategyBase):
    """Beam search; the beam is the set of live leaves of the tree."""

    Config = BeamConfig
    config: BeamConfig

    def score(self, node: Node) -> float:
        if self.config.score == "value":
            return -math.inf if node.value is None else node.value
        path = node.path()[1:]
        length = sum(len(x.tokens) for x in path)
        total = sum(x.logprob for x in path)
        if not path or total != total:  # NaN: a loaded node whose log-probability was not saved
            return -math.inf
        return total / (length ** self.config.length_penalty)

    def ranked(self, nodes: list[Node]) -> list[Node]:
        return sorted(nodes, key=lambda n: (-self.score(n), n.id))

    def step(self) -> Step | None:
        if self.config.score == "value":
            pending = self.pending()
            if pending:
                return Step(evaluate=pending, evaluations=self.config.evaluations)
        live = [n for n in self.tree.nodes if n.is_leaf and n.parent is not None
                and n.status in (Status.OPEN, Status.TERMINAL, Status.SOLVED)]
        if not live:  # nothing expanded yet: the root is the only hypothesis
            root = self.tree.root
            return self._expand([root]) if root.status is Status.OPEN else None
        beam = self.ranked(live)[: self.config.width]
        for node in live:
            if node.status is not Status.SOLVED and all(node is not b for b in beam):
                self.tree.prune(node)
        open_ = [n for n in beam if n.status is Status.OPEN]
        if not open_ or max(n.depth for n in open_) >= self.config.max_steps:
            return None
        return self._expand(sorted(open_, key=lambda n: n.id))

    def _expand(self, nodes: list[Node]) -> Step:
        n = self.config.samples or self.config.width
        if self.config.unit == "token":
            return Step(expand=nodes, n=n, mode="top_tokens", evaluate_children=False)
        return Step(expand=nodes, n=n, evaluate_children=self.config.score == "value",
                    evaluations=self.config.evaluations)

    def best(self) -> Node | None:
        done = [n for n in self.tree.nodes if n.status in (Status.SOLVED, Status.TERMINAL)]
        pool = [n for n in done if n.status is Status.SOLVED] or done
        if not pool:
            pool = [n for n in self.tree.nodes if n.alive and n.is_leaf and n.parent is not None]
        return self.ranked(pool)[0] if pool else None
