"""Baselines for the tree-attention benchmark: SDPA over gathered paths, FlexAttention tree mask."""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from thoughttree.kernels import TreePlan

SDPA_GATHER_LIMIT = 16 * 2**30  # bytes of gathered per-query K/V we allow SDPA to materialise


def sdpa_gathered(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, plan: TreePlan) -> Callable[[], torch.Tensor] | str:
    """Per-query K/V gathered from the pages into a padded batch, then torch SDPA (GQA native).

    Returns the callable, or the reason it was not run.
    """
    num_q, h_q, d = q.shape
    h_kv = k_cache.shape[2]
    ids, valid = plan.padded_query_slots  # [Q, L]
    need = ids.numel() * h_kv * d * k_cache.element_size() * 2
    if need > SDPA_GATHER_LIMIT:
        return f"skipped: gathered K/V {need / 2**30:.0f} GiB"
    mask = None if bool(valid.all()) else valid[:, None, None, :]  # [Q, 1, 1, L]
    flat_k, flat_v = k_cache.view(-1, h_kv, d), v_cache.view(-1, h_kv, d)
    q4 = q[:, :, None, :]  # [Q, H_q, 1, D]

    def run() -> torch.Tensor:
        k = flat_k[ids].transpose(1, 2)  # [Q, H_kv, L, D]
        v = flat_v[ids].transpose(1, 2)
        return F.scaled_dot_product_attention(q4, k, v, attn_mask=mask, enable_gqa=True)[:, :, 0]

    return run


def flex_tree(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, plan: TreePlan, compiled: Callable) -> Callable[[], torch.Tensor] | str:
    """FlexAttention over the tree's unique KV laid out depth-first, with a tree ``mask_mod``.

    The unique KV is gathered into one contiguous sequence once, outside the timed call (Flex
    cannot read our pages directly), so Flex is timed as if the KV were stored that way.
    """
    from torch.nn.attention.flex_attention import create_block_mask

    dev = q.device
    num_q, h_q, d = q.shape
    h_kv = k_cache.shape[2]
    pre, size = plan.preorder
    order = np.argsort(pre)  # nodes in depth-first order
    lengths = plan.node_lengths[order]
    tok_node = np.repeat(order, lengths)
    tok_local = np.arange(len(tok_node)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    slots = plan.slots[plan.node_offsets[tok_node] + tok_local]
    t = lambda a: torch.as_tensor(np.asarray(a), device=dev, dtype=torch.int64)  # noqa: E731
    kv_node, kv_local, kv_pre, kv_end = t(tok_node), t(tok_local), t(pre[tok_node]), t(pre[tok_node] + size[tok_node])
    q_node, q_vis, q_pre = t(plan.query_nodes), t(plan.query_visible), t(pre[plan.query_nodes])

    def mask_mod(b, h, qi, ki):  # noqa: ANN001, ANN202 - FlexAttention's signature
        qp = q_pre[qi]
        below = (qp >= kv_pre[ki]) & (qp < kv_end[ki])
        own = kv_node[ki] == q_node[qi]
        return below & (~own | (kv_local[ki] < q_vis[qi]))

    block_mask = create_block_mask(mask_mod, None, None, num_q, len(tok_node), device=dev)
    ids = t(slots)
    k = k_cache.view(-1, h_kv, d)[ids].transpose(0, 1)[None].contiguous()  # [1, H_kv, S, D]
    v = v_cache.view(-1, h_kv, d)[ids].transpose(0, 1)[None].contiguous()
    q4 = q.transpose(0, 1)[None].contiguous()  # [1, H_q, Q, D]

    def run() -> torch.Tensor:
        return compiled(q4, k, v, block_mask=block_mask, enable_gqa=True)[0].transpose(0, 1)

    return run
