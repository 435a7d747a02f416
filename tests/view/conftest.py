"""Fixtures for the view tests: the sample tree of view_trees.py."""

from __future__ import annotations

import pytest
from view_trees import build_sample_tree

from thoughttree.tree import ThoughtTree


@pytest.fixture
def sample_tree() -> ThoughtTree:
    return build_sample_tree()
