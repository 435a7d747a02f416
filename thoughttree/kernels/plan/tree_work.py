"""The tree (DeFT) planner: work items over a shared tree, KV-guided.

The tree is laid out in depth-first order, so the queries under any node are one contiguous run
of the reordered queries; each node's KV is cut into chunks of balanced cost and every chunk is
paired with the blocks of queries below it (KV-guided grouping). Short nodes are read by each
query below them instead, by its merge program where they are short enough. Vectorised numpy;
how big each launch's chunks are is :mod:`sizing`'s part.
"""

from __future__ import annotations

import numpy as np

from .sizing import chunk_sizes, class_model, fewer_launches, round_chunks, tile_cost, wide_split
from .tiles import shape_arrays, work_limits
from .topology import concat_ranges
from .tree_plan import TreePlan
from .work_config import WorkConfig
from .workplan import ITEM_FIELDS, OWN_PIECE, OWN_RANGES, HostWork, WorkPlan, item_rows, layout, upload


def _short_launches(
    plan: TreePlan,
    small: np.ndarray,
    chain_of: np.ndarray,
    nodes: np.ndarray,
    cls: np.ndarray,
    lengths: np.ndarray,
    queries: np.ndarray,
    per_block: np.ndarray,
    shares_sms: np.ndarray,
    cfg: WorkConfig,
) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]] | None:
    """([N] bool over the shared nodes: those of the launches better read by each query's merge,
    the queries' paths through the nodes then read by the merges as ``plan.path_slots`` gives
    them), or None where no launch is folded.

    A launch of short nodes beside another one costs its start-up and its partials' round trip,
    and keeps the merge from starting while the partials run (it starts early behind one launch
    only). So every launch but the one with the most work whose nodes are all at most
    ``fold_own`` keys is folded into the merges of the queries below its nodes, where each
    query's own keys stay within ``fold_own`` and the folded nodes' reads (keys times queries)
    are at most the other launches' (keys times query blocks). Not beside a launch whose
    programs each take an SM (the 128-row tiles): there a narrow launch runs in the slot left
    next to each of them. Search steps (a prompt's children, a few branches each) measured
    faster folded, and slower beside a long prompt's 128-row launch (docs/perf-log/,
    tree-decode). A launch keeps its items if one of its nodes has own queries that see a
    causal prefix of it (a prefill's: the rule was measured on decode steps), or, without
    ``fold_unshared``, if only one query sees one of its nodes.

    small: [nodes of the plan] bool, the nodes already read by the merges; chain_of: [nodes of
    the plan] the chain (:func:`_chains`) of each shared node; nodes, cls, lengths, queries: [N]
    per chain; per_block, shares_sms: [K] queries per tile and whether an SM holds several
    programs, per class.
    """
    long = lengths > cfg.fold_own
    if long.all() or (cls == cls[0]).all():  # no short node, or one launch
        return None
    k = len(per_block)
    counts = np.bincount(cls, minlength=k)
    short = (counts > 0) & (np.bincount(cls, weights=long, minlength=k) == 0)
    if not short.any():
        return None
    reads = lengths * -(-queries // per_block[cls])
    keep = np.bincount(cls, weights=reads, minlength=k).argmax()
    short[keep] = False
    if not shares_sms[keep] or not short.any():
        return None
    qn, qv = plan.query_nodes, plan.query_visible
    causal = np.zeros(plan.num_nodes, dtype=bool)
    causal[qn[qv < plan.node_lengths[qn]]] = True
    pinned = causal[nodes] | ((queries == 1) & (not cfg.fold_unshared))
    short &= np.bincount(cls, weights=pinned, minlength=k) == 0
    fold = short[cls]
    if not fold.any() or (lengths * queries)[fold].sum() > reads[~fold].sum():
        return None
    trial = small | _members(chain_of, nodes[fold])
    paths = plan.path_slots(trial)
    offsets = paths[0]
    return None if (offsets[1:] - offsets[:-1]).max() > cfg.fold_own else (fold, paths)


def _chains(plan: TreePlan, nodes: np.ndarray, queries: np.ndarray, join: bool) -> tuple[np.ndarray, ...]:
    """The nodes ``nodes`` ([N'] ascending, each with queries below it) gathered into chains
    read as one node, whatever each node's length.

    A node joins its parent's chain where the parent is one of ``nodes`` too, the same queries are below
    both (so the parent has none of its own and no other child with queries), and its slots
    follow the parent's in the plan. A chain is named by its deepest node, the only one that
    may have queries of its own. ``queries``: [N] queries below each node of the plan;
    ``join``: False leaves every node a chain of its own.

    Returns (ends [C] the chains' deepest nodes, ascending; lengths [C] their keys; above [C]
    the keys of a chain above its deepest node; first [C] the chain's first slot in
    ``plan.slots``; chain_of [N] the chain end of each of ``nodes``, -1 for the plan's other nodes).
    """
    chain_of = np.full(plan.num_nodes, -1, dtype=np.int64)
    off, lengths = plan.node_offsets, plan.node_lengths
    if join and len(nodes) > 1:
        parent = np.maximum(plan.parents[nodes], 0)
        shared = np.zeros(plan.num_nodes, dtype=bool)
        shared[nodes] = True
        joins = (plan.parents[nodes] >= 0) & shared[parent] & (queries[parent] == queries[nodes])
        joins &= off[parent] + lengths[parent] == off[nodes]
        if joins.any():
            head = np.arange(plan.num_nodes)
            head[nodes[joins]] = parent[joins]
            while True:  # pointer jumping: every node to the head of its chain
                higher = head[head]
                if (higher == head).all():
                    break
                head = higher
            has_child = np.zeros(plan.num_nodes, dtype=bool)
            has_child[parent[joins]] = True
            ends = nodes[~has_child[nodes]]
            chain_of[head[ends]] = ends
            chain_of[nodes] = chain_of[head[nodes]]
            first = off[head[ends]]
            return ends, off[ends] + lengths[ends] - first, off[ends] - first, first, chain_of
    chain_of[nodes] = nodes
    return nodes, lengths[nodes], np.zeros(len(nodes), dtype=np.int64), off[nodes], chain_of


def _members(chain_of: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """[N] bool: the nodes whose chain (``chain_of``, -1 for none) is one of ``ends``."""
    chosen = np.zeros(len(chain_of) + 1, dtype=bool)  # the last entry stands for -1
    chosen[ends] = True
    return chosen[chain_of]


def tree_host_work(plan: TreePlan, num_q_heads: int, num_kv_heads: int, head_dim: int, cfg: WorkConfig) -> HostWork:
    """DeFT work items: each node's KV in balanced chunks, each chunk with the queries below it."""
    group = num_q_heads // num_kv_heads
    shapes, bm_of, bn_of = shape_arrays(group, head_dim, cfg.max_block_m, cfg.tiles)
    pre, size = plan.preorder
    lengths, qn, qv = plan.node_lengths, plan.query_nodes, plan.query_visible
    big = int(lengths.max(initial=0)) + 1
    # Queries sorted by (preorder of their node, visible count): a node's subtree is one run and
    # its own queries come first, fewest visible tokens first (so causal chunks skip a prefix).
    key = pre[qn] * big + qv
    q_perm = key.argsort(kind="stable")
    skey = key[q_perm]
    lo = skey.searchsorted(pre * big, side="left")
    hi = skey.searchsorted((pre + size) * big, side="left")
    below = hi - lo  # [N] queries below each node
    # From here on a node is a chain of nodes, named by its deepest one (see _chains). A chain
    # shorter than small_node (or, with fold_unshared, one query's of at most fold_own keys) is
    # read by each query below it: its nodes are the small ones.
    nodes, n_len, above, first, chain_of = _chains(plan, ((below > 0) & (lengths > 0)).nonzero()[0], below, cfg.chains)
    n_queries = below[nodes]
    short = n_len < cfg.small_node
    if cfg.fold_unshared:
        short |= (n_queries == 1) & (n_len <= cfg.fold_own)
    small = _members(chain_of, nodes[short])
    nodes, n_len, above, first, n_queries = (a[~short] for a in (nodes, n_len, above, first, n_queries))
    rows = n_queries * group
    cls = np.minimum(bm_of.searchsorted(rows, side="left"), len(shapes) - 1)
    narrow = int(bm_of.searchsorted(64, side="right")) - 1  # the largest class of at most 64 rows
    if narrow >= 0:
        wide = (rows >= cfg.wide_tiles[0]) & (n_len >= cfg.wide_tiles[1])
        cls = np.where(wide, cls, np.minimum(cls, narrow))
    fewest = np.maximum(bn_of, 4 * bm_of if cfg.min_chunk is None else cfg.min_chunk)  # keys per chunk, per class
    limits = work_limits(cfg.num_sms, plan.device)
    model = class_model(tuple(shapes), head_dim, limits)
    if cfg.waves is None:
        cls = fewer_launches(cls, n_queries, n_len, bm_of // group, fewest, model.slots, num_kv_heads)
    own_paths = None  # each query's path through the nodes its merge reads, when already walked
    if cfg.fold_launches:
        folded = _short_launches(
            plan, small, chain_of, nodes, cls, n_len, n_queries, bm_of // group, model.slots > model.sms, cfg
        )
        if folded is not None:
            fold, own_paths = folded
            small |= _members(chain_of, nodes[fold])
            nodes, n_len, n_queries, cls, above, first = (
                a[~fold] for a in (nodes, n_len, n_queries, cls, above, first)
            )
    per_block = bm_of[cls] // group  # queries per tile
    blocks = -(-n_queries // per_block)
    cost = tile_cost(bm_of[cls])
    work = n_len * blocks * cost
    chunk_args = (cost, fewest[cls], bn_of[cls])
    launch_order = None
    if cfg.waves is None:
        chunk, launch_ns = round_chunks(cls, work, n_len, blocks, chunk_args, model, num_kv_heads, cfg.rounds)
        nchunks = -(-n_len // chunk)
        wide = wide_split(cls, n_len * blocks, nchunks * blocks, model, num_kv_heads, cfg.wide_sms)
        if wide is not None:  # one round on the SMs it is given
            w, sms = wide
            mine = cls == w
            w_cost, w_fewest, w_align = (a[mine] for a in chunk_args)
            chunk[mine] = chunk_sizes(
                w_cost, w_fewest, n_len[mine], work[mine].sum() * num_kv_heads / sms, w_align, np.floor
            )
            nchunks = -(-n_len // chunk)
        # The longest launch first: the programs of the others fill the SMs it leaves or frees.
        # But a launch of more programs than the GPU holds at once goes last: launched first, its
        # waiting programs take every slot that frees, and the other launch's programs start only
        # as it drains. Both orders were measured on prompt-and-leaves trees (docs/perf-log/).
        programs = np.bincount(cls, weights=nchunks * blocks, minlength=len(shapes)) * num_kv_heads
        keys: tuple[np.ndarray, ...] = (-launch_ns, programs > model.slots)
        if wide is not None:  # a split's wide launch before the rest
            keys += (np.arange(len(shapes)) != wide[0],)
        launch_order = tuple(np.lexsort(keys).tolist())
    else:
        target = float(work.sum()) * num_kv_heads / (cfg.waves * limits[0])
        chunk = chunk_sizes(chunk_args[0], chunk_args[1], n_len, target, chunk_args[2])
        nchunks = -(-n_len // chunk)
    # One row per chunk: keys [c0, c1) of its chain, whose deepest node starts at the chain's key
    # c_above; t0 is the chunk's start in that node's keys (negative: the chain above it).
    c_node = nodes.repeat(nchunks)
    c_idx = concat_ranges(0, nchunks)
    c_size, c_cls, c_per, c_len, c_above = (a.repeat(nchunks) for a in (chunk, cls, per_block, n_len, above))
    c0 = c_idx * c_size
    c1 = np.minimum(c0 + c_size, c_len)
    t0 = c0 - c_above
    # Skip the node's own queries that see no key past t0 (the queries below a node start at lo).
    q_first = np.maximum(skey.searchsorted(pre[c_node] * big + t0, side="right"), lo[c_node])
    q_end = hi[c_node]
    c_blocks = -(-(q_end - q_first) // c_per)
    # One row per item: a chunk times a block of the queries below it.
    i_chunk = np.arange(len(c_node)).repeat(c_blocks)
    i_block = concat_ranges(0, c_blocks)
    i_qstart = q_first[i_chunk] + i_block * c_per[i_chunk]
    i_count = np.minimum(c_per[i_chunk], q_end[i_chunk] - i_qstart)
    i_t0, i_node = t0[i_chunk], c_node[i_chunk]
    # Keys the item's queries see: the whole chunk, unless they are all the node's own (those
    # come first) and see a causal prefix of it, the longest ending at the block's last query.
    # The kernels size their loops by this column, so their first K/V loads wait for no query.
    q_node, q_vis = qn[q_perm], qv[q_perm]
    last = i_qstart + i_count - 1
    i_len = (c1 - c0)[i_chunk]
    i_len = np.where(q_node[last] == i_node, np.minimum(q_vis[last] - i_t0, i_len), i_len)
    items = item_rows(len(i_chunk), (first.repeat(nchunks) + c0)[i_chunk], i_len, i_t0, i_node, i_qstart, i_count)
    own_slots, own_items, own_start, fold_len = _own_work(plan, small, q_perm, cfg, own_paths)
    return layout(
        plan.num_queries,
        np.concatenate([plan.slots, own_slots]),
        np.concatenate([items, own_items]),
        np.concatenate([c_cls[i_chunk], np.zeros(len(own_items), dtype=np.int64)]),
        shapes,
        q_perm,
        q_node,
        q_vis,
        own_start,
        fold_len,
        launch_order,
    )


def _own_work(
    plan: TreePlan,
    small: np.ndarray,
    q_perm: np.ndarray,
    cfg: WorkConfig,
    paths: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, ...]:
    """Per query, the short nodes on its path, read by that query alone: by its merge program
    when they are at most ``cfg.fold_own`` keys, else by items of at most OWN_PIECE keys (a chain
    of many short nodes is split so one program never walks the whole chain). ``paths``:
    ``plan.path_slots(small)`` when the caller has it.

    Returns (slots [S'] to append to the plan's, items [I', 7], own_start and own_len
    [OWN_RANGES, Q]: range 0 filled, in the appended slots' numbering).
    """
    q = plan.num_queries
    own_start = np.zeros((OWN_RANGES, q), dtype=np.int64)
    fold_len = np.zeros_like(own_start)
    if not small.any():
        return np.zeros(0, dtype=np.int64), np.zeros((0, ITEM_FIELDS), dtype=np.int64), own_start, fold_len
    own_offsets, own_slots = plan.path_slots(small) if paths is None else paths
    own_len = own_offsets[1:] - own_offsets[:-1]
    folded = own_len <= cfg.fold_own
    own_start[0] = len(plan.slots) + own_offsets[:-1]
    fold_len[0] = np.where(folded, own_len, 0)
    if folded.all():  # every query's merge reads its short nodes: no items
        return own_slots, np.zeros((0, ITEM_FIELDS), dtype=np.int64), own_start, fold_len
    own_len = np.where(folded, 0, own_len)
    pieces = -(-own_len // OWN_PIECE)
    who = np.arange(q).repeat(pieces)
    start = concat_ranges(0, pieces) * OWN_PIECE
    inv_perm = np.empty_like(q_perm)
    inv_perm[q_perm] = np.arange(len(q_perm))
    # No own-node masking (node -1): the path list already stops at query_visible.
    items = item_rows(
        len(who),
        len(plan.slots) + own_offsets[who] + start,
        np.minimum(OWN_PIECE, own_len[who] - start),
        0,
        -1,
        inv_perm[who],
        1,
    )
    return own_slots, items, own_start, fold_len


def tree_work(plan: TreePlan, num_q_heads: int, num_kv_heads: int, head_dim: int, cfg: WorkConfig) -> WorkPlan:
    """:func:`tree_host_work`, uploaded to the plan's device with its workspaces."""
    host = tree_host_work(plan, num_q_heads, num_kv_heads, head_dim, cfg)
    return upload(host, plan.device, num_q_heads, head_dim, cfg)
