"""BFS against the scripted fake runtime: selection, pruning, batching, resume state."""

from __future__ import annotations

import pytest
from fakes import FakeLM, ScriptConfig, ScriptTask

from thoughttree import Sampling, Status
from thoughttree.search.driver import search
from thoughttree.strategies import BFS
from thoughttree.tasks import ValuePrompt, Verifier

TABLE = {"Q:": ["a;", "b;", "c;"], "Q:a;": ["d;", "e;", "f;"], "Q:b;": ["g;", "h;", "i;"]}
VALUES = {"a;": 0.5, "b;": 0.9, "c;": 0.1, "a;d;": 0.1, "a;e;": 0.2, "a;f;": 0.3,
          "b;g;": 0.4, "b;h;": 0.95, "b;i;": 0.0}


def texts(tree, status=None):
    return [n.path_text(include_root=False) for n in tree.nodes if status is None or n.status is status]


def test_keeps_best_breadth_and_expands_them_in_one_batch():
    lm = FakeLM(children=TABLE)
    result = search(ScriptTask(VALUES), BFS(breadth=2, samples=3, depth=2), lm, problem="Q")
    tree = result.tree
    assert texts(tree, Status.PRUNED) == ["c;", "a;d;", "a;e;", "a;f;", "b;i;"]  # the last level is selected too
    assert texts(tree, Status.EXPANDED) == ["", "a;", "b;"] and texts(tree, Status.OPEN) == ["b;g;", "b;h;"]
    assert [c for c in lm.calls if c[0] == "generate"] == [("generate", 3), ("generate", 6)]
    assert result.best.path_text(include_root=False) == "b;h;"
    assert result.stopped == "done" and result.statistics.rounds == 2
    tree.check_integrity()
    lm.check_kv([tree])


def test_expansion_forward_steps_follow_the_longest_generation():
    table = {"Q:": ["a;", "bb;", "cccc;"], "Q:a;": ["x;", "y;", "v;"], "Q:bb;": ["yyyyyy;", "z;", "u;"],
             "Q:cccc;": ["z;", "w;", "t;"]}
    lm = FakeLM(children=table)
    task = ScriptTask(evaluator=Verifier(lambda problem, node: float(len(node.text))))
    result = search(task, BFS(breadth=3, samples=3, depth=2), lm, problem="Q")
    second = result.statistics.per_round[1]
    assert second.expanded == 3 and second.new_nodes == 9 and second.longest_generation == 7
    assert second.expand.forward_steps == 7  # one batched decode, not 3 (or 9) separate ones


def test_value_prompts_of_a_round_go_in_one_call_with_node_derived_seeds():
    seen = []

    def answers(prompt, seed):
        seen.append((prompt, seed))
        return {"value a;": "likely", "value b;": "sure", "value c;": "impossible"}.get(prompt, "impossible")

    evaluator = ValuePrompt(prompt=lambda p, n: f"value {n.text}", labels={"sure": 20, "likely": 1, "impossible": 0.001},
                            samples=2)
    lm = FakeLM(children=TABLE, answers=answers)
    result = search(ScriptTask(evaluator=evaluator), BFS(breadth=1, samples=3, depth=1), lm, problem="Q")
    assert [c for c in lm.calls if c[0] == "complete"] == [("complete", 6)]
    assert [n.value for n in result.tree.root.children] == [1.0, 20.0, 0.001]
    assert len({s for _, s in seen}) == 6  # every sample has its own seed
    assert result.best.text == "b;"


def test_duplicate_children_are_pruned_and_not_evaluated():
    lm = FakeLM(children={"Q:": ["a;", "a;", "b;"]})
    result = search(ScriptTask({"a;": 0.2, "b;": 0.1}), BFS(breadth=1, samples=3, depth=1), lm, problem="Q")
    dup = result.tree.nodes[2]
    assert dup.status is Status.PRUNED and dup.metadata["rejected"] == "duplicate" and dup.value is None
    lm.check_kv([result.tree])


def test_sampled_selection_draws_only_valued_nodes_and_repeats_with_the_seed():
    table = {"Q:": ["a;", "b;", "c;", "d;"], **{f"Q:{x};": ["z;"] for x in "abcd"}}
    values = {"a;": 0.0, "b;": 1.0, "c;": 0.0, "d;": 2.0, **{f"{x};z;": 0.0 for x in "abcd"}}
    kept = []
    for _ in range(2):
        lm = FakeLM(children=table)
        result = search(ScriptTask(values), BFS(breadth=2, samples=4, depth=2, selection="sample"), lm, problem="Q")
        kept.append(texts(result.tree, Status.EXPANDED))
    assert kept[0] == kept[1] == ["", "b;", "d;"]


def test_sampled_selection_follows_the_search_seed():
    table = {"Q:": ["a;", "b;"], "Q:a;": ["z;"], "Q:b;": ["z;"]}
    values = {"a;": 1.0, "b;": 1.0, "a;z;": 0.0, "b;z;": 0.0}
    kept = set()
    for seed in range(8):
        bfs = BFS(breadth=1, samples=2, depth=2, selection="sample")
        result = search(ScriptTask(values), bfs, FakeLM(children=table), problem="Q", seed=seed)
        kept.add(tuple(texts(result.tree, Status.EXPANDED)))
    assert kept == {("", "a;"), ("", "b;")}


def test_stops_at_a_verified_solution():
    table = {"Q:": ["a;", "=7;"], "Q:a;": ["b;"]}
    lm = FakeLM(children=table)
    task = ScriptTask({"a;": 0.5, "a;b;": 0.5}, solutions=["7"])
    result = search(task, BFS(breadth=2, samples=2, depth=3), lm, problem="Q")
    assert result.stopped == "solved" and result.solved and result.answer == "7"
    assert result.best.status is Status.SOLVED and result.best.value == 1.0
    assert [c for c in lm.calls if c[0] == "generate"] == [("generate", 2)]


def test_options_are_validated():
    with pytest.raises(ValueError, match="did you mean 'breadth'"):
        BFS(bredth=2)
    with pytest.raises(ValueError, match="breadth must be an integer >= 1"):
        BFS(breadth=0)
    with pytest.raises(ValueError, match="selection must be one of"):
        BFS(selection="best")


def test_sampling_settings_reach_the_model():
    lm = FakeLM(children={"Q:": ["abcdefgh;"]})
    task = ScriptTask({"abc": 0.0}, config=ScriptConfig(sampling=Sampling(max_tokens=3, temperature=0.0)))
    result = search(task, BFS(breadth=1, samples=1, depth=1), lm, problem="Q")
    child = result.tree.root.children[0]
    assert child.text == "abc" and child.metadata["finish_reason"] == "length"
