"""Plain-PyTorch references, written in problem terms (not mirroring any kernel's tiling)."""

from __future__ import annotations

import math

import torch

from .plan import TreePlan


def tree_attention_reference(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    plan: TreePlan,
    sm_scale: float | None = None,
) -> torch.Tensor:
    """Each query row attends, in float32, to the KV slots its plan says it sees.

    Args:
        q: [Q, H_q, D] queries.
        k_cache, v_cache: [num_pages, page_size, H_kv, D]; H_q is a multiple of H_kv (GQA).
        plan: from :func:`plan_tree_attention`.
    Returns:
        [Q, H_q, D] in q's dtype.
    """
    num_q, h_q, d = q.shape
    h_kv = k_cache.shape[2]
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(d)
    ids, valid = plan.padded_query_slots  # [Q, L], [Q, L]
    k = k_cache.reshape(-1, h_kv, d)[ids].float()  # [Q, L, H_kv, D]
    v = v_cache.reshape(-1, h_kv, d)[ids].float()
    group = h_q // h_kv
    qg = q.float().reshape(num_q, h_kv, group, d)
    scores = torch.einsum("qhgd,qlhd->qhgl", qg, k) * scale
    scores = scores.masked_fill(~valid[:, None, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    out = torch.einsum("qhgl,qlhd->qhgd", probs, v)
    return out.reshape(num_q, h_q, d).to(q.dtype)


def store_kv_reference(
    k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor
) -> None:
    """Write k, v ([T, H_kv, D]) into the caches ([num_pages, page_size, H_kv, D]) at ``slots`` ([T])."""
    h_kv, d = k_cache.shape[2], k_cache.shape[3]
    k_cache.view(-1, h_kv, d)[slots] = k.to(k_cache.dtype)
    v_cache.view(-1, h_kv, d)[slots] = v.to(v_cache.dtype)
