"""Work items for a run of decode steps whose tree grows only at its tails.

While a batch of branches is decoded, every step adds one token to each branch's own tail and
changes nothing else. So the work splits in two: the shared part (each branch's parent path:
the tree's KV chunks grouped with the queries below them, or each query's whole path for the
per-sequence baseline) is planned once, and each tail is read by its own query through a fixed
window of slots that grows by one entry per step: by the query's merge program when the window
holds at most ``WorkConfig.fold_tail`` keys, else by tail items of at most TAIL_PIECE tokens. A
step then updates only the tails' lengths and newest slots, which fit in a few fixed-size device
buffers (and so in a CUDA graph). Several queries may read one window, each its own prefix of
it: a branch's newest token and the draft tokens after it, verified in one step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .tree_plan import TreePlan
from .sequence_work import sequence_host_work
from .tree_work import tree_host_work
from .work_config import WorkConfig
from .workplan import OWN_PIECE, HostWork, item_rows, layout

TAIL_PIECE = OWN_PIECE  # most tail tokens one program reads


@dataclass(frozen=True, eq=False)
class DecodeWork:
    """Host arrays (int64) of a decode run's work.

    host: shared items and tail items together, ordered by tile class, with merge lists; its
        slot array ends with one window of ``tail_cap`` slots per tail; when ``folded``, its own
        range 1 is each query's tail window.
    tail_items: [n] index in ``host.items`` of each tail piece; tail_rows [n] its query;
        tail_starts [n] the first tail token it covers (a piece reads at most TAIL_PIECE);
        empty when ``folded``.
    tail_base: [Q] index in ``host.slots`` of each query's tail window (queries that share a
        window share its index).
    """

    host: HostWork
    tail_items: np.ndarray
    tail_rows: np.ndarray
    tail_starts: np.ndarray
    tail_base: np.ndarray
    tail_cap: int
    folded: bool


def decode_work(
    plan: TreePlan,
    tails: Sequence[np.ndarray],
    tail_cap: int,
    num_q_heads: int,
    num_kv_heads: int,
    head_dim: int,
    cfg: WorkConfig,
    *,
    share: bool = True,
    windows: Sequence[int] | None = None,
    lengths: Sequence[int] | None = None,
) -> DecodeWork:
    """Plan decode steps for the queries of ``plan``, each extended by a growing tail.

    Args:
        plan: the shared tree; query r sits on the parent node of its tail and sees it.
        tails: the slots of each tail window so far (empty before the run's first step, whose
            query is the parent's last token); one per query unless ``windows`` says otherwise.
        tail_cap: the longest a tail may grow in this run (its window size).
        share: DeFT grouping of the shared part (True) or per-sequence paths (False).
        windows: [Q] the tail window each query reads (default: query r reads ``tails[r]``);
            queries of one window may see different prefixes of it (a branch's draft tokens,
            each seeing the tokens before it).
        lengths: [Q] how many tokens of its window each query sees now (default: all of them).
    """
    q = plan.num_queries
    window_of = np.arange(q) if windows is None else np.asarray(windows, dtype=np.int64)
    if len(window_of) != q or (q and (window_of.min() < 0 or window_of.max() >= len(tails))):
        raise ValueError(f"need a tail window for each of the {q} queries: {len(tails)} tails, windows {windows!r}")
    sizes = np.fromiter((len(t) for t in tails), dtype=np.int64, count=len(tails))
    if len(sizes) and sizes.max() > tail_cap:
        raise ValueError(f"tails must hold at most tail_cap={tail_cap} slots, got {sizes.max()}")
    seen = sizes[window_of] if lengths is None else np.asarray(lengths, dtype=np.int64)
    if len(seen) != q or (q and (seen.min() < 0 or (seen > sizes[window_of]).any())):
        raise ValueError("each query sees at most the tokens its tail window holds")
    build = tree_host_work if share else sequence_host_work
    shared = build(plan, num_q_heads, num_kv_heads, head_dim, cfg)
    base = len(shared.slots)
    window = np.zeros((len(tails), tail_cap), dtype=np.int64)
    for r, t in enumerate(tails):
        window[r, : len(t)] = t
    folded = tail_cap <= cfg.fold_tail
    pieces = 0 if folded else -(-tail_cap // TAIL_PIECE)
    rows = np.arange(q).repeat(pieces)
    starts = np.tile(np.arange(pieces) * TAIL_PIECE, q)
    inv_perm = np.empty(q, dtype=np.int64)
    inv_perm[shared.q_perm] = np.arange(q)
    # Node -1: the window already ends at the newest token, so no own-node masking.
    tail = item_rows(
        len(rows),
        base + window_of[rows] * tail_cap + starts,
        np.clip(seen[rows] - starts, 0, TAIL_PIECE),
        0,
        -1,
        inv_perm[rows],
        1,
    )
    n_shared = len(shared.items)
    tail_base = base + window_of * tail_cap
    own_start, own_len = shared.own_start.copy(), shared.own_len.copy()
    if folded:
        own_start[1], own_len[1] = tail_base, seen
    host = layout(
        q,
        np.concatenate([shared.slots, window.reshape(-1)]),
        np.concatenate([shared.items, tail]),
        np.concatenate([shared.item_class, np.zeros(len(rows), dtype=np.int64)]),
        list(shared.shapes),
        shared.q_perm,
        shared.q_node,
        shared.q_vis,
        own_start,
        own_len,
    )
    # Where each tail piece landed after layout's stable sort by class.
    order = np.argsort(np.concatenate([shared.item_class, np.zeros(len(rows), dtype=np.int64)]), kind="stable")
    position = np.empty_like(order)
    position[order] = np.arange(len(order))
    return DecodeWork(
        host=host,
        tail_items=position[n_shared:],
        tail_rows=rows,
        tail_starts=starts,
        tail_base=tail_base,
        tail_cap=tail_cap,
        folded=folded,
    )
