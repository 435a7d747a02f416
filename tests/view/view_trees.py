"""A small searched tree with every status, shared by the rendering, export and command-line tests."""

from __future__ import annotations

from thoughttree.tree import Status, ThoughtTree

LONG_TEXT = "6 * 4 = 24\n\n  (left:   24)\tthen a very long explanation that goes on and on and on and on"


def build_sample_tree() -> ThoughtTree:
    """Ids and shape (status, value, visits)::

        0 root (expanded)
        ├── 1 pruned v=0.95          (the highest value, but pruned)
        ├── 2 expanded v=0.9 n=3
        │   ├── 6 terminal v=0.1
        │   ├── 7 open v=0.5
        │   └── 8 solved v=1.0 n=1   (the best node)
        ├── 3 expanded v=0.4 (LONG_TEXT)
        │   └── 10 solved v=0.8
        ├── 4 expanded v=0.2
        │   └── 9 open (unscored)
        └── 5 terminal v=0.3
    """
    tree = ThoughtTree(prompt=[1, 2, 3, 4])
    root = tree.root
    root.text = "Use 4 5 6 10 to make 24.\n"
    root.status = Status.EXPANDED
    texts = ["10 - 4 = 6 (left: 5 6 6)\n", "5 * 4 = 20\n", LONG_TEXT, 'say "hi" \\ back\n', "6 + 6 = 12\n"]
    a = [tree.add_child(root, [10 + i, 20 + i], t) for i, t in enumerate(texts)]
    for node, value in zip(a, (0.95, 0.9, 0.4, 0.2, 0.3)):
        node.value = value
    a[1].status, a[1].visits = Status.EXPANDED, 3
    a[2].status = Status.EXPANDED
    a[3].status = Status.EXPANDED
    a[4].status = Status.TERMINAL
    b = [tree.add_child(a[1], [30 + i], f"step b{i}\n") for i in range(3)]
    b[0].status, b[0].value = Status.TERMINAL, 0.1
    b[1].value = 0.5
    b[2].status, b[2].value, b[2].visits = Status.SOLVED, 1.0, 1
    b[2].metadata = {"finish_reason": "stop", "token_logprobs": [-0.5], "score": 1, "judge": {"model": "x", "k": 2}}
    b[1].metadata = {"finish_reason": "length", "score": 0.25}
    tree.add_child(a[3], [40], "c0\n")
    c1 = tree.add_child(a[2], [41, 42, 43], "answer: (10 - 4) * (5 - 6 + 5) = 24\n")
    c1.status, c1.value = Status.SOLVED, 0.8
    tree.prune(a[0])
    tree.check_integrity()
    return tree
