"""Tree-attention kernels (torch + triton only): plan once per step, run per layer.

Importing them names a persistent Triton cache directory when the environment names none
(:mod:`cache`), before any kernel can compile.
"""

from .cache import use_persistent_cache

use_persistent_cache()

from .attention import BACKENDS, tree_attention
from .plan.tree_plan import TreePlan, plan_tree_attention
from .reference import store_kv_reference, tree_attention_reference
from .store import store_kv
from .plan.workplan import WorkConfig
from .deft import deft_tree_attention, per_sequence_attention

__all__ = [
    "BACKENDS",
    "TreePlan",
    "WorkConfig",
    "deft_tree_attention",
    "per_sequence_attention",
    "plan_tree_attention",
    "store_kv",
    "store_kv_reference",
    "tree_attention",
    "tree_attention_reference",
]
