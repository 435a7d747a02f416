"""MCTS against the scripted fake runtime: UCT/PUCT selection, virtual loss, visits, backup."""

from __future__ import annotations

import math

import pytest
from fakes import FakeLM, ScriptTask

from thoughttree import Status
from thoughttree.search.driver import search
from thoughttree.strategies import MCTS
from thoughttree.tasks import Rollout

TABLE = {"Q:": ["a;", "b;"], "Q:a;": ["c;", "d;"], "Q:b;": ["e;", "f;"], "Q:b;e;": ["g;", "h;"]}
VALUES = {"a;": 0.2, "b;": 0.8, "a;c;": 0.1, "a;d;": 0.3, "b;e;": 0.9, "b;f;": 0.5, "b;e;g;": 1.0, "b;e;h;": 0.0}


def by_text(tree):
    return {n.path_text(include_root=False): n for n in tree.nodes}


def test_virtual_loss_spreads_one_round_over_two_branches_and_visits_add_up():
    lm = FakeLM(children=TABLE)
    result = search(ScriptTask(VALUES), MCTS(iterations=3, leaves_per_round=2, samples=2, c=1.0), lm, problem="Q")
    nodes = by_text(result.tree)
    # round 1 expands the root; round 2 picks b; (UCT 1.63) then, under b;'s virtual loss, a; (1.25 vs 1.14)
    assert [c for c in lm.calls if c[0] == "generate"] == [("generate", 2), ("generate", 4)]
    assert {k: n.visits for k, n in nodes.items()} == {"": 6, "a;": 3, "b;": 3, "a;c;": 1, "a;d;": 1,
                                                       "b;e;": 1, "b;f;": 1}
    assert nodes[""].metadata["value_sum"] == pytest.approx(2.8)
    assert nodes["b;"].metadata["value_sum"] == pytest.approx(0.8 + 0.9 + 0.5)
    assert nodes[""].metadata["mcts_iterations"] == 3
    # the most visited path, ties to the higher mean value
    assert result.best.path_text(include_root=False) == "b;e;"
    lm.check_kv([result.tree])


def test_without_virtual_loss_the_second_descent_repeats_and_the_round_shrinks():
    lm = FakeLM(children=TABLE)
    search(ScriptTask(VALUES), MCTS(iterations=3, leaves_per_round=2, samples=2, virtual_loss=0), lm, problem="Q")
    assert [c for c in lm.calls if c[0] == "generate"][:2] == [("generate", 2), ("generate", 2)]


def test_next_round_follows_uct_into_the_best_branch():
    lm = FakeLM(children=TABLE)
    result = search(ScriptTask(VALUES), MCTS(iterations=4, leaves_per_round=2, samples=2), lm, problem="Q")
    nodes = by_text(result.tree)
    # round 3 has one iteration left: root -> b; (Q 0.73) -> e; (0.9) is expanded
    assert nodes["b;e;"].status is Status.EXPANDED and nodes["b;e;"].visits == 3
    assert nodes[""].visits == 8


def test_puct_prior_from_the_model_breaks_equal_values():
    lps = {"a": -3.0, "b": -0.1}
    lm = FakeLM(children={"Q:": ["a;", "b;"], "Q:b;": ["x;", "y;"]}, token_logprob=lambda c, ch: lps.get(ch, 0.0))
    values = {"a;": 0.5, "b;": 0.5, "b;x;": 0.5, "b;y;": 0.5}
    result = search(ScriptTask(values), MCTS(iterations=2, leaves_per_round=1, samples=2, rule="puct", c=2.0), lm,
                    problem="Q")
    nodes = by_text(result.tree)
    assert nodes["b;"].status is Status.EXPANDED and nodes["a;"].status is Status.OPEN
    strategy = MCTS(rule="puct")
    priors = strategy.priors([nodes["a;"], nodes["b;"]])
    assert priors[1] == pytest.approx(1 / (1 + math.exp((-3.0 + 0.1) / 2)))


def test_solved_leaf_stops_the_search_and_revisits_back_up_without_model_work():
    table = {"Q:": ["a;", "=1;"], "Q:a;": ["b;"]}
    values = {"a;": 0.1, "a;b;": 0.1}
    lm = FakeLM(children=table)
    result = search(ScriptTask(values, solutions=["1"]), MCTS(iterations=5, samples=2), lm, problem="Q")
    assert result.stopped == "solved" and result.answer == "1"
    lm2 = FakeLM(children=table)
    mcts = MCTS(iterations=3, leaves_per_round=1, samples=2, stop_on_solution=False)
    result = search(ScriptTask(values, solutions=["1"]), mcts, lm2, problem="Q")
    solved = by_text(result.tree)["=1;"]
    assert solved.status is Status.SOLVED and solved.visits >= 2  # revisited: its value backed up again
    assert len([c for c in lm2.calls if c[0] == "generate"]) < 3


