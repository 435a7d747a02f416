"""Evaluators: one batched model call each, seeds from node ids, clear errors."""

from __future__ import annotations

import pytest
from fakes import FakeLM, ScriptConfig, ScriptTask

from thoughttree import Sampling, ThoughtTree
from thoughttree.search.driver import search
from thoughttree.strategies import BFS
from thoughttree.tasks import LogProb, TaskError, ValuePrompt, Vote, parse_choice

LABELS = {"sure": 20.0, "likely": 1.0, "impossible": 0.001}


def small_tree(lm):
    tree = ThoughtTree(lm, prompt="Q:", seed=3)
    kids = tree.expand([tree.root], n=3)[0]
    return tree, kids


def test_value_prompt_seeds_do_not_depend_on_the_batch():
    lm = FakeLM(children={"Q:": ["a;", "b;", "c;"]}, answers=lambda prompt, seed: ["sure", "likely", "no idea"][seed % 3])
    tree, kids = small_tree(lm)
    ev = ValuePrompt(prompt=lambda p, n: f"v {n.text}", labels=LABELS, samples=4)
    alone = ev.evaluate(lm, "Q", [kids[2]], seed=tree.seed)
    together = ev.evaluate(lm, "Q", kids, seed=tree.seed)
    assert together[2] == alone[0]
    assert lm.calls[-1] == ("complete", 12)


def test_value_prompt_reads_the_last_line_and_counts_unknown_answers():
    ev = ValuePrompt(prompt=lambda p, n: "v", labels=LABELS, unknown=0.5)
    assert ev.label_of("6 * 4 = 24\nsure") == "sure"
    assert ev.label_of("it is likely reachable") == "likely"
    assert ev.label_of("maybe") is None
    assert ev.bounds == (0.001, 20.0)
    lm = FakeLM(children={"Q:": ["a;", "b;", "c;"]}, answers=lambda prompt, seed: "maybe")
    _, kids = small_tree(lm)
    assert ev.evaluate(lm, "Q", kids[:1], seed=0) == [0.5]


def test_value_prompt_fork_continues_the_node_path():
    prompts = []
    lm = FakeLM(children={"Q:": ["a;", "b;", "c;"]}, answers=lambda p, s: prompts.append(p) or "likely")
    _, kids = small_tree(lm)
    ev = ValuePrompt(prompt=lambda p, n: " ok?", labels=LABELS, samples=1, fork=True)
    assert ev.evaluate(lm, "Q", kids, seed=0) == [1.0, 1.0, 1.0]
    assert prompts == ["Q:a; ok?", "Q:b; ok?", "Q:c; ok?"]
    assert lm.calls[-1] == ("complete_from", 3)


def test_vote_groups_siblings_and_shares_votes():
    def answers(prompt, seed):
        return "The best choice is 2" if "a;" in prompt else "The best choice is 1"

    lm = FakeLM(children={"Q:": ["a;", "b;"], "R:": ["c;", "d;"]}, answers=answers)
    tree = ThoughtTree(lm, prompt="Q:")
    other = tree.add_root(lm.encode("R:", add_bos=True))
    a, b = tree.expand([tree.root], n=2)[0]
    c, d = tree.expand([other], n=2)[0]
    ev = Vote(prompt=lambda p, parent, cands: "choose " + " ".join(n.text for n in cands), samples=3)
    assert ev.evaluate(lm, "Q", [a, c, b, d], seed=0) == [0.0, 1.0, 1.0, 0.0]
    assert lm.calls[-1] == ("complete", 6)
    assert parse_choice("the best choice is 7", 3) is None


def test_log_prob_scores_proposed_text_with_one_tree_logits_call():
    lm = FakeLM(children={}, answers=lambda p, s: "x;\ny;\n",
                logits=lambda context: {"x": 1.0, "y": 0.0, ";": 2.0, "\n": 2.0})
    task = ScriptTask(evaluator=LogProb(normalize=False), propose=lambda node: "propose " + node.path_text(),
                      config=ScriptConfig(sampling=Sampling(max_tokens=16)))
    result = search(task, BFS(breadth=2, samples=1, depth=1), lm, problem="Q")
    kids = result.tree.root.children
    assert [k.text for k in kids] == ["x;\n", "y;\n"]
    assert kids[0].value > kids[1].value
    assert [c for c in lm.calls if c[0] == "tree_logits"] == [("tree_logits", 6)]


