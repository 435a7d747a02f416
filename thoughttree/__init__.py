"""thoughttree: LLM reasoning search on a shared-prefix KV runtime.

>>> import thoughttree as tt
>>> lm = tt.LM.from_pretrained("path/to/model")
>>> tree = tt.ThoughtTree(lm, prompt="Use 4 5 6 10 to make 24.\\n")
>>> kids = tree.expand([tree.root], n=5, sampling=tt.Sampling(max_tokens=48, stop="\\n"))
>>> tt.show(tree)

The model runtime (torch, and triton on a GPU) is imported when ``LM`` is first used, so
commands that only read run files start quickly.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .config import RuntimeConfig, Sampling
from .tree import Node, Status, ThoughtTree

if TYPE_CHECKING:
    from . import strategies, tasks
    from .runtime import LM
    from .search import Budget, SearchError, search
    from .search_result import SearchResult, Statistics
    from .tree.render import best_path, show

__version__ = "0.1.0"

_MODULES = {"strategies": ".strategies", "tasks": ".tasks"}
_ATTRIBUTES = {
    "LM": ".runtime",
    "Budget": ".search",
    "SearchError": ".search",
    "search": ".search",
    "SearchResult": ".search_result",
    "Statistics": ".search_result",
    "best_path": ".tree.render",
    "show": ".tree.render",
}


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        value = import_module(_MODULES[name], __name__)
    elif name in _ATTRIBUTES:
        value = getattr(import_module(_ATTRIBUTES[name], __name__), name)
    else:
        raise AttributeError(f"module 'thoughttree' has no attribute {name!r}")
    globals()[name] = value
    return value


__all__ = [
    "LM",
    "Budget",
    "Node",
    "RuntimeConfig",
    "Sampling",
    "SearchError",
    "SearchResult",
    "Statistics",
    "Status",
    "ThoughtTree",
    "best_path",
    "search",
    "show",
    "strategies",
    "tasks",
]
