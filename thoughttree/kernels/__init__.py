"""Tree-attention kernels (torch + triton only): plan once per step, run per layer.

Importing them names a persistent Triton cache directory when the environment names none
(:mod:`cache`), before any kernel can compile.
"""

from .cache import use_persistent_cache

use_persistent_cache()

from .attention import BACKENDS, tree_attention  # noqa: E402 (after the cache is named)
from .plan.tree_plan import TreePlan, plan_tree_attention  # noqa: E402 (after the cache is named)
from .reference import store_kv_reference, tree_attention_reference  # noqa: E402 (after the cache is named)
from .store import store_kv  # noqa: E402 (after the cache is named)
from .plan.tiles import TileConfig  # noqa: E402 (after the cache is named)
from .plan.work_config import WorkConfig  # noqa: E402 (after the cache is named)
from .deft import deft_tree_attention, per_sequence_attention  # noqa: E402 (after the cache is named)

__all__ = [
    "BACKENDS",
    "TileConfig",
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
