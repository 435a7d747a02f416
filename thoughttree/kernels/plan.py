"""The plan of one tree-attention call: which query rows see which KV slots.

A plan is built once per decode step on the host and reused by every layer (plan once, run per
layer). It holds the tree in flat arrays; backends derive their own launch metadata from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Sequence

import numpy as np
import torch


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
    """

    parents: np.ndarray
    node_offsets: np.ndarray
    slots: np.ndarray
    query_nodes: np.ndarray
    query_visible: np.ndarray
    page_size: int
    device: torch.device
    backend_data: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def num_nodes(self) -> int:
        return len(self.parents)

    @property
    def num_queries(self) -> int:
        return len(self.query_nodes)

    @property
    def node_lengths(self) -> np.ndarray:
        return np.diff(self.node_offsets)

    def node_slots(self, node: int) -> np.ndarray:
        return self.slots[self.node_offsets[node] : self.node_offsets[node + 1]]

    def path(self, node: int) -> list[int]:
        """Nodes from the root down to ``node``."""
        out = []
        while node >= 0:
            out.append(node)
            node = int(self.parents[node])
        return out[::-1]

    def visible_slots(self, query: int) -> np.ndarray:
        """Every KV slot query row ``query`` attends to, root first."""
        node = int(self.query_nodes[query])
        path = self.path(node)
        parts = [self.node_slots(n) for n in path[:-1]]
        parts.append(self.node_slots(node)[: int(self.query_visible[query])])
        return np.concatenate(parts)

    @cached_property
    def padded_query_slots(self) -> tuple[torch.Tensor, torch.Tensor]:
        """([Q, L] slot ids padded with 0, [Q, L] bool valid mask) on ``device``; L = longest view."""
        views = [self.visible_slots(i) for i in range(self.num_queries)]
        width = max((len(v) for v in views), default=0)
        ids = np.zeros((len(views), width), dtype=np.int64)
        valid = np.zeros((len(views), width), dtype=bool)
        for i, v in enumerate(views):
            ids[i, : len(v)] = v
            valid[i, : len(v)] = True
        return (torch.from_numpy(ids).to(self.device), torch.from_numpy(valid).to(self.device))


def plan_tree_attention(
    parents: Sequence[int],
    node_slots: Sequence[Sequence[int]],
    query_nodes: Sequence[int],
    query_visible: Sequence[int] | None = None,
    *,
    page_size: int,
    device: torch.device | str,
) -> TreePlan:
    """Validate a tree of KV segments and the queries over it, and return a :class:`TreePlan`.

    Args:
        parents: one entry per node, -1 for a root; a parent comes before its children.
        node_slots: KV slot ids of each node's tokens, in order (slot = page * page_size + offset).
        query_nodes: the node of each query row.
        query_visible: how many of its own node's tokens each query sees (None = all); gives
            causal prefill and speculative token trees.
        page_size: tokens per page of the KV cache.
        device: device of the attention call.

    A query attends to every token of every ancestor of its node plus the first
    ``query_visible`` tokens of its own node, and must see at least one token.
    """
    if page_size <= 0:
        raise ValueError(f"page_size must be positive, got {page_size}")
    par = np.asarray(parents, dtype=np.int64).reshape(-1)
    n = len(par)
    if len(node_slots) != n:
        raise ValueError(f"parents has {n} nodes but node_slots has {len(node_slots)}; give one slot list per node")
    idx = np.arange(n)
    bad = np.nonzero((par < -1) | (par >= idx))[0]
    if len(bad):
        i = int(bad[0])
        raise ValueError(f"node {i} has parent {int(par[i])}; a parent must be -1 or an earlier node (order nodes parents first)")
    lengths = np.fromiter((len(s) for s in node_slots), dtype=np.int64, count=n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    slots = np.fromiter((s for seg in node_slots for s in seg), dtype=np.int64, count=int(offsets[-1]))
    if len(slots) and slots.min() < 0:
        raise ValueError("KV slot ids must be non-negative")
    qn = np.asarray(query_nodes, dtype=np.int64).reshape(-1)
    if len(qn) and (qn.min() < 0 or qn.max() >= n):
        raise ValueError(f"query_nodes must index the {n} nodes; got values in [{qn.min()}, {qn.max()}]")
    if query_visible is None:
        qv = lengths[qn]
    else:
        qv = np.asarray(query_visible, dtype=np.int64).reshape(-1)
        if len(qv) != len(qn):
            raise ValueError(f"query_visible has {len(qv)} entries for {len(qn)} queries")
        over = np.nonzero((qv < 0) | (qv > lengths[qn]))[0]
        if len(over):
            i = int(over[0])
            raise ValueError(
                f"query {i} sees {int(qv[i])} tokens of node {int(qn[i])}, which has {int(lengths[qn[i]])}"
            )
    # Tokens a query sees: its own visible prefix plus every ancestor's tokens.
    depth_tokens = lengths.copy()
    for i in range(n):
        if par[i] >= 0:
            depth_tokens[i] += depth_tokens[par[i]]
    seen = depth_tokens[qn] - lengths[qn] + qv
    empty = np.nonzero(seen == 0)[0]
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
