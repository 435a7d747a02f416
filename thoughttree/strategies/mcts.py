"""Monte Carlo tree search over thoughts with batched, virtual-loss leaf selection.

A round selects up to ``leaves_per_round`` leaves: each descent from the root follows the best
child by UCT or PUCT and leaves a virtual loss on its path (counted as extra visits valued at the
evaluator's minimum, or at the lowest mean value among the siblings when the evaluator's values
are unbounded below), so the next descent of the same round prefers other branches and all the
chosen leaves expand in one batch. A node whose children were all pruned is pruned as a dead
end when a descent reaches it. Each expanded leaf gets ``samples`` children; every child is
evaluated (a value estimate, or a rollout when ``rollout`` is set) and backed up to the root.

Saved in the tree: a node's ``visits`` (N) and ``metadata["value_sum"]`` (W, raw values), and
the root's ``metadata["mcts_iterations"]`` (a leaf's iteration counts once it is expanded). A
descent that ends on a finished node backs its value up again without model work.

UCT:  Q + c * sqrt(ln N_parent / N)
PUCT: Q + c * P * sqrt(N_parent) / (1 + N), P = softmax over siblings of each child's per-token
log-probability / prior_temperature (the LM's prior; for proposed children, their proposal's).
Children sampled as distinct thoughts carry their sequences' probabilities (summed over the
proposals that the task merged into one child): then P is that mass ** (1 / prior_temperature),
normalised over the siblings. Q = W / N scaled into [0, 1] by the evaluator's bounds when they
are finite.

Progressive widening (``widening`` = alpha): a node that has been expanded e times and visited
N times is expanded again (``samples`` more children asked for; the task drops duplicates of
the ones it has) when N ** alpha >= e + 1, so a node's children grow with its visits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from ..tree import Node, Status, ThoughtTree
from .base import Outcome, SearchContext, Step, StrategyBase, choose, positive_int

ITERATIONS = "mcts_iterations"
FINISHED = (Status.TERMINAL, Status.SOLVED)
VALUE_SUM = "value_sum"
EXPANSIONS = "expansions"


@dataclass(frozen=True)
class MCTSConfig:
    iterations: int = 32
    leaves_per_round: int = 4
    samples: int = 3
    c: float = 1.0
    rule: str = "uct"
    virtual_loss: int = 1
    max_depth: int = 8
    prior_temperature: float = 1.0
    evaluations: int | None = None
    rollout: Any = None
    stop_on_solution: bool = True
    widening: float | None = None

    def __post_init__(self) -> None:
        for name in ("iterations", "leaves_per_round", "samples", "max_depth"):
            positive_int(getattr(self, name), name, "MCTS")
        positive_int(self.evaluations, "evaluations", "MCTS", allow_none=True)
        choose("uct|puct", self.rule, "rule", "MCTS")
        if not self.c >= 0:
            raise ValueError(f"MCTS: c must be >= 0, got {self.c!r}")
        if not isinstance(self.virtual_loss, int) or self.virtual_loss < 0:
            raise ValueError(f"MCTS: virtual_loss must be an integer >= 0, got {self.virtual_loss!r}")
        if not self.prior_temperature > 0:
            raise ValueError(f"MCTS: prior_temperature must be > 0, got {self.prior_temperature!r}")
        if self.widening is not None and not 0 < self.widening <= 1:
            raise ValueError(f"MCTS: widening must be in (0, 1] (or None for no widening), got {self.widening!r}")
        if self.rollout is not None and not callable(getattr(self.rollout, "evaluate", None)):
            raise ValueError("MCTS: rollout must be an evaluator such as thoughttree.tasks.Rollout(reward=...)")


class MCTS(StrategyBase):
    """UCT / PUCT tree search; several leaves per round so expansions batch."""

    Config = MCTSConfig
    config: MCTSConfig

    def start(self, tree: ThoughtTree, ctx: SearchContext) -> None:
        super().start(tree, ctx)
        self._selected: list[Node] = []  # the leaves of the round in flight

    def step(self) -> Step | None:
        pending = self.pending()
        if pending:
            return self._step(evaluate=pending)
        root = self.tree.root
        done = root.metadata.get(ITERATIONS, 0)
        if done >= self.config.iterations:
            return None
        virtual: dict[int, int] = {}
        leaves: list[Node] = []
        progressed = False
        for _ in range(min(self.config.leaves_per_round, self.config.iterations - done)):
            path = self.descend(virtual)
            if path is None:
                break
            leaf = path[-1]
            if any(leaf is x for x in leaves):
                break  # every branch is already taken this round
            progressed = True
            if leaf.status in (Status.TERMINAL, Status.SOLVED):
                root.metadata[ITERATIONS] = root.metadata.get(ITERATIONS, 0) + 1
                if leaf.value is not None:
                    self.backup(leaf, leaf.value)
                continue
            leaves.append(leaf)
            for x in path:
                virtual[x.id] = virtual.get(x.id, 0) + self.config.virtual_loss
        if not progressed:
            return None
        self._selected = leaves
        return self._step(expand=leaves)

    def _step(self, expand: Sequence[Node] = (), evaluate: Sequence[Node] = ()) -> Step:
        return Step(expand=sorted(expand, key=lambda n: n.id), evaluate=evaluate, n=self.config.samples,
                    evaluations=self.config.evaluations, evaluator=self.config.rollout)

    def update(self, outcome: Outcome) -> None:
        # An iteration counts once its leaf was expanded (a budget can stop a round, or cap it,
        # before some selected leaves are).
        expanded = {id(x) for x in outcome.expanded}
        for x in outcome.expanded:
            x.metadata[EXPANSIONS] = x.metadata.get(EXPANSIONS, 0) + 1
        root = self.tree.root
        root.metadata[ITERATIONS] = root.metadata.get(ITERATIONS, 0) + sum(id(x) in expanded for x in self._selected)
        self._selected = []
        for node in self.tree.nodes:
            if node.parent is not None and node.alive and node.value is not None and node.visits == 0:
                self.backup(node, node.value)
                if node.depth >= self.config.max_depth and node.status is Status.OPEN:
                    node.status = Status.TERMINAL
                    node.metadata["finish_reason"] = "depth limit"

    def backup(self, node: Node, value: float) -> None:
        for x in node.path():
            x.visits += 1
            x.metadata[VALUE_SUM] = x.metadata.get(VALUE_SUM, 0.0) + value

    def descend(self, virtual: dict[int, int]) -> list[Node] | None:
        """The path from the root to the leaf to expand (or finished node to revisit); None if none
        is left. A node whose children are all pruned is a dead end: it is pruned too, and the
        descent starts again without it (as a node that is not ready yet, with unvalued children)."""
        root, blocked = self.tree.root, set()
        while True:
            node, path = root, [root]
            while not (node.status is Status.OPEN and node.is_leaf) and node.status not in FINISHED:
                if self.widens(node) and id(node) not in blocked:
                    return path
                kids = [c for c in node.children if c.alive and c.value is not None and id(c) not in blocked]
                if not kids:
                    break
                node = self.choose(node, kids, virtual)
                path.append(node)
            else:
                return path
            if node is root:
                return None
            blocked.add(id(node))
            if not any(c.alive for c in node.children):
                node.metadata["rejected"] = "dead end: every child pruned"
                self.tree.prune(node)

    def widens(self, node: Node) -> bool:
        """Whether progressive widening asks for more children of ``node`` now."""
        alpha = self.config.widening
        if alpha is None or node.depth >= self.config.max_depth or not node.children:
            return False
        if any(c.alive and c.value is None for c in node.children):
            return False  # its last children are not valued yet
        expansions = node.metadata.get(EXPANSIONS, 1)
        return max(1, node.visits) ** alpha >= expansions + 1

    def choose(self, parent: Node, kids: list[Node], virtual: dict[int, int]) -> Node:
        lo, hi = (self.config.rollout or self.ctx.evaluator).bounds
        scale = hi - lo if math.isfinite(lo) and math.isfinite(hi) and hi > lo else None
        n_parent = max(1, parent.visits + virtual.get(parent.id, 0))
        priors = self.priors(kids) if self.config.rule == "puct" else None
        # A virtual loss is a visit valued at the evaluator's minimum; without a finite one, at
        # the lowest mean value among these siblings.
        floor = lo if math.isfinite(lo) else min(
            (k.metadata.get(VALUE_SUM, 0.0) / k.visits for k in kids if k.visits), default=0.0)
        best, best_score = kids[0], -math.inf
        for i, kid in enumerate(kids):
            v = virtual.get(kid.id, 0)
            n = kid.visits + v
            if n == 0:
                return kid
            w = kid.metadata.get(VALUE_SUM, 0.0) + v * floor
            q = w / n
            if scale is not None:
                q = (q - lo) / scale
            if priors is None:
                score = q + self.config.c * math.sqrt(math.log(n_parent) / n)
            else:
                score = q + self.config.c * priors[i] * math.sqrt(n_parent) / (1 + n)
            if score > best_score:
                best, best_score = kid, score
        return best

    def priors(self, kids: list[Node]) -> list[float]:
        if all("distinct" in kid.metadata for kid in kids):  # sequence probabilities of distinct samples
            masses = [kid.metadata.get("proposal_mass", math.exp(kid.metadata["distinct"]["sample_logprob"]))
                      for kid in kids]
            weights = [max(m, 1e-300) ** (1 / self.config.prior_temperature) for m in masses]
            total = sum(weights)
            return [w / total for w in weights]
        logits = []
        for kid in kids:
            if "proposal_logprob" in kid.metadata:  # proposed text: the proposal's own probability
                lp, count = kid.metadata["proposal_logprob"], kid.metadata.get("proposal_tokens", 1)
            else:
                lp, count = kid.logprob, len(kid.tokens)
            lp = lp if lp == lp else 0.0  # NaN: not saved with a loaded tree
            logits.append(lp / max(1, count) / self.config.prior_temperature)
        top = max(logits)
        weights = [math.exp(x - top) for x in logits]
        total = sum(weights)
        return [w / total for w in weights]

    def best(self) -> Node | None:
        solved = [n for n in self.tree.nodes if n.status is Status.SOLVED]
        if solved:
            return max(solved, key=lambda n: (n.value if n.value is not None else -math.inf, -n.id))
        node = self.tree.root
        while True:
            kids = [c for c in node.children if c.alive and c.visits > 0]
            if not kids:
                return node if node.parent is not None else None
            node = max(kids, key=lambda c: (c.visits, c.metadata.get(VALUE_SUM, 0.0) / c.visits, -c.id))
