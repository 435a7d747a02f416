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

from typing import TYPE_CHECKING, Any

from . import strategies, tasks
from .config import RuntimeConfig, Sampling, Speculative
from .search.driver import Budget, SearchError, search
from .search.results import SearchResult, Statistics
from .tree import Node, Status, ThoughtTree
from .tree.query import best_path
from .view.render import show

if TYPE_CHECKING:
    from .runtime import LM

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "LM":
        from .runtime import LM

        return LM
    raise AttributeError(f"module 'thoughttree' has no attribute {name!r}")


__all__ = [
    "LM",
    "Budget",
    "Node",
    "RuntimeConfig",
    "Sampling",
    "SearchError",
    "SearchResult",
    "Speculative",
    "Statistics",
    "Status",
    "ThoughtTree",
    "best_path",
    "search",
    "show",
    "strategies",
    "tasks",
]
