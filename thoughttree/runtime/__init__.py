"""The shared-prefix runtime: KV pool, KV tree, model forward, sampler and engine."""

from .engine import EngineStats
from .kv_pool import KVPool, KVPoolExhausted
from .kv_tree import KVTree, Segment
from .lm import LM
from .model_config import SUPPORTED, ModelConfig, ModelLoadError

__all__ = [
    "EngineStats",
    "KVPool",
    "KVPoolExhausted",
    "KVTree",
    "LM",
    "ModelConfig",
    "ModelLoadError",
    "SUPPORTED",
    "Segment",
]
