"""Beam search over thoughts and over tokens against the scripted fake runtime."""

from __future__ import annotations

import math

import pytest
from fakes import EOS_TEXT, FakeLM, ScriptTask

from thoughttree import Status
from thoughttree.search.driver import search
from thoughttree.strategies import Beam

# Per-character log-probabilities; ";" is free, so a thought's score is its letter's.
LP = {"a": -1.0, "b": -0.5, "c": -0.2, "d": -3.0, "e": -0.9, "f": -2.0, "g": -0.1, "h": -4.0}
TABLE = {"Q:": ["a;", "b;"], "Q:a;": ["c;", "d;"], "Q:b;": ["e;", "f;"], "Q:a;c;": ["g;"], "Q:b;e;": ["h;"]}


def fake():
    return FakeLM(children=TABLE, token_logprob=lambda context, ch: LP.get(ch, 0.0))


def live_leaves(tree):
    return sorted(n.path_text(include_root=False) for n in tree.nodes if n.is_leaf and n.alive and n.parent)


def test_thought_beam_keeps_the_best_paths_across_parents():
    lm = fake()
    result = search(ScriptTask(), Beam(width=2, samples=2, length_penalty=0.0, max_steps=2), lm, problem="Q")
    # sums: a;c; -1.2, a;d; -4.0, b;e; -1.4, b;f; -2.5 -> keep a;c; and b;e;
    assert live_leaves(result.tree) == ["a;c;", "b;e;"]
    assert {n.text for n in result.tree.nodes if n.status is Status.PRUNED} == {"d;", "f;"}
    assert [c for c in lm.calls if c[0] == "generate"] == [("generate", 2), ("generate", 4)]
    assert not [c for c in lm.calls if c[0] == "complete"]  # log-probability scores need no evaluation
    assert result.best.path_text(include_root=False) == "a;c;"
    lm.check_kv([result.tree])


def test_length_penalty_favours_the_better_per_token_path():
    lm = fake()
    beam = Beam(width=1, samples=2, length_penalty=1.0, max_steps=3)
    result = search(ScriptTask(), beam, lm, problem="Q")
    # width 1: b; (-0.25/token) beats a; (-0.5); then b;e; (-1.4/4) beats b;f;; then b;e;h;
    assert live_leaves(result.tree) == ["b;e;h;"]
    node = result.best
    assert beam.score(node) == pytest.approx((-0.5 - 0.9 - 4.0) / 6)
    assert Beam(length_penalty=0.0).score(node) == pytest.approx(-0.5 - 0.9 - 4.0)
    assert Beam(length_penalty=0.5).score(node) == pytest.approx((-0.5 - 0.9 - 4.0) / 6 ** 0.5)


def test_token_beam_ranks_by_model_log_probabilities():
    logits = {"Q:": {"a": 2.0, "b": 1.0, "c": 0.0}, "Q:a": {EOS_TEXT: 3.0, "x": 0.0},
              "Q:b": {"y": 1.1, "z": 1.0}, "Q:by": {EOS_TEXT: 0.0}}
    lm = FakeLM(logits=lambda context: logits[context])
    task = ScriptTask(terminal=lambda node: node.metadata["finish_reason"] == "eos")
    result = search(task, Beam(width=2, unit="token", length_penalty=0.0, max_steps=3), lm, problem="Q")
    tree = result.tree
    assert [c for c in lm.calls if c[0] == "tree_logits"] == [("tree_logits", 1), ("tree_logits", 2),
                                                             ("tree_logits", 1)]
    finished = sorted(n.path_text(include_root=False) for n in tree.nodes if n.status is Status.TERMINAL)
    assert finished == ["a" + EOS_TEXT, "by" + EOS_TEXT]
    assert {n.path_text(include_root=False) for n in tree.nodes if n.status is Status.PRUNED} >= {"ax", "bz"}
    lse = math.log(math.exp(2) + math.exp(1) + 1 + 256 * math.exp(-30))
    assert result.best.path_text(include_root=False) == "a" + EOS_TEXT
    assert tree.nodes[1].logprob == pytest.approx(2.0 - lse, abs=1e-5)


def test_beam_options_are_validated():
    with pytest.raises(ValueError, match="unit must be one of"):
        Beam(unit="word")
    with pytest.raises(ValueError, match="length_penalty must be >= 0"):
        Beam(length_penalty=-1)
    with pytest.raises(ValueError, match="score='logprob'"):
        Beam(unit="token", score="value")


def test_a_finished_hypothesis_that_falls_out_of_the_beam_is_pruned():
    logprobs = {"a": -0.1, "=": -5.0, "b": -0.1, "c": -0.2}
    lm = FakeLM(children={"Q:": ["a;", "=1;"], "Q:a;": ["b;", "c;"]},
                token_logprob=lambda context, ch: logprobs.get(ch, 0.0))
    result = search(ScriptTask(), Beam(width=1, samples=2, length_penalty=0.0, max_steps=2), lm, problem="Q")
    finished = [n for n in result.tree.nodes if n.text == "=1;"][0]
    assert finished.status is Status.PRUNED and result.best.path_text(include_root=False) == "a;b;"


def test_a_verified_solution_outside_the_beam_is_kept_and_answers_before_a_better_scored_finish():
    logprobs = {"a": -0.1, "=": -0.01, "1": -3.0, "2": 0.0}
    lm = FakeLM(children={"Q:": ["a;", "=1;", "=2;"]}, token_logprob=lambda context, ch: logprobs.get(ch, 0.0))
    task = ScriptTask(solutions=["1"])
    result = search(task, Beam(width=1, samples=3, length_penalty=0.0, max_steps=2), lm, problem="Q")
    solved, unverified = ([n for n in result.tree.nodes if n.text == t][0] for t in ("=1;", "=2;"))
    assert solved.status is Status.SOLVED and unverified.status is Status.TERMINAL
    assert result.best is solved and result.answer == "1"


def test_token_beam_counts_its_chosen_tokens_as_generated_and_a_token_budget_stops_it(tiny_model_dir):
    from thoughttree import LM, RuntimeConfig
    from thoughttree.search.driver import Budget
    from thoughttree.tasks import LogProb, Task

    class Free(Task):
        def prompt(self, problem):
            return problem

        def evaluator(self):
            return LogProb()

    lm = LM.from_pretrained(tiny_model_dir, device="cpu", runtime=RuntimeConfig(num_pages=256))
    result = search(Free(), Beam(width=3, samples=3, unit="token", max_steps=8), lm, problem="the quick brown",
                    budget=Budget(max_generated_tokens=5))
    # the root's three top tokens (3 < 5), then three for each of the three (12 >= 5): stop
    assert result.stopped == "max_generated_tokens" and result.statistics.rounds == 2
    rounds = result.statistics.per_round
    assert result.statistics.generated_tokens == 12 == sum(r.expand.generated_tokens for r in rounds)
