"""Tree-attention kernels (torch + triton only): plan once per step, run per layer."""

from .attention import BACKENDS, tree_attention
from .plan import TreePlan, plan_tree_attention

__all__ = ["BACKENDS", "TreePlan", "plan_tree_attention", "tree_attention"]
