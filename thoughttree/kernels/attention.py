"""The public entry to tree attention: one call, several backends behind it."""

from __future__ import annotations

import torch

from .plan import TreePlan
from .reference import tree_attention_reference

BACKENDS = ("deft", "per_sequence", "reference")


def _check(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, plan: TreePlan) -> None:
    if q.dim() != 3 or k_cache.dim() != 4 or k_cache.shape != v_cache.shape:
        raise ValueError(
            "expected q [Q, H_q, D] and k_cache, v_cache [num_pages, page_size, H_kv, D]; "
            f"got q {tuple(q.shape)}, k {tuple(k_cache.shape)}, v {tuple(v_cache.shape)}"
        )
    if q.shape[0] != plan.num_queries:
        raise ValueError(f"q has {q.shape[0]} rows but the plan has {plan.num_queries} queries")
    if k_cache.shape[1] != plan.page_size:
        raise ValueError(f"cache page size {k_cache.shape[1]} differs from the plan's {plan.page_size}")
    if q.shape[2] != k_cache.shape[3] or q.shape[1] % k_cache.shape[2]:
        raise ValueError(
            f"q heads {q.shape[1]} must be a multiple of KV heads {k_cache.shape[2]} with equal head dims "
            f"({q.shape[2]} vs {k_cache.shape[3]})"
        )


def tree_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    plan: TreePlan,
    *,
    sm_scale: float | None = None,
    backend: str = "deft",
) -> torch.Tensor:
    """Attention of each query row over its tree path.

    Args:
        q: [num_queries, H_q, D].
        k_cache, v_cache: [num_pages, page_size, H_kv, D].
        plan: from :func:`plan_tree_attention` for this step.
        sm_scale: softmax scale, default 1/sqrt(D).
        backend: "deft" (Triton DeFT tree kernels, float16/bfloat16), "per_sequence" (Triton
            split-KV decoding of each query's own path, no sharing; the baseline) or
            "reference" (plain PyTorch, float32).
    Returns:
        [num_queries, H_q, D] in q's dtype.
    """
    _check(q, k_cache, v_cache, plan)
    if backend == "reference":
        return tree_attention_reference(q, k_cache, v_cache, plan, sm_scale)
    if backend == "deft":
        from .deft import deft_tree_attention

        return deft_tree_attention(q, k_cache, v_cache, plan, sm_scale=sm_scale)
    if backend == "per_sequence":
        from .deft import per_sequence_attention

        return per_sequence_attention(q, k_cache, v_cache, plan, sm_scale=sm_scale)
    raise ValueError(f"unknown tree-attention backend {backend!r}; choose one of {', '.join(BACKENDS)}")
