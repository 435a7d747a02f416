"""Launch metadata for the split-KV attention kernels: work items, merge lists, workspaces.

A work item is one program's job for every KV head: a contiguous run of a node's KV slots (a
chunk) and a block of query rows that all see it. The planners (:mod:`tree_work` for DeFT's
shared tree, :mod:`sequence_work` for the per-sequence baseline) build the items on the host
(:class:`HostWork`); :func:`layout` orders them by tile class and numbers each query's partial
rows, and :func:`upload` copies them to the device with the workspaces their launches write
(:class:`WorkPlan`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import torch

from .tiles import TileConfig
from .topology import concat_ranges
from .work_config import OWN_BLOCKS, WorkConfig

# Item columns (int32): slot offset, keys its queries see (the chunk's length, or the longest
# causal prefix of it when all are the node's own queries), first token inside the node, node id
# (-1: no own-node queries), first reordered query, query count, first partial row.
ITEM_FIELDS = 7
OWN_PIECE = 512  # most tokens of a query's unshared short nodes one program reads
# Own ranges per query, read by the merge program itself: 0, the short nodes on its path;
# 1, its decode tail (see decode_work).
OWN_RANGES = 2  # a power of two: the merge loads a query's ranges as one vector


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
    ordered, ordered_class = items[order], item_class[order]
    counts = ordered[:, 5]
    ordered[:, 6] = counts.cumsum() - counts
    row_query = q_perm[concat_ranges(ordered[:, 4], counts)]  # original query of each partial row
    merge_rows = row_query.argsort(kind="stable")  # item order inside a query: deterministic
    merge_offsets = np.zeros(num_queries + 1, dtype=np.int64)
    np.bincount(row_query, minlength=num_queries).cumsum(out=merge_offsets[1:])
    none = np.zeros((OWN_RANGES, num_queries), dtype=np.int64)
    return HostWork(slots, ordered, ordered_class, q_perm, q_node, q_vis, merge_offsets, merge_rows, tuple(shapes),
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
