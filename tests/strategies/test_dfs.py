"""DFS against the scripted fake runtime: order, threshold pruning, backtracking, visits."""

from __future__ import annotations

from fakes import FakeLM, ScriptTask

from thoughttree import Status
from thoughttree.search.driver import search
from thoughttree.strategies import DFS

TABLE = {"Q:": ["a;", "b;"], "Q:b;": ["c;", "d;"], "Q:a;": ["e;", "f;"], "Q:a;f;": ["g;", "h;"],
         "Q:a;e;": ["i;", "j;"]}
VALUES = {"a;": 0.6, "b;": 0.9, "b;c;": 0.2, "b;d;": 0.3, "a;e;": 0.7, "a;f;": 0.8, "a;f;g;": 0.9, "a;f;h;": 0.1,
          "a;e;i;": 0.4, "a;e;j;": 0.6}


def expansion_order(tree):
    expanded = [n for n in tree.nodes if n.children]
    return [n.path_text(include_root=False) for n in sorted(expanded, key=lambda n: n.children[0].id)]


def test_best_child_first_then_backtrack_past_pruned_children():
    lm = FakeLM(children=TABLE)
    result = search(ScriptTask(VALUES), DFS(samples=2, threshold=0.5, depth=3), lm, problem="Q")
    tree = result.tree
    # b; first (0.9); both its children fall below 0.5 -> backtrack to a;, whose better child f;
    # goes first; at the depth limit the search backtracks once more to a;e;.
    assert expansion_order(tree) == ["", "b;", "a;", "a;f;", "a;e;"]
    pruned = {n.path_text(include_root=False) for n in tree.nodes if n.status is Status.PRUNED}
    assert pruned == {"b;c;", "b;d;", "a;f;h;", "a;e;i;"}
    assert tree.nodes[3].metadata["rejected"] == "value below threshold 0.5"
    assert [n.visits for n in tree.nodes if n.children] == [1, 1, 1, 1, 1]
    assert result.stopped == "done"
    assert result.best.path_text(include_root=False) == "a;f;g;"
    assert [c for c in lm.calls if c[0] == "generate"] == [("generate", 2)] * 5
    lm.check_kv([tree])


def test_without_threshold_nothing_is_pruned_and_width_batches_leaves():
    lm = FakeLM(children=TABLE)
    result = search(ScriptTask(VALUES), DFS(samples=2, depth=2, width=2), lm, problem="Q")
    assert not [n for n in result.tree.nodes if n.status is Status.PRUNED]
    # round 2 expands b; and a; together (the first two open leaves in depth-first order)
    assert [c for c in lm.calls if c[0] == "generate"] == [("generate", 2), ("generate", 4)]


def test_stops_when_a_solution_is_found():
    lm = FakeLM(children={"Q:": ["a;", "b;"], "Q:b;": ["=3;", "c;"]})
    task = ScriptTask({"a;": 0.1, "b;": 0.9, "b;c;": 0.5}, solutions=["3"])
    result = search(task, DFS(samples=2, depth=5), lm, problem="Q")
    assert result.stopped == "solved" and result.answer == "3"
    assert result.solutions == (result.tree.nodes[3],)
