from __future__ import annotations

from view_trees import build_sample_tree

from thoughttree.tree import ThoughtTree
from thoughttree.tree.summary import combine, summarize


def test_summary_of_the_sample_tree(sample_tree):
    s = summarize(sample_tree)
    assert (s.nodes, s.roots, s.per_depth) == (11, 1, (1, 5, 5))
    assert s.expanded == 4 and s.branching == 10 / 4  # root, 2, 3 and 4 have children
    assert s.prompt_tokens == 4
    assert s.generated_tokens == sum(len(n.tokens) for n in sample_tree.nodes[1:]) == 17
    assert (s.solved, s.pruned, s.best_value) == (2, 1, 1.0)


def test_combine_adds_counts_and_keeps_the_best_value():
    small = ThoughtTree(prompt=[1])
    small.add_child(small.root, [2, 3], "x")
    total = combine([summarize(build_sample_tree()), summarize(small)])
    assert (total.nodes, total.roots, total.per_depth) == (13, 2, (2, 6, 5))
    assert total.branching == (13 - 2) / 5
    assert (total.prompt_tokens, total.generated_tokens, total.best_value) == (5, 19, 1.0)
    empty = combine([])
    assert (empty.nodes, empty.per_depth, empty.branching, empty.best_value) == (0, (), None, None)
    lone = summarize(ThoughtTree(prompt=[1]))
    assert lone.branching is None and lone.best_value is None and lone.per_depth == (1,)
