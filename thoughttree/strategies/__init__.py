"""Search strategies: step-shaped, never calling the model; the driver batches their work.

Write your own by subclassing :class:`StrategyBase` (or any class with ``start``, ``step``,
``update`` and ``best``); see ``examples/custom_strategy.py``.
"""

from __future__ import annotations

from typing import Any

from .base import Outcome, SearchContext, Step, Strategy, StrategyBase, best_node
from .beam import Beam, BeamConfig
from .bfs import BFS, BFSConfig
from .dfs import DFS, DFSConfig
from .mcts import MCTS, MCTSConfig
from .sampling import BestOfN, BestOfNConfig, SelfConsistency, SelfConsistencyConfig

BUILTIN: dict[str, type[StrategyBase]] = {
    cls.__name__: cls for cls in (BFS, DFS, Beam, MCTS, BestOfN, SelfConsistency)
}


def from_dict(data: dict[str, Any]) -> StrategyBase:
    """Rebuild a built-in strategy from its ``describe()`` data (as stored in a run file's meta)."""
    name = data.get("class") if isinstance(data, dict) else None
    if name not in BUILTIN:
        raise ValueError(
            f"unknown strategy {name!r}; built-in ones are {', '.join(BUILTIN)} (rebuild custom ones yourself)"
        )
    config = dict(data.get("config", {}))
    if name == "MCTS" and config.get("rollout") is not None:
        raise ValueError("an MCTS with a rollout evaluator cannot be rebuilt from data; construct it in code")
    return BUILTIN[name](**config)


__all__ = [
    "BFS", "BFSConfig", "Beam", "BeamConfig", "BestOfN", "BestOfNConfig", "DFS", "DFSConfig", "MCTS",
    "MCTSConfig", "Outcome", "SearchContext", "SelfConsistency", "SelfConsistencyConfig", "Step", "Strategy",
    "StrategyBase", "best_node", "from_dict",
]
