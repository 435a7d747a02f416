"""The shared-prefix runtime: KV pool, KV tree, model forward, sampler and engine.

Its names load on first use, so the torch-free modules here (``ranks``) can be imported by
commands that never touch a model.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .engine_stats import EngineStats
    from .kv_pool import KVPool, KVPoolExhausted
    from .kv_tree import KVTree, Segment
    from .lm import LM
    from .model_config import SUPPORTED, ModelConfig, ModelLoadError

_HOMES = {
    "EngineStats": "engine_stats",
    "KVPool": "kv_pool",
    "KVPoolExhausted": "kv_pool",
    "KVTree": "kv_tree",
    "Segment": "kv_tree",
    "LM": "lm",
    "ModelConfig": "model_config",
    "ModelLoadError": "model_config",
    "SUPPORTED": "model_config",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'thoughttree.runtime' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{home}", __name__), name)


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
