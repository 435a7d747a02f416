"""A thought: one node of a search tree and the tokens of its own KV segment."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:
    from .thought_tree import ThoughtTree


class Status(str, Enum):
    """Where a node stands in the search."""

    OPEN = "open"  # may still be expanded
    EXPANDED = "expanded"  # has been expanded at least once
    PRUNED = "pruned"  # cut from the search; its KV is freed
    TERMINAL = "terminal"  # finished without a verified solution
    SOLVED = "solved"  # finished with a verified solution


@dataclass(eq=False)
class Node:
    """One thought. Its text is exactly the decoded ``tokens``, so a path's text is what the model read.

    Attributes:
        id: unique within its tree, assigned in creation order.
        parent: None for a root.
        tokens: token ids of this node's own segment (not its ancestors').
        logprob: sum of the model's log-probabilities of ``tokens`` when generated (0 for given text).
        value: the evaluator's score, if evaluated.
        visits: how often a search visited the node (MCTS counts, DFS visits).
        kv: the runtime's handle of this node's KV segment, None while not materialised or once freed.
        position: where the node sits: its root's index among the tree's roots, then its index
            among its parent's children at each level down to it. Unlike ``id`` it does not depend
            on what was created before, so seeds are derived from it.
    """

    id: int
    tree: ThoughtTree = field(repr=False)
    parent: Node | None
    tokens: list[int]
    text: str
    logprob: float = 0.0
    value: float | None = None
    visits: int = 0
    status: Status = Status.OPEN
    metadata: dict[str, Any] = field(default_factory=dict)
    children: list[Node] = field(default_factory=list, repr=False)
    kv: Any = field(default=None, repr=False)
    position: tuple[int, ...] = field(default=(), repr=False)

    @property
    def depth(self) -> int:
        depth, node = 0, self.parent
        while node is not None:
            depth, node = depth + 1, node.parent
        return depth

    @property
    def is_leaf(self) -> bool:
        return not self.children

    @property
    def is_root(self) -> bool:
        return self.parent is None

    def path(self) -> list[Node]:
        """Nodes from the root down to this one."""
        out: list[Node] = []
        node: Node | None = self
        while node is not None:
            out.append(node)
            node = node.parent
        return out[::-1]

    def path_tokens(self) -> list[int]:
        return [t for n in self.path() for t in n.tokens]

    def path_text(self, *, include_root: bool = True) -> str:
        nodes = self.path() if include_root else self.path()[1:]
        return "".join(n.text for n in nodes)

    @property
    def num_path_tokens(self) -> int:
        return sum(len(n.tokens) for n in self.path())

    def descendants(self) -> Iterator[Node]:
        """This node and everything below it, depth first, children in order."""
        stack = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))

    def extend(self, text: str) -> Node:
        """Append ``text`` as a new child (its KV is prefilled when first needed)."""
        return self.tree.extend(self, text)

    @property
    def alive(self) -> bool:
        return self.status is not Status.PRUNED
