"""lm.check_integrity(tree) with other trees on the same pool: no false corruption, real leaks found."""

from __future__ import annotations

import pytest

from thoughttree import LM, Sampling, ThoughtTree
from thoughttree.commands.model import bundled_model_path


@pytest.fixture(scope="module")
def lm() -> LM:
    return LM.from_pretrained(bundled_model_path(), device="cpu")


def test_check_integrity_of_one_tree_while_others_share_the_pool(lm: LM):
    sampling = Sampling(max_tokens=4, temperature=1.0)
    trees = [ThoughtTree(lm, prompt="4 5 6 10", seed=s) for s in range(3)]  # one prompt: shared prefix
    for tree in trees:
        tree.expand([tree.root], 2, sampling)
    for tree in trees:
        lm.check_integrity(tree)
    lm.check_integrity(*trees)
    trees[1].release_kv()
    lm.check_integrity(trees[0])
    for tree in (trees[0], trees[2]):
        tree.release_kv()
    lm.check_integrity()


def test_a_segment_held_by_no_live_tree_is_still_a_leak(lm: LM):
    tree = ThoughtTree(lm, prompt="1 2 3 4", seed=0)
    tree.expand([tree.root], 1, Sampling(max_tokens=2))
    leaked = lm.kv.insert(tree.root.kv, [5])  # references a segment that no node holds
    with pytest.raises(AssertionError, match="refs but"):
        lm.check_integrity(tree)
    lm.kv.release(leaked)
    tree.release_kv()
    lm.check_integrity(tree)
