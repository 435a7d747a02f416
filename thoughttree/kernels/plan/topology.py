"""Vectorised tree arithmetic on parent arrays (numpy only).

Every function takes ``parents`` ([N] int64, -1 for a root, a parent before its children) and
works by pointer jumping: each round doubles the ancestor distance it covers, so a tree of depth
``d`` costs ``ceil(log2(d + 1))`` rounds of whole-array numpy operations instead of a Python loop
over nodes. A preorder of a small tree is the exception: a loop over its few hundred nodes is
cheaper than the rounds' fixed costs.
"""

from __future__ import annotations

import numpy as np


def path_sums(parents: np.ndarray, values: np.ndarray) -> np.ndarray:
    """[N] sum of ``values`` over each node and all its ancestors."""
    total = values.astype(np.int64, copy=True)
    jump = parents.astype(np.int64, copy=True)
    while True:
        has = jump >= 0
        if not has.any():
            return total
        # total covers distances [0, 2^k); adding the 2^k-th ancestor's total covers [0, 2^(k+1)).
        total = total + np.where(has, total[jump], 0)
        jump = np.where(has, jump[jump], -1)


def subtree_sums(parents: np.ndarray, values: np.ndarray) -> np.ndarray:
    """[N] sum of ``values`` over each node and all its descendants."""
    n = len(parents)
    total = values.astype(np.int64, copy=True)
    jump = parents.astype(np.int64, copy=True)
    while True:
        has = jump >= 0
        if not has.any():
            return total
        # Descendants at distance [2^k, 2^(k+1)) of i are those at [0, 2^k) of nodes 2^k below i.
        total = total + np.bincount(jump[has], weights=total[has], minlength=n).astype(np.int64)
        jump = np.where(has, jump[jump], -1)


WALK_NODES = 512  # up to this many nodes a preorder is one pass over a Python list: faster than numpy rounds


def preorder(parents: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Depth-first preorder position of each node (children by id) and its subtree size.

    Returns:
        pre:  [N] position in preorder; node i's subtree is exactly positions
              ``[pre[i], pre[i] + size[i])``.
        size: [N] nodes in each subtree (itself included).
    """
    n = len(parents)
    if n and parents[0] == -1 and (parents[1:] == 0).all():
        # A star (one root, every other node its child; a decode step's or a search level's
        # tree): preorder is the id order.
        size = np.ones(n, dtype=np.int64)
        size[0] = n
        return np.arange(n, dtype=np.int64), size
    return _preorder_by_walk(parents) if n <= WALK_NODES else _preorder_by_jumping(parents)


def _preorder_by_walk(parents: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`preorder` by two passes over the nodes: a Python loop, cheap per node against a
    pointer-jumping round's numpy calls, so it wins on trees of up to a few hundred nodes."""
    par = parents.tolist()
    size = [1] * len(par)
    for i in range(len(par) - 1, 0, -1):  # children come after their parent: sizes bottom up
        if par[i] >= 0:
            size[par[i]] += size[i]
    pre = [0] * len(par)
    free = [0] * len(par)  # next free position inside each node's subtree
    roots = 0
    for i, p in enumerate(par):  # children by id, each after its earlier siblings' subtrees
        if p < 0:
            pre[i], roots = roots, roots + size[i]
        else:
            pre[i] = free[p]
            free[p] += size[i]
        free[i] = pre[i] + 1
    return np.array(pre, dtype=np.int64), np.array(size, dtype=np.int64)


def _preorder_by_jumping(parents: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`preorder` by pointer jumping: rounds of whole-array operations, for large trees."""
    n = len(parents)
    size = subtree_sums(parents, np.ones(n, dtype=np.int64))
    # Siblings grouped by parent, ids ascending inside a group (stable sort keeps id order).
    order = np.argsort(parents, kind="stable")
    sizes = size[order]
    before = np.cumsum(sizes) - sizes  # exclusive running total over the sorted list
    group_start = np.ones(n, dtype=bool)
    group_start[1:] = parents[order][1:] != parents[order][:-1]
    first = np.maximum.accumulate(np.where(group_start, np.arange(n), 0))
    earlier = np.empty(n, dtype=np.int64)
    earlier[order] = before - before[first]  # sizes of the earlier siblings
    # pre(i) = pre(parent) + 1 + earlier siblings' sizes, i.e. a path sum of (1 + earlier) minus 1.
    pre = path_sums(parents, 1 + earlier) - 1
    return pre, size


def concat_ranges(starts: np.ndarray | int, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + l)`` for each (s, l), without a Python loop (``starts``
    may be one number for all)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    ends = lengths.cumsum()
    total = int(ends[-1]) if len(ends) else 0
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    shift = (np.asarray(starts, dtype=np.int64) - (ends - lengths)).repeat(lengths)
    shift += np.arange(total, dtype=np.int64)
    return shift
