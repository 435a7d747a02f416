"""Draft shapes: the order in which a proposal's nodes are worth verifying.

A shape orders the nodes of a drafter's proposal so that every prefix of the order is a valid
draft tree (closed under parents); the cost model then cuts each branch's order at the length
it chose. "chain" keeps one path (the best-scored child at each level), "tree" the ``top_k``
best children of every kept node level by level, and "dynamic" every node by cumulative draft
probability, best first (EAGLE-2's dynamic tree).
"""

from __future__ import annotations

from .drafter import DraftTree


def order(draft: DraftTree, shape: str, top_k: int) -> list[int]:
    """Node indices of ``draft`` in the order ``shape`` spends a budget on them."""
    n = len(draft)
    kids: list[list[int]] = [[] for _ in range(n + 1)]  # kids[p + 1]: children of node p (-1: the root)
    for k, p in enumerate(draft.parents):
        kids[p + 1].append(k)
    for group in kids:
        group.sort(key=lambda k: (-draft.scores[k], k))
    if shape == "chain":
        out, at = [], -1
        while kids[at + 1]:
            at = kids[at + 1][0]
            out.append(at)
        return out
    if shape == "tree":
        out, level = [], [-1]
        while level:
            nxt = [k for p in level for k in kids[p + 1][:top_k]]
            out += nxt
            level = nxt
        return out
    if shape == "dynamic":
        depth = draft.depths()
        # A child never outscores its parent, and on ties the shallower node comes first, so
        # every prefix of this order keeps each node's parent.
        return sorted(range(n), key=lambda k: (-draft.scores[k], depth[k], k))
    raise ValueError(f"unknown draft shape {shape!r}; use 'chain', 'tree' or 'dynamic'")
