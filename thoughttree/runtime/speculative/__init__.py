"""Speculative token trees: drafters, draft shapes, the cost model and the verifying decode steps."""

from .cost import CostModel
from .draft_model import DraftModel
from .drafter import Branch, Drafter, DraftTree
from .lookup import TreeLookup
from .shapes import order

__all__ = ["Branch", "CostModel", "DraftModel", "DraftTree", "Drafter", "TreeLookup", "order"]