def test_rollout_estimates_replace_the_value_evaluator():
    calls = []

    def answers(prompt, seed):
        calls.append(prompt)
        return "=1;" if prompt.endswith("b;") else "=0;"

    rollout = Rollout(reward=lambda problem, text: float(text.endswith("=1;")), samples=2)
    lm = FakeLM(children=TABLE, answers=answers)
    result = search(ScriptTask(), MCTS(iterations=1, samples=2, rollout=rollout), lm, problem="Q")
    nodes = by_text(result.tree)
    assert nodes["a;"].value == 0.0 and nodes["b;"].value == 1.0
    assert [c for c in lm.calls if c[0] == "complete_from"] == [("complete_from", 4)]


def test_mcts_options_are_validated():
    with pytest.raises(ValueError, match="rule must be one of"):
        MCTS(rule="ucb")
    with pytest.raises(ValueError, match="rollout must be an evaluator"):
        MCTS(rollout=lambda x: x)
    with pytest.raises(ValueError, match="no option 'leaves'"):
        MCTS(leaves=3)


def test_a_branch_whose_children_are_all_pruned_is_a_dead_end_and_the_search_goes_on():
    class NoX(ScriptTask):
        def accept(self, problem, parent, text):
            return not text.startswith("x")

    table = {"Q:": ["a;", "b;"], "Q:a;": ["c;", "d;"], "Q:a;c;": ["x1;", "x2;"], "Q:a;d;": ["x3;", "x4;"],
             "Q:b;": ["e;", "f;"], "Q:b;e;": ["g;", "h;"], "Q:b;f;": ["i;", "j;"]}
    values = {"a;": 0.9, "b;": 0.5, "a;c;": 0.9, "a;d;": 0.9, "b;e;": 0.5, "b;f;": 0.5,
              "b;e;g;": 0.4, "b;e;h;": 0.4, "b;f;i;": 0.4, "b;f;j;": 0.4}
    result = search(NoX(values), MCTS(iterations=7, leaves_per_round=1, samples=2, c=0.1, max_depth=3),
                    FakeLM(children=table), problem="Q")
    nodes = by_text(result.tree)
    assert nodes["a;"].status is Status.PRUNED and "dead end" in nodes["a;"].metadata["rejected"]
    assert nodes["b;"].status is Status.EXPANDED and nodes["b;e;"].children  # went on into the live branch
    assert result.tree.root.metadata["mcts_iterations"] == 7


def test_virtual_loss_of_an_unbounded_evaluator_steers_away_from_the_branch():
    from thoughttree.tasks import LogProb

    lm = FakeLM(children=TABLE, token_logprob=lambda context, ch: -1.5 if ch == "b" else -1.0)
    search(ScriptTask(evaluator=LogProb()), MCTS(iterations=3, leaves_per_round=2, samples=2), lm, problem="Q")
    assert [c for c in lm.calls if c[0] == "generate"] == [("generate", 2), ("generate", 4)]  # two leaves in round 2


def test_iterations_count_only_leaves_that_were_expanded():
    from thoughttree.search.driver import Budget

    from thoughttree.tasks import Verifier

    lm = FakeLM(children=lambda context, ordinal, seed: "abcdefgh"[ordinal % 8] + ";")
    value = Verifier(lambda problem, node: (len(node.path_text()) * 7 % 10) / 10)
    result = search(ScriptTask(evaluator=value), MCTS(iterations=50, leaves_per_round=4, samples=3), lm,
                    problem="Q", budget=Budget(max_nodes=12))
    expanded = sum(1 for n in result.tree.nodes if n.children)
    assert result.tree.root.metadata["mcts_iterations"] == expanded
    assert not any("dead end" in n.metadata.get("rejected", "") for n in result.tree.nodes)


def _scored(children: list[tuple[int, float, float]], root_visits: int):
    """A root with children of (visits, value sum, log-probability of their one token)."""
    from thoughttree import ThoughtTree

    tree = ThoughtTree(prompt=[1])
    tree.root.visits = root_visits
    for i, (visits, value_sum, logprob) in enumerate(children):
        kid = tree.add_child(tree.root, [i + 2], f"k{i}", logprob=logprob)
        kid.visits, kid.value, kid.metadata["value_sum"] = visits, value_sum / visits, value_sum
    return tree


