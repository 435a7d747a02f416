"""Pure-Python thought trees (no torch): nodes, structure, and the runtime protocol."""

from .backend import Generation, TreeBackend
from .node import Node, Status
from .thought_tree import ThoughtTree, TreeError, derive_seed

__all__ = ["Generation", "Node", "Status", "ThoughtTree", "TreeBackend", "TreeError", "derive_seed"]
