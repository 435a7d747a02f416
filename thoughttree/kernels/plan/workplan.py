"""Launch metadata for the split-KV attention kernels: work items, merge lists, workspaces.

A work item is one program's job for every KV head: a contiguous run of a node's KV slots (a
chunk) and a block of query rows that all see it. The tree (DeFT) planner lays the tree out in
depth-first order, so the queries under any node are one contiguous run of the reordered
queries; each node's KV is cut into chunks of balanced cost and every chunk is paired with the
blocks of queries below it (KV-guided grouping). The per-sequence planner gives each query its
own path and splits it (flash decoding), sharing nothing. Both are vectorised numpy. How big
each launch's chunks are is :mod:`sizing`'s part.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .tree_plan import TreePlan
from .sizing import chunk_sizes, class_model, fewer_launches, round_chunks, tile_cost, wide_split
from .tiles import TileConfig, sequence_tiles, shape_arrays, tile_shapes, work_limits
from .topology import concat_ranges

# Item columns (int32): slot offset, keys its queries see (the chunk's length, or the longest
# causal prefix of it when all are the node's own queries), first token inside the node, node id
# (-1: no own-node queries), first reordered query, query count, first partial row.
ITEM_FIELDS = 7
OWN_PIECE = 512  # most tokens of a query's unshared short nodes one program reads
# Own ranges per query, read by the merge program itself: 0, the short nodes on its path;
# 1, its decode tail (see decode_work).
OWN_RANGES = 2  # a power of two: the merge loads a query's ranges as one vector
# Keys per step when the merge reads a query's own keys: 16 (the least a tensor-core tile takes)
# when every own range of the plan fits in it, else 32.
OWN_BLOCKS = (16, 32)


@dataclass(frozen=True)
class WorkConfig:
    """How work is sized.

    waves: programs per SM to size chunks for, over all classes; None (the default) sizes each
    tile class on its own by :func:`sizing.round_chunks`, trying half a round of resident programs and
    each of ``rounds``: how many rounds its launch may take. num_sms: None = the device's; min_chunk: fewest KV
    tokens per chunk, None = four times the tile's rows (so a chunk's fp32 partials stay small
    next to its KV); max_block_m: cap on a tile's query rows (16, 64 or 128), None = the largest that fits;
    small_node: nodes shorter than this (chains of them, where ``chains``) are not shared: each
    query reads their tokens itself, together with its other short nodes (a speculative token
    tree's one-token nodes would otherwise each cost every query below them a partial output
    that is bigger than the node). A short node in a longer chain is read with the chain.
    fold_own: a query's own keys (its short nodes) up to this many are read by its merge program
    instead of by partial items: one launch and one partial round trip fewer per call. 0 never
    folds.
    fold_tail: the same for a decode run's tails (:mod:`decode_work`), by the most a tail may grow
    in the run. The merge reads a tail while the partial launch runs, so it folds longer ranges
    than ``fold_own``: runs of a few hundred tokens per branch measured faster with their tails
    read by the merge than as tail items wherever many branches shared a long prompt, and runs of
    1024 tokens slower (docs/perf-log/, tree-decode). 0 never folds.
    fold_unshared: a node (chain) that only one query sees, and of at most ``fold_own`` keys, counts as
    short too (a leaf of one branch gains nothing from a partial item of its own).
    fold_launches: a launch of short shared nodes beside another launch (not one of an SM per
    program) is read by the merges instead, where that keeps each query's own keys within
    ``fold_own`` and adds at most the other launches' reads (:func:`_short_launches`); not for
    nodes whose own queries see a causal prefix of them (a prefill's).
    own_block: keys per step when the merge reads a query's own keys (one of OWN_BLOCKS; a
    program over several KV heads divides them among its heads); None
    (the default) takes the small block when every own range of the plan fits in it. Decode
    graphs, whose tails grow from step to step, always take the large one.
    wide_tiles: (query rows, keys) a node needs for tiles of more than 64 rows; smaller nodes
    use 64-row tiles, whose four warps leave room for more resident programs. Measured with
    launches sized by rounds: 128-row tiles win from 128 rows and 4096 keys (each node's keys
    read by half as many blocks), and lose on short nodes (too few programs).
    chains: a path of nodes that the same queries see (each the only child of the one above it
    with queries below it, its slots stored right after that one's) is chunked as one node,
    however short its nodes, so how a prompt is cut into nodes does not change a call's work: a
    search that expands one node at depth d has such a path from the root. False chunks every
    node alone.
    """

    waves: float | None = None
    rounds: tuple[int, ...] = (1, 2, 3, 4, 6, 8)
    num_sms: int | None = None
    min_chunk: int | None = None
    max_block_m: int | None = None
    small_node: int = 8
    fold_own: int = 128
    fold_tail: int = 512
    fold_unshared: bool = True
    fold_launches: bool = True
    own_block: int | None = None
    wide_tiles: tuple[int, int] = (128, 4096)
    chains: bool = True
    # SMs the class whose programs each take an SM (the 128-row tiles) is sized for where other
    # launches share the call; None: the share :func:`sizing.wide_split` gives it; 0: all of them, as
    # every other class.
    wide_sms: int | None = None
    tiles: tuple[TileConfig, ...] | None = None  # the tile of each class; None: tiles.tile_shapes's defaults
    # Partials the merge takes per step (their ids and log-sum-exps in one load, their outputs
    # all in flight together). 4 measured faster than 1 on nearly every benchmark tree and on
    # decode steps; 16 was slower.
    merge_block: int = 4
    # KV heads per merge program (a power of two; fewer where the model has fewer): None picks
    # per call from its query rows (deft.merge_heads).
    merge_heads: int | None = None
    # Partial launches of different tile classes run side by side on two CUDA streams (they
    # write disjoint partials), so one class's last wave overlaps the next class's programs.
    side_by_side: bool = True
    # On GPUs with programmatic dependent launch (compute capability 9.0 on), the merge is
    # launched while the partial launch before it runs: its programs start as the partials'
    # last wave drains, read their own keys, then wait for the partials. Only where the merge
    # follows one stream's partial launch (one tile class, or ``side_by_side=False``).
    early_merge: bool = True
    # On Hopper GPUs (compute capability 9.x) with head dim 128, the 64- and 128-row tile classes
    # run the warp-specialised kernel of :mod:`deft_ws` (the same partials, bitwise; faster per
    # launch, most with 128 rows). False keeps the Triton tiles everywhere.
    warp_specialized: bool = True

    @property
    def launch(self) -> dict[str, Any]:
        """The settings a launch reads, apart from how work is sized, by :class:`WorkPlan` field
        name (merge_block, merge_heads, side_by_side, early_merge, warp_specialized). Work planned
        under configs that differ only in sizing launches alike."""
        return dict(merge_block=self.merge_block, merge_heads=self.merge_heads, side_by_side=self.side_by_side,
                    early_merge=self.early_merge, warp_specialized=self.warp_specialized)

    def __post_init__(self) -> None:
        if any(x is not None and x <= 0 for x in (self.waves, self.num_sms, self.min_chunk, self.max_block_m,
                                                  *self.rounds)):
            raise ValueError(f"waves, num_sms, min_chunk, max_block_m and rounds must be positive, got {self}")
        if not self.rounds or list(self.rounds) != sorted(set(self.rounds)):
            raise ValueError(f"rounds must be increasing and not empty, got {self.rounds}")
        for tile in self.tiles or ():
            bm, bn = tile.block_m, tile.block_n
            if bm < 16 or bn < 16 or bm & (bm - 1) or bn & (bn - 1) or tile.num_warps < 1 or tile.num_stages < 1:
                raise ValueError(f"{tile} needs power-of-two block sizes >= 16")
        if self.merge_block < 1 or self.merge_block & (self.merge_block - 1):
            raise ValueError(f"merge_block must be a power of two, got {self.merge_block}")
        if self.merge_heads is not None and (self.merge_heads < 1 or self.merge_heads & (self.merge_heads - 1)):
            raise ValueError(f"merge_heads must be a power of two or None, got {self.merge_heads}")
        if self.own_block is not None and self.own_block not in OWN_BLOCKS:
            raise ValueError(f"own_block must be one of {OWN_BLOCKS} or None, got {self.own_block}")
        if min(self.small_node, self.fold_own, self.fold_tail, *self.wide_tiles, self.wide_sms or 0) < 0:
            raise ValueError(f"small_node, fold_own, fold_tail, wide_tiles and wide_sms must be non-negative, got "
                             f"{self}")


@dataclass(frozen=True)
class TileClass:
    """The items ``first_item`` to ``first_item + num_items`` of a work plan, launched together
    with one tile."""

    tile: TileConfig
    first_item: int
    num_items: int


@dataclass(frozen=True, eq=False)
class WorkPlan:
    """Device-side metadata and workspaces of one (plan, head layout); reused by every layer.

    Tensors: slots [S] int32 (the KV slot ids items index into); items [I, 7] int32;
    q_perm, q_node, q_vis [Q] int32 (original row, node and visible count of each reordered
    query); merge_offsets [Q + 1] and merge_rows [P] int32 (each query's partial rows, in order);
    own_start, own_len [OWN_RANGES, Q] int32 views (rows ``own_stride`` apart): the slot-array
    ranges each original query's merge program reads itself (None: the merge reads none);
    partial_o [P, H_q, D] float32 (normalised partial outputs); partial_lse [P, H_q] float32
    (their log2-sum-exp); side_by_side: launch the classes on two streams (WorkConfig's);
    own_block: keys per step of the merge's own-key loop, all its KV heads together (one of
    OWN_BLOCKS); own_longest: the most own keys of any query in one range (what the loop's
    pipeline depth is chosen for); merge_heads, early_merge, warp_specialized: WorkConfig's.
    """

    slots: torch.Tensor
    items: torch.Tensor
    q_perm: torch.Tensor
    q_node: torch.Tensor
    q_vis: torch.Tensor
    merge_offsets: torch.Tensor
    merge_rows: torch.Tensor
    partial_o: torch.Tensor
    partial_lse: torch.Tensor
    classes: tuple[TileClass, ...]
    merge_block: int
    merge_heads: int | None = None
    own_start: torch.Tensor | None = None
    own_len: torch.Tensor | None = None
    own_stride: int = 0
    side_by_side: bool = True
    own_block: int = OWN_BLOCKS[-1]
    own_longest: int = 0
    early_merge: bool = True
    warp_specialized: bool = True


def _short_launches(
    plan: TreePlan, small: np.ndarray, chain_of: np.ndarray, nodes: np.ndarray, cls: np.ndarray, lengths: np.ndarray,
    queries: np.ndarray, per_block: np.ndarray, shares_sms: np.ndarray, cfg: WorkConfig,
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


def item_rows(count: int, *columns: np.ndarray | int) -> np.ndarray:
    """[count, ITEM_FIELDS] items from their leading columns (arrays or one number for all); the
    partial-row column and any left out are 0."""
    items = np.zeros((count, ITEM_FIELDS), dtype=np.int64)
    for i, column in enumerate(columns):
        items[:, i] = column
    return items


@dataclass(frozen=True, eq=False)
class HostWork:
    """Work items and merge lists on the host, before upload (int64 numpy arrays).

    slots [S]; items [I, 7] ordered by tile class with partial rows numbered; item_class [I];
    q_perm, q_node, q_vis [Q]; merge_offsets [Q + 1]; merge_rows [P]; shapes: the tile of
    each class; own_start, own_len [OWN_RANGES, Q]: the slot ranges each original query's merge
    reads itself; launch_order: the classes in the order they are launched.
    """

    slots: np.ndarray
    items: np.ndarray
    item_class: np.ndarray
    q_perm: np.ndarray
    q_node: np.ndarray
    q_vis: np.ndarray
    merge_offsets: np.ndarray
    merge_rows: np.ndarray
    shapes: tuple[TileConfig, ...]
    own_start: np.ndarray
    own_len: np.ndarray
    launch_order: tuple[int, ...]

    @property
    def num_partials(self) -> int:
        return len(self.merge_rows)


def layout(
    num_queries: int,
    slots: np.ndarray,
    items: np.ndarray,
    item_class: np.ndarray,
    shapes: list[TileConfig],
    q_perm: np.ndarray,
    q_node: np.ndarray,
    q_vis: np.ndarray,
    own_start: np.ndarray | None = None,
    own_len: np.ndarray | None = None,
    launch_order: tuple[int, ...] | None = None,
) -> HostWork:
    """Order items by tile class, number their partial rows and build each query's merge list.

    ``own_start``/``own_len`` [OWN_RANGES, Q]: ranges the merge reads itself (default none);
    ``launch_order``: the classes' launch order (default: as in ``shapes``).
    """
    order = item_class.argsort(kind="stable")
    items, item_class = items[order], item_class[order]
    counts = items[:, 5]
    items[:, 6] = counts.cumsum() - counts
    row_query = q_perm[concat_ranges(items[:, 4], counts)]  # original query of each partial row
    merge_rows = row_query.argsort(kind="stable")  # item order inside a query: deterministic
    merge_offsets = np.zeros(num_queries + 1, dtype=np.int64)
    np.bincount(row_query, minlength=num_queries).cumsum(out=merge_offsets[1:])
    none = np.zeros((OWN_RANGES, num_queries), dtype=np.int64)
    return HostWork(slots, items, item_class, q_perm, q_node, q_vis, merge_offsets, merge_rows, tuple(shapes),
                    none if own_start is None else own_start, none if own_len is None else own_len,
                    tuple(range(len(shapes))) if launch_order is None else launch_order)


ALIGN = 4  # int32 entries: each uploaded array starts 16-byte aligned


def aligned_starts(sizes: list[int]) -> list[int]:
    """Offsets (in int32 entries) of arrays of these sizes laid out back to back, each starting
    on a 16-byte boundary, and the total as the last entry.

    Triton specialises a kernel on whether each pointer is 16-byte aligned: views into one
    buffer at arbitrary offsets would compile a new variant whenever a size before them changes.
    """
    return list(itertools.accumulate((-(-n // ALIGN) * ALIGN for n in sizes), initial=0))


def upload_int32(arrays: list[np.ndarray], device: torch.device) -> list[torch.Tensor]:
    """One host-to-device copy for all int32 metadata; returns views of it, each 16-byte aligned.

    The arrays hold ids and counts of a plan whose slot ids :func:`plan_tree_attention` has
    checked to fit int32, and positions in arrays far shorter than 2^31: they are cast without a
    check of their own. On CUDA they are written straight into one pinned host buffer (PyTorch's
    caching host allocator reuses it across steps) and copied without blocking, so the host does
    not wait for the GPU's queued work before it returns.
    """
    sizes = [a.size for a in arrays]
    starts = aligned_starts(sizes)
    if starts[-1] >= 2**31:
        raise ValueError(f"plan metadata of {starts[-1]} entries exceeds int32 indexing; split the step")
    host = torch.empty(starts[-1], dtype=torch.int32, pin_memory=device.type == "cuda")
    flat = host.numpy()
    for a, start, n, end in zip(arrays, starts, sizes, starts[1:]):
        flat[start : start + n] = a.reshape(-1)
        flat[start + n : end] = 0  # the padding up to the next array
    dev = host.to(device, non_blocking=True) if device.type == "cuda" else host.to(device)
    pieces = [n for start, n, end in zip(starts, sizes, starts[1:]) for n in (n, end - start - n)]
    return list(dev.split_with_sizes(pieces)[::2])  # one call for all views: each array, then its padding


def upload(host: HostWork, device: torch.device, num_q_heads: int, head_dim: int, cfg: WorkConfig) -> WorkPlan:
    """Device copy of ``host`` with its partial workspaces, launched as ``cfg`` says (merge block,
    side by side, own-key block, early merge, warp specialisation)."""
    own_max = int(host.own_len.max(initial=0))
    folds = own_max > 0
    arrays = [host.slots, host.items, host.q_perm, host.q_node, host.q_vis, host.merge_offsets, host.merge_rows]
    dev = upload_int32(arrays + ([host.own_start, host.own_len] if folds else []), device)
    dev_slots, dev_items, dev_perm, dev_node, dev_vis, dev_offsets, dev_rows = dev[:7]
    bounds = host.item_class.searchsorted(np.arange(len(host.shapes) + 1)).tolist()  # items come by class
    classes = [
        TileClass(host.shapes[c], bounds[c], bounds[c + 1] - bounds[c])
        for c in host.launch_order
        if bounds[c + 1] > bounds[c]
    ]
    return WorkPlan(
        slots=dev_slots,
        items=dev_items.view(-1, ITEM_FIELDS),
        q_perm=dev_perm,
        q_node=dev_node,
        q_vis=dev_vis,
        merge_offsets=dev_offsets,
        merge_rows=dev_rows,
        partial_o=torch.empty(host.num_partials, num_q_heads, head_dim, dtype=torch.float32, device=device),
        partial_lse=torch.empty(host.num_partials, num_q_heads, dtype=torch.float32, device=device),
        classes=tuple(classes),
        own_start=dev[7] if folds else None,
        own_len=dev[8] if folds else None,
        own_stride=len(host.q_perm),
        own_block=cfg.own_block or (OWN_BLOCKS[0] if own_max <= OWN_BLOCKS[0] else OWN_BLOCKS[-1]),
        own_longest=own_max,
        **cfg.launch,
    )


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
        folded = _short_launches(plan, small, chain_of, nodes, cls, n_len, n_queries, bm_of // group,
                                 model.slots > model.sms, cfg)
        if folded is not None:
            fold, own_paths = folded
            small |= _members(chain_of, nodes[fold])
            nodes, n_len, n_queries, cls, above, first = (a[~fold] for a in (nodes, n_len, n_queries, cls, above,
                                                                             first))
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
            chunk[mine] = chunk_sizes(w_cost, w_fewest, n_len[mine], work[mine].sum() * num_kv_heads / sms, w_align,
                                      np.floor)
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
        shapes, q_perm, q_node, q_vis, own_start, fold_len, launch_order,
    )


def _own_work(
    plan: TreePlan, small: np.ndarray, q_perm: np.ndarray, cfg: WorkConfig,
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
    items = item_rows(len(who), len(plan.slots) + own_offsets[who] + start, np.minimum(OWN_PIECE,
                                                                                       own_len[who] - start), 0, -1,
                                                                                       inv_perm[who], 1)
    return own_slots, items, own_start, fold_len


SEQUENCE_WAVES = 2.0  # the per-sequence baseline's programs per SM when the config leaves it open


def sequence_host_work(plan: TreePlan, num_q_heads: int, num_kv_heads: int, head_dim: int, cfg: WorkConfig) -> HostWork:
    """Per-sequence split-KV items: each query's whole path on its own, cut into equal splits."""
    group = num_q_heads // num_kv_heads
    tile = tile_shapes(group, head_dim, None, cfg.tiles or sequence_tiles(head_dim))[0]
    offsets, flat = plan.query_views
    lengths = offsets[1:] - offsets[:-1]
    nq = plan.num_queries
    bn = tile.block_n
    cost = float(tile_cost(np.array(tile.block_m)))
    waves = SEQUENCE_WAVES if cfg.waves is None else cfg.waves
    target = float(lengths.sum()) * cost * num_kv_heads / (waves * work_limits(cfg.num_sms, plan.device)[0])
    chunk = chunk_sizes(np.full(nq, cost), np.full(nq, max(bn, cfg.min_chunk or bn)), lengths, target, np.full(nq, bn))
    nsplits = -(-lengths // chunk)
    q = np.arange(nq).repeat(nsplits)
    t0 = concat_ranges(0, nsplits) * chunk[q]
    items = item_rows(len(q), offsets[q] + t0, np.minimum(chunk[q], lengths[q] - t0), t0, -1, q, 1)
    ident = np.arange(nq)
    return layout(
        nq,
        flat,
        items,
        np.zeros(len(q), dtype=np.int64),
        [tile],
        ident,
        plan.query_nodes,
        plan.query_visible,
    )


def tree_work(plan: TreePlan, num_q_heads: int, num_kv_heads: int, head_dim: int, cfg: WorkConfig) -> WorkPlan:
    """:func:`tree_host_work`, uploaded to the plan's device with its workspaces."""
    host = tree_host_work(plan, num_q_heads, num_kv_heads, head_dim, cfg)
    return upload(host, plan.device, num_q_heads, head_dim, cfg)


def sequence_work(plan: TreePlan, num_q_heads: int, num_kv_heads: int, head_dim: int, cfg: WorkConfig) -> WorkPlan:
    """:func:`sequence_host_work`, uploaded to the plan's device with its workspaces."""
    host = sequence_host_work(plan, num_q_heads, num_kv_heads, head_dim, cfg)
    return upload(host, plan.device, num_q_heads, head_dim, cfg)