def _started(tree, bounds: tuple[float, float], **config) -> MCTS:
    from types import SimpleNamespace

    from thoughttree.strategies.base import SearchContext

    strategy = MCTS(**config)
    strategy.start(tree, SearchContext(task=None, problem=None, evaluator=SimpleNamespace(bounds=bounds), seed=0))
    return strategy


def _choose(tree, bounds: tuple[float, float], **config) -> str:
    return _started(tree, bounds, **config).choose(tree.root, list(tree.root.children), {}).text


def test_uct_and_puct_scores_are_the_documented_formulas():
    # UCT, Q in [0, 1]: k1 0.9 + sqrt(ln 5 / 4) = 1.534 beats k0 0.1 + sqrt(ln 5 / 1) = 1.369
    # (without the log, k0 would win: 0.1 + 2.236 against 0.9 + 1.118).
    assert _choose(_scored([(1, 0.1, 0.0), (4, 3.6, 0.0)], 5), (0.0, 1.0)) == "k1"
    # Raw values in [0, 10] are scaled into [0, 1] first: k0 0.1 + 1.269 beats k1 0.3 + 0.634 (unscaled, k1).
    assert _choose(_scored([(1, 1.0, 0.0), (4, 12.0, 0.0)], 5), (0.0, 10.0)) == "k0"
    # PUCT, P from the per-token log-probabilities at prior_temperature: at 1, P = 0.73 / 0.27 and
    # k0 0.3 + 0.73 * 0.707 wins; at 100 the priors are nearly even and k1's Q wins.
    puct = _scored([(1, 0.3, -1.0), (1, 0.5, -2.0)], 2)
    assert _choose(puct, (0.0, 1.0), rule="puct") == "k0"
    assert _choose(puct, (0.0, 1.0), rule="puct", prior_temperature=100.0) == "k1"


def test_the_answer_follows_the_most_visited_child_before_the_higher_mean():
    tree = _scored([(5, 1.0, 0.0), (3, 2.7, 0.0)], 8)
    assert _started(tree, (0.0, 1.0)).best().text == "k0"


def test_children_at_max_depth_are_finished_by_the_depth_limit():
    lm = FakeLM(children=TABLE)
    result = search(ScriptTask(VALUES), MCTS(iterations=4, leaves_per_round=2, samples=2, max_depth=1), lm, problem="Q")
    kids = result.tree.root.children
    assert [k.status for k in kids] == [Status.TERMINAL, Status.TERMINAL]
    assert all(k.metadata["finish_reason"] == "depth limit" and not k.children for k in kids)


def test_progressive_widening_asks_a_visited_node_for_more_children():
    table = {"Q:": ["a;", "b;", "c;", "d;"], "Q:a;": ["e;", "f;"], "Q:b;": ["g;", "h;"], "Q:c;": ["i;", "j;"],
             "Q:d;": ["k;", "l;"]}
    values = {"a;": 0.4, "b;": 0.5, "c;": 0.9, "d;": 0.1, "a;e;": 0.3, "a;f;": 0.2, "b;g;": 0.4, "b;h;": 0.6,
              "c;i;": 0.9, "c;j;": 0.8, "d;k;": 0.1, "d;l;": 0.0}
    plain = search(ScriptTask(values), MCTS(iterations=4, leaves_per_round=1, samples=2, max_depth=2),
                   FakeLM(children=table), problem="Q")
    assert "c;" not in by_text(plain.tree)
    wide = search(ScriptTask(values), MCTS(iterations=4, leaves_per_round=1, samples=2, max_depth=2, widening=0.5),
                  FakeLM(children=table), problem="Q")
    nodes = by_text(wide.tree)
    assert {"c;", "d;"} <= set(nodes) and nodes[""].metadata["expansions"] == 2
    assert nodes["c;"].visits >= 1  # the better late child is chosen as soon as it exists
    with pytest.raises(ValueError, match="widening"):
        MCTS(widening=1.5)


def test_priors_of_distinct_children_are_their_merged_probability_masses():
    from thoughttree import ThoughtTree

    tree = ThoughtTree(prompt=[1])
    meta = [{"distinct": {"sample_logprob": math.log(0.2)}, "proposal_mass": 0.3},
            {"distinct": {"sample_logprob": math.log(0.1)}}]
    kids = [tree.add_child(tree.root, [2 + i], f"{i}", metadata=m, logprob=-1.0) for i, m in enumerate(meta)]
    assert MCTS(rule="puct").priors(kids) == pytest.approx([0.75, 0.25])
    assert MCTS(rule="puct", prior_temperature=0.5).priors(kids) == pytest.approx([0.9, 0.1])