def test_evaluator_errors_name_the_problem():
    lm = FakeLM(children={"Q:": ["a;", "b;", "c;"]}, answers=lambda p, s: "sure")
    _, kids = small_tree(lm)
    with pytest.raises(TaskError, match="ValuePrompt.prompt returned NoneType"):
        ValuePrompt(prompt=lambda p, n: None, labels=LABELS).evaluate(lm, "Q", kids, seed=0)
    with pytest.raises(ValueError, match="needs labels"):
        ValuePrompt(prompt=lambda p, n: "v", labels={})
    with pytest.raises(ValueError, match="samples must be an integer >= 1"):
        Vote(prompt=lambda *a: "v", samples=0)
    with pytest.raises(TaskError, match="tree_logits"):
        LogProb().evaluate(object(), "Q", [_bare_child()], seed=0)


def _bare_child():
    tree = ThoughtTree(None, prompt=[1, 5])
    return tree.add_child(tree.root, [6], "x")


def test_label_probs_is_the_expected_label_score(tiny_model_dir):
    import torch

    from thoughttree import LM, RuntimeConfig, ThoughtTree
    from thoughttree.tasks import LabelProbs, TaskError

    lm = LM.from_pretrained(tiny_model_dir, device="cpu", runtime=RuntimeConfig(num_pages=256))
    tree = ThoughtTree(lm, prompt="the quick brown fox")
    nodes = [tree.root.extend(t) for t in (" jumps", " over the")]
    labels = {"sure": 20.0, "likely": 1.0, "impossible": 0.001}
    evaluator = LabelProbs(prompt=lambda problem, node: f"value: {node.text}\n", labels=labels)
    before = lm.stats.forward_steps
    values = evaluator.evaluate(lm, None, nodes, seed=0)
    assert lm.stats.forward_steps - before == 1, "every node is scored in one forward"
    ids = [lm.encode(label, add_bos=False)[0] for label in labels]
    for node, value in zip(nodes, values):
        probs = lm.tree_logits([lm.encode(f"value: {node.text}\n")])[0].softmax(-1)[ids]
        want = float((probs / probs.sum()) @ torch.tensor(list(labels.values())))
        assert value == pytest.approx(want, rel=1e-5)
    same_start = LabelProbs(prompt=lambda p, n: "value:", labels={"ab": 1.0, "ac": 0.0})
    with pytest.raises(TaskError, match="first tokens differ"):
        same_start.evaluate(FakeLM(), None, nodes, seed=0)  # one token per character: both start with "a"


def _lookahead_lm():
    """Proposals from 'a;' reach x (sure) or y (likely) by seed, from 'b;' only an invalid step."""

    def answers(prompt: str, seed: int) -> str:
        return ("x" if seed % 2 else "y") if prompt == "P a;" else "bad"

    def logits(text: str) -> dict[str, float]:
        return {"V x": {"s": 12.0}, "V y": {"l": 12.0}}.get(text, {"i": 12.0})

    return FakeLM(children={"Q:": ["a;", "b;", "c;"]}, answers=answers, logits=logits)


def _lookahead(samples: int = 8):
    from thoughttree.tasks import LabelProbs, Lookahead

    return Lookahead(
        expand=lambda p, n: None if n.text == "c;" else f"P {n.text}",
        child=lambda p, n, text: None if text == "bad" else f"V {text}",
        leaf=LabelProbs(prompt=lambda p, n: f"V {n.text}", labels=LABELS),
        samples=samples,
    )


def test_lookahead_takes_the_best_child_in_one_batch_each():
    lm = _lookahead_lm()
    tree, kids = small_tree(lm)
    lm.calls.clear()
    a, b, c = _lookahead().evaluate(lm, "Q", kids, seed=tree.seed)
    assert a == pytest.approx(20.0, rel=1e-3), "a's best proposal leads to a sure state"
    assert b == 0.001, "no valid proposal: the lowest value"
    assert c == pytest.approx(0.001, rel=1e-3), "a node not expanded is valued directly"
    assert lm.calls == [("complete", 16), ("tree_logits", 3)], "16 proposals, then each distinct state once"


def test_lookahead_values_do_not_depend_on_the_batch_and_samples_override():
    lm = _lookahead_lm()
    tree, kids = small_tree(lm)
    ev = _lookahead()
    assert ev.evaluate(lm, "Q", kids[:1], seed=tree.seed) == ev.evaluate(lm, "Q", kids, seed=tree.seed)[:1]
    lm.calls.clear()
    ev.evaluate(lm, "Q", kids[:2], seed=tree.seed, samples=3)
    assert lm.calls[0] == ("complete", 6)
    assert ev.bounds == (0.001, 20.0)
    assert ev.evaluate(lm, "Q", [], seed=0) == []
    with pytest.raises(ValueError, match="samples"):
        _lookahead(samples=0)
