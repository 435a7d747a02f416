"""The plan of one tree-attention call: which query rows see which KV slots.

A plan is built once per decode step on the host and reused by every layer (plan once, run per
layer). It holds the tree in flat arrays; backends derive their own launch metadata from it and
cache it, with their workspaces, in ``backend_data``. Building it is vectorised numpy (pointer
jumping over the parent array), so it costs well under a millisecond for hundreds of nodes and
tens of thousands of tokens.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Sequence, Union

import numpy as np
import torch

from .topology import concat_ranges, path_sums, preorder

IntArrayLike = Union[Sequence[int], np.ndarray, torch.Tensor]


@dataclass(frozen=True, eq=False)
class TreePlan:
    """A validated tree of KV segments plus the query rows that attend over it.

    Attributes (host arrays are numpy int64, device tensors live on ``device``):
        parents:        [N] parent node of each node, -1 for a root; parents come first.
        node_offsets:   [N + 1] node i's slots are ``slots[node_offsets[i]:node_offsets[i + 1]]``.
        slots:          [S] KV slot ids (page * page_size + offset), node by node.
        query_nodes:    [Q] node of each query row.
        query_visible:  [Q] how many of its own node's tokens each query sees.
        page_size:      tokens per page of the KV pool.
        device:         where the attention runs.
        backend_data:   per-backend cache of launch metadata and workspaces.
    """

    parents: np.ndarray
    node_offsets: np.ndarray
    slots: np.ndarray
    query_nodes: np.ndarray
    query_visible: np.ndarray
    page_size: int
    device: torch.device
    backend_data: dict[Any, Any] = field(default_factory=dict, repr=False)

    @property
    def num_nodes(self) -> int:
        return len(self.parents)

    @property
    def num_queries(self) -> int:
        return len(self.query_nodes)

    def check_inputs(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
        """Raise ValueError unless q [num_queries, H_q, D] and k_cache, v_cache [num_pages,
        page_size, H_kv, D] fit this plan and each other (H_q a multiple of H_kv)."""
        if q.dim() != 3 or k_cache.dim() != 4 or k_cache.shape != v_cache.shape:
            raise ValueError(
                "expected q [Q, H_q, D] and k_cache, v_cache [num_pages, page_size, H_kv, D]; "
                f"got q {tuple(q.shape)}, k {tuple(k_cache.shape)}, v {tuple(v_cache.shape)}"
            )
        if q.shape[0] != self.num_queries:
            raise ValueError(f"q has {q.shape[0]} rows but the plan has {self.num_queries} queries")
        if k_cache.shape[1] != self.page_size:
            raise ValueError(f"cache page size {k_cache.shape[1]} differs from the plan's {self.page_size}")
        if k_cache.shape[2] == 0 or q.shape[2] != k_cache.shape[3] or q.shape[1] % k_cache.shape[2]:
            raise ValueError(
                f"q heads {q.shape[1]} must be a multiple of KV heads {k_cache.shape[2]} with equal head dims "
                f"({q.shape[2]} vs {k_cache.shape[3]})"
            )

    @cached_property
    def node_lengths(self) -> np.ndarray:
        return self.node_offsets[1:] - self.node_offsets[:-1]

    @cached_property
    def preorder(self) -> tuple[np.ndarray, np.ndarray]:
        """([N] depth-first position of each node, [N] subtree sizes); see :func:`topology.preorder`."""
        return preorder(self.parents)

    def path_slots(self, nodes: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Each query's visible slots of the nodes in ``nodes`` ([N] bool, None = all), root first.

        Returns CSR ([Q + 1] offsets, [sum] slot ids); a query sees its ancestors' tokens and
        the first ``query_visible`` tokens of its own node.
        """
        qn, n = self.query_nodes, self.num_nodes
        offsets = np.zeros(self.num_queries + 1, dtype=np.int64)
        if nodes is not None and not nodes.any():
            return offsets, np.zeros(0, dtype=np.int64)
        if nodes is not None and not nodes[self.parents[self.parents >= 0]].any():
            # No chosen node has a child (a decode step's one-token leaves): a query's only chosen
            # node on its path is its own.
            counts = np.where(nodes[qn], self.query_visible, 0)
            counts.cumsum(out=offsets[1:])
            return offsets, self.slots[concat_ranges(self.node_offsets[qn], counts)]
        pre, size = self.preorder
        qpre = pre[qn]
        perm = qpre.argsort(kind="stable")
        sorted_pre = qpre[perm]
        # The queries under node i are a contiguous run of the preorder-sorted queries.
        lo = sorted_pre.searchsorted(pre, side="left")
        hi = sorted_pre.searchsorted(pre + size, side="left")
        if nodes is not None:
            hi = np.where(nodes, hi, lo)
        pair_node = np.arange(n).repeat(hi - lo)
        pair_query = perm[concat_ranges(lo, hi - lo)]
        own = pair_node == qn[pair_query]
        pair_len = np.where(own, self.query_visible[pair_query], self.node_lengths[pair_node])
        order = (pair_query * n + pre[pair_node]).argsort()  # by query, root first (an ancestor precedes in preorder)
        pair_node, pair_query, pair_len = pair_node[order], pair_query[order], pair_len[order]
        flat = self.slots[concat_ranges(self.node_offsets[pair_node], pair_len)]
        np.bincount(pair_query, weights=pair_len, minlength=self.num_queries).astype(np.int64).cumsum(out=offsets[1:])
        return offsets, flat

    @cached_property
    def query_views(self) -> tuple[np.ndarray, np.ndarray]:
        """Every query's visible slots, root first, as CSR: ([Q + 1] offsets, [sum] slot ids)."""
        return self.path_slots()

    def visible_slots(self, query: int) -> np.ndarray:
        """Every KV slot query row ``query`` attends to, root first."""
        offsets, flat = self.query_views
        return flat[offsets[query] : offsets[query + 1]]

    @cached_property
    def padded_query_slots(self) -> tuple[torch.Tensor, torch.Tensor]:
        """([Q, L] slot ids padded with 0, [Q, L] bool valid mask) on ``device``; L = longest view."""
        offsets, flat = self.query_views
        counts = np.diff(offsets)
        width = int(counts.max(initial=0))
        valid = np.arange(width)[None, :] < counts[:, None]
        ids = np.zeros((self.num_queries, width), dtype=np.int64)
        ids[valid] = flat  # row-major fill matches the root-first CSR order
        return (torch.from_numpy(ids).to(self.device), torch.from_numpy(valid).to(self.device))


