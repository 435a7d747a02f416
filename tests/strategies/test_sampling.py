"""Best-of-N and self-consistency against the scripted fake runtime."""

from __future__ import annotations

from fakes import FakeLM, ScriptConfig, ScriptTask, pick

from thoughttree import Sampling, Status, ThoughtTree
from thoughttree.search.driver import search
from thoughttree.strategies import BestOfN, SelfConsistency
from thoughttree.strategies.base import best_node
from thoughttree.tasks import LogProb


def test_best_of_n_scores_all_samples_in_one_batch_and_keeps_the_best():
    lm = FakeLM(children={"Q:": ["=1;", "=2;", "=3;", "=4;"]})
    values = {"=1;": 0.1, "=2;": 0.7, "=3;": 0.4, "=4;": 0.2}
    result = search(ScriptTask(values), BestOfN(n=4), lm, problem="Q")
    assert result.answer == "2" and result.statistics.rounds == 1
    assert [c for c in lm.calls if c[0] == "generate"] == [("generate", 4)]
    assert all(n.status is Status.TERMINAL for n in result.tree.root.children)


def test_best_of_n_prefers_a_verified_solution():
    lm = FakeLM(children={"Q:": ["=1;", "=2;"]})
    result = search(ScriptTask({"=1;": 0.9, "=2;": 0.1}, solutions=["2"]), BestOfN(n=2), lm, problem="Q")
    assert result.answer == "2" and result.solved and result.stopped == "solved"


def test_best_of_n_by_log_probability_needs_no_model_call():
    lps = {"1": -2.0, "2": -0.5}
    lm = FakeLM(children={"Q:": ["=1;", "=2;"]}, token_logprob=lambda c, ch: lps.get(ch, 0.0))
    result = search(ScriptTask(evaluator=LogProb(normalize=False)), BestOfN(n=2), lm, problem="Q")
    assert result.answer == "2" and [n.value for n in result.tree.root.children] == [-2.0, -0.5]
    assert not [c for c in lm.calls if c[0] in ("complete", "tree_logits")]


def test_self_consistency_takes_the_majority_answer_counting_duplicates():
    sampled = Sampling(max_tokens=8, temperature=1.0, stop=(";",))
    lm = FakeLM(children=lambda context, ordinal, seed: pick(["=1;", "=2;", "=2;", "=3;", "=2;"], ordinal))
    result = search(ScriptTask(config=ScriptConfig(sampling=sampled)), SelfConsistency(n=5), lm, problem="Q")
    assert result.answer == "2"
    kids = result.tree.root.children
    assert [k.metadata["votes"] for k in kids] == [1, 3, 3, 1, 3]
    assert result.best is kids[1]
    assert [k.status for k in kids].count(Status.PRUNED) == 2  # task dedupe prunes repeats; they still vote
    assert not [c for c in lm.calls if c[0] == "complete"]


def test_self_consistency_ties_go_to_the_first_answer():
    lm = FakeLM(children={"Q:": ["=5;", "=4;", "=4;", "=5;"]})
    task = ScriptTask(config=ScriptConfig(dedupe=False))
    result = search(task, SelfConsistency(n=4), lm, problem="Q")
    assert result.answer == "5" and result.best is result.tree.root.children[0]


def test_the_best_node_is_a_solution_then_a_finished_node_then_a_live_one_whatever_their_values():
    tree = ThoughtTree(None, prompt=[1])
    live, finished, solved = (tree.add_child(tree.root, [2], "", value=v) for v in (0.9, 0.5, 0.1))
    tree.add_child(live, [3], "", value=0.9)  # as good and deeper: it wins among the live ones
    finished.status, solved.status = Status.TERMINAL, Status.SOLVED
    assert best_node(tree) is solved
    solved.status = Status.PRUNED
    assert best_node(tree) is finished
    finished.status = Status.PRUNED
    assert best_node(tree) is live.children[0]


def test_self_consistency_leaves_invalid_samples_out_of_the_vote():
    class Picky(ScriptTask):
        def accept(self, problem, parent, text):
            return text != "=3;"

    lm = FakeLM(children={"Q:": ["=3;", "=3;", "=1;", "=3;"]})
    result = search(Picky(config=ScriptConfig(dedupe=False)), SelfConsistency(n=4), lm, problem="Q")
    assert result.answer == "1" and result.best.text == "=1;"
    assert [k.metadata.get("rejected") for k in result.tree.root.children] == ["invalid", "invalid", None, "invalid"]
