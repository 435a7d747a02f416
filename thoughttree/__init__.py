"""thoughttree: LLM reasoning search on a shared-prefix KV runtime."""

from .config import RuntimeConfig, Sampling
from .runtime import LM
from .tree import Node, Status, ThoughtTree

__version__ = "0.1.0"

__all__ = ["LM", "Node", "RuntimeConfig", "Sampling", "Status", "ThoughtTree"]
