"""The public entry to tree attention: one call, several backends behind it."""

from __future__ import annotations

import torch

from .plan.tree_plan import TreePlan
from .reference import tree_attention_reference

BACKENDS = ("deft", "per_sequence", "reference")


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
    plan.check_inputs(q, k_cache, v_cache)
    if backend == "reference":
        return tree_attention_reference(q, k_cache, v_cache, plan, sm_scale)
    if backend == "deft":
        from .deft import deft_tree_attention

        return deft_tree_attention(q, k_cache, v_cache, plan, sm_scale=sm_scale)
    if backend == "per_sequence":
        from .deft import per_sequence_attention

        return per_sequence_attention(q, k_cache, v_cache, plan, sm_scale=sm_scale)
    raise ValueError(f"unknown tree-attention backend {backend!r}; choose one of {', '.join(BACKENDS)}")
