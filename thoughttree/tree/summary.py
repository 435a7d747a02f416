"""Counts that describe a searched tree: its shape, its tokens and its solutions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from .node import Status
from .query import best_path, is_scored

if TYPE_CHECKING:
    from .thought_tree import ThoughtTree


@dataclass(frozen=True)
class TreeSummary:
    """The shape and cost of one tree, or of several added together.

    Attributes:
        nodes: all nodes, pruned ones included.
        roots: root nodes (prompts).
        per_depth: number of nodes at depth 0, 1, 2, ...
        expanded: nodes with at least one child.
        prompt_tokens: tokens of the roots.
        generated_tokens: tokens of every other node.
        solved: nodes with status solved.
        pruned: nodes with status pruned.
        best_value: value at the end of the best path (see ``best_path``), None if unscored.
    """

    nodes: int
    roots: int
    per_depth: tuple[int, ...]
    expanded: int
    prompt_tokens: int
    generated_tokens: int
    solved: int
    pruned: int
    best_value: float | None

    @property
    def branching(self) -> float | None:
        """Mean number of children of the expanded nodes; None when nothing was expanded."""
        # Every non-root node is the child of an expanded node.
        return (self.nodes - self.roots) / self.expanded if self.expanded else None


def summarize(tree: ThoughtTree) -> TreeSummary:
    """Count ``tree``'s nodes per depth, expansions, tokens, solutions and pruned nodes."""
    depth = [0] * len(tree.nodes)
    for n in tree.nodes:  # a parent's id is always below its children's
        if n.parent is not None:
            depth[n.id] = depth[n.parent.id] + 1
    per_depth = [0] * (max(depth) + 1 if depth else 0)
    for d in depth:
        per_depth[d] += 1
    path = best_path(tree)
    best = path[-1].value if path and is_scored(path[-1].value) else None
    return TreeSummary(
        nodes=len(tree.nodes),
        roots=len(tree.roots),
        per_depth=tuple(per_depth),
        expanded=sum(1 for n in tree.nodes if n.children),
        prompt_tokens=sum(len(n.tokens) for n in tree.roots),
        generated_tokens=sum(len(n.tokens) for n in tree.nodes if n.parent is not None),
        solved=sum(1 for n in tree.nodes if n.status is Status.SOLVED),
        pruned=sum(1 for n in tree.nodes if n.status is Status.PRUNED),
        best_value=best,
    )


def combine(summaries: Iterable[TreeSummary]) -> TreeSummary:
    """Totals over several trees; ``best_value`` is the highest of theirs."""
    items = list(summaries)
    depth_len = max((len(s.per_depth) for s in items), default=0)
    per_depth = [sum(s.per_depth[d] for s in items if d < len(s.per_depth)) for d in range(depth_len)]
    values = [s.best_value for s in items if s.best_value is not None]
    return TreeSummary(
        nodes=sum(s.nodes for s in items),
        roots=sum(s.roots for s in items),
        per_depth=tuple(per_depth),
        expanded=sum(s.expanded for s in items),
        prompt_tokens=sum(s.prompt_tokens for s in items),
        generated_tokens=sum(s.generated_tokens for s in items),
        solved=sum(s.solved for s in items),
        pruned=sum(s.pruned for s in items),
        best_value=max(values) if values else None,
    )