def _int_array(x: IntArrayLike, name: str) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    arr = np.asarray(x)
    if arr.ndim > 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if arr.size and arr.dtype.kind not in "iu":
        raise ValueError(f"{name} must hold integers, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False).reshape(-1)


def _flatten_slots(node_slots: Sequence[IntArrayLike], n: int) -> tuple[np.ndarray, np.ndarray]:
    """([N] lengths, [S] slots) from one slot list, array or tensor per node."""
    if len(node_slots) != n:
        raise ValueError(f"parents has {n} nodes but node_slots has {len(node_slots)}; give one slot list per node")
    if n and isinstance(node_slots[0], np.ndarray):
        # The fast path (the runtime's segments hold 1-D arrays): one concatenation, one dtype
        # check; anything it cannot take whole (another rank, a scalar) goes the general way.
        try:
            flat = np.concatenate(node_slots)
        except (ValueError, TypeError):
            flat = None
        if flat is not None and flat.ndim == 1:
            if flat.size and flat.dtype.kind not in "iu":
                raise ValueError(f"node_slots must hold integers, got dtype {flat.dtype}")
            lengths = np.fromiter(map(len, node_slots), dtype=np.int64, count=n)
            if lengths.sum() == flat.size:
                return lengths, flat.astype(np.int64, copy=False)
    if all(isinstance(s, (list, tuple, range)) for s in node_slots):
        lengths = np.fromiter(map(len, node_slots), dtype=np.int64, count=n)
        # Not np.fromiter(dtype=int64): it truncates a float slot id to an integer without a word.
        return lengths, _int_array(list(itertools.chain.from_iterable(node_slots)), "node_slots")
    parts = [_int_array(s, "node_slots") for s in node_slots]
    lengths = np.fromiter(map(len, parts), dtype=np.int64, count=n)
    flat = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    return lengths, flat.astype(np.int64, copy=False)


def plan_tree_attention(
    parents: IntArrayLike,
    node_slots: Sequence[IntArrayLike],
    query_nodes: IntArrayLike,
    query_visible: IntArrayLike | None = None,
    *,
    page_size: int,
    device: torch.device | str,
) -> TreePlan:
    """Validate a tree of KV segments and the queries over it, and return a :class:`TreePlan`.

    Args:
        parents: [N] one entry per node, -1 for a root; a parent comes before its children.
        node_slots: N slot lists (lists, numpy arrays or CPU tensors), each node's KV slot ids
            in token order (slot = page * page_size + offset, below 2^31: the kernels index int32).
            Arrays are the fast path.
        query_nodes: [Q] the node of each query row.
        query_visible: [Q] how many of its own node's tokens each query sees (None = all); gives
            causal prefill and speculative token trees.
        page_size: tokens per page of the KV cache.
        device: device of the attention call.

    A query attends to every token of every ancestor of its node plus the first
    ``query_visible`` tokens of its own node, and must see at least one token.
    """
    if page_size <= 0:
        raise ValueError(f"page_size must be positive, got {page_size}")
    par = _int_array(parents, "parents")
    n = len(par)
    bad = ((par < -1) | (par >= np.arange(n))).nonzero()[0]
    if len(bad):
        i = int(bad[0])
        raise ValueError(f"node {i} has parent {int(par[i])}; a parent must be -1 or an earlier node (order nodes "
                         "parents first)")
    lengths, slots = _flatten_slots(node_slots, n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    lengths.cumsum(out=offsets[1:])
    if len(slots) and slots.view(np.uint64).max() >= 2**31:  # one pass: a negative id reads as huge
        raise ValueError(
            f"KV slot ids must be in [0, 2^31) (the kernels index int32), got [{slots.min()}, {slots.max()}]"
        )
    qn = _int_array(query_nodes, "query_nodes")
    if len(qn) and (qn.min() < 0 or qn.max() >= n):
        raise ValueError(f"query_nodes must index the {n} nodes; got values in [{qn.min()}, {qn.max()}]")
    if query_visible is None:
        qv = lengths[qn]
    else:
        qv = _int_array(query_visible, "query_visible")
        if len(qv) != len(qn):
            raise ValueError(f"query_visible has {len(qv)} entries for {len(qn)} queries")
        over = ((qv < 0) | (qv > lengths[qn])).nonzero()[0]
        if len(over):
            i = int(over[0])
            raise ValueError(
                f"query {i} sees {int(qv[i])} tokens of node {int(qn[i])}, which has {int(lengths[qn[i]])}"
            )
    # Tokens a query sees: its own visible prefix plus every ancestor's tokens (only summed when
    # some query sees none of its own node).
    empty = np.zeros(0, dtype=np.int64)
    if len(qv) and qv.min() == 0:
        empty = (path_sums(par, lengths)[qn] - lengths[qn] + qv == 0).nonzero()[0]
    if len(empty):
        raise ValueError(f"query {int(empty[0])} would attend to no token; every query must see at least one")
    return TreePlan(
        parents=par,
        node_offsets=offsets,
        slots=slots,
        query_nodes=qn,
        query_visible=qv,
        page_size=int(page_size),
        device=torch.device(device),
    )
