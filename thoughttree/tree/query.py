"""Questions about a tree that views and exports share: its best path, whether a value is a
score, and a node's text on one line."""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

from .node import Node, Status

if TYPE_CHECKING:
    from .thought_tree import ThoughtTree

_WHITESPACE = re.compile(r"\s+")
# Text from a model or a run file reaches the terminal: control characters (escape sequences
# among them) are shown as their Unicode pictures, C1 controls, bidirectional overrides and lone
# surrogates as U+FFFD, so no text can move the cursor, retitle the window or reorder a line.
_VISIBLE = {
    **{c: 0x2400 + c for c in range(0x20)},
    0x7F: 0x2421,
    **{c: 0xFFFD for c in [*range(0x80, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A), *range(0xD800, 0xE000)]},
}


def is_scored(value: float | None) -> bool:
    """True for a real value; None (never scored) and NaN (unknown) are not."""
    return value is not None and not math.isnan(value)


def node_score(node: Node) -> float:
    """The node's value, with unknown (None or NaN) below every real value."""
    return float(node.value) if is_scored(node.value) else -math.inf  # type: ignore[arg-type]


def best_path(tree: ThoughtTree) -> list[Node]:
    """The nodes from a root down to the tree's best node; ``[]`` when every node is pruned.

    The best node is, in order of preference:

    1. a solved node: the highest-valued one, ties going to the lowest id (the first found);
    2. otherwise the highest-valued *live leaf*: a node that is not pruned and has no child
       that is not pruned. Ties go to the deeper node, then the lowest id.

    Values that are None or NaN rank below every real value, so in a tree that nobody has
    scored yet the best path is the deepest live branch, first in id order.
    """
    solved = [n for n in tree.nodes if n.status is Status.SOLVED]
    if solved:
        return max(solved, key=lambda n: (node_score(n), -n.id)).path()
    leaves = [n for n in tree.nodes if n.alive and not any(c.alive for c in n.children)]
    if not leaves:
        return []
    return max(leaves, key=lambda n: (node_score(n), n.depth, -n.id)).path()


def one_line(text: str, limit: int) -> str:
    """``text`` on one line of at most ``limit`` characters.

    Runs of whitespace that hold a newline become one ``↵``; other runs become one space; a cut
    ends in ``…``; control characters are shown as their Unicode pictures (ESC as ``␛``).
    """
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    flat = _WHITESPACE.sub(lambda m: "↵" if "\n" in m.group() or "\r" in m.group() else " ", text).strip(" ")
    flat = flat.translate(_VISIBLE)
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip(" ") + "…"
