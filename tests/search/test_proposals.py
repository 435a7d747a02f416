"""Completions remembered for one search: what a look-ahead decoded is not decoded again."""

from __future__ import annotations

import pytest
from fakes import FakeLM, ScriptConfig, ScriptTask

from thoughttree import LM, RuntimeConfig, Sampling
from thoughttree.search.driver import search
from thoughttree.search.proposals import RememberedCompletions
from thoughttree.strategies import BFS
from thoughttree.tasks import LabelProbs, Lookahead

PROMPTS = ["the quick brown fox", "a tree of thoughts"]
SAMPLING = Sampling(max_tokens=6, temperature=1.0, distinct=True)


@pytest.fixture(scope="module")
def lm(tiny_model_dir):
    return LM.from_pretrained(tiny_model_dir, device="cpu", runtime=RuntimeConfig(num_pages=256))


def _texts(groups):
    return [[g.tokens for g in group] for group in groups]


def test_the_first_n_distinct_samples_of_a_larger_request_are_a_request_for_n(lm):
    small = lm.complete_distinct(PROMPTS, 3, SAMPLING, [5, 6])
    memo = RememberedCompletions(lm)
    memo.complete_distinct(PROMPTS, 7, SAMPLING, [5, 6])
    before = lm.stats.generated_tokens
    again = memo.complete_distinct(PROMPTS, 3, SAMPLING, [5, 6])
    assert lm.stats.generated_tokens == before, "answered from the larger request, nothing decoded"
    assert _texts(again) == _texts(small)
    for got, want in zip(again, small):
        for g, w in zip(got, want):
            assert g.extra["threshold"] == pytest.approx(w.extra["threshold"], abs=1e-9)
            assert g.extra["inclusion"] == pytest.approx(w.extra["inclusion"], abs=1e-9)
            assert g.extra["perturbed"] == pytest.approx(w.extra["perturbed"], abs=1e-9)


def test_a_larger_request_or_another_seed_is_decoded(lm):
    memo = RememberedCompletions(lm)
    memo.complete_distinct(PROMPTS[:1], 2, SAMPLING, [5])
    before = lm.stats.generated_tokens
    more = memo.complete_distinct(PROMPTS[:1], 4, SAMPLING, [5])
    assert lm.stats.generated_tokens > before
    assert _texts(more) == _texts(lm.complete_distinct(PROMPTS[:1], 4, SAMPLING, [5]))
    before = lm.stats.generated_tokens
    memo.complete_distinct(PROMPTS[:1], 4, SAMPLING, [9])
    assert lm.stats.generated_tokens > before


def test_sampled_completions_are_remembered_per_prompt_and_seed(lm):
    sampling = Sampling(max_tokens=5, temperature=1.0)
    memo = RememberedCompletions(lm)
    first = memo.complete(PROMPTS, sampling, [1, 2])
    before = lm.stats.generated_tokens
    assert [g.tokens for g in memo.complete(PROMPTS[::-1], sampling, [2, 1])] == [g.tokens for g in first[::-1]]
    assert lm.stats.generated_tokens == before
    mixed = memo.complete(PROMPTS, sampling, [1, 3])
    assert mixed[0].tokens == first[0].tokens
    assert lm.stats.generated_tokens - before == len(mixed[1].tokens), "only the new seed decoded"
    assert mixed[1].tokens == lm.complete(PROMPTS[1:], sampling, [3])[0].tokens
    with pytest.raises(ValueError, match="one seed per prompt"):
        memo.complete(PROMPTS, sampling, [1])
    assert memo.stats is lm.stats, "everything else is the model's"


def test_a_search_takes_the_look_ahead_proposals_as_children():
    """BFS with a look-ahead over the task's own propose prompt: expanding a valued node decodes nothing."""

    def answers(prompt: str, seed: int) -> str:
        return "abcdefgh"[seed % 8] + ";"

    lm = FakeLM(answers=answers, logits=lambda text: {"s": 12.0} if text.endswith("a;") else {"i": 12.0})
    sampling = Sampling(max_tokens=4, temperature=1.0, stop=(";",))
    propose = lambda node: "P " + node.path_text(include_root=False)  # noqa: E731
    lookahead = Lookahead(
        expand=lambda problem, node: propose(node) if node.depth < 2 else None,
        child=lambda problem, node, text: "V " + text,
        leaf=LabelProbs(prompt=lambda problem, node: "V " + node.text, labels={"s": 1.0, "i": 0.0}),
        samples=4,
        sampling=sampling,
    )
    task = ScriptTask(evaluator=lookahead, propose=propose, config=ScriptConfig(sampling=sampling))
    result = search(task, BFS(breadth=2, samples=3, depth=3), lm, problem="Q")
    rounds = result.statistics.per_round
    assert rounds[0].expand.generated_tokens > 0, "the root's proposals are decoded"
    assert rounds[0].evaluate.generated_tokens > 0, "so are the look-ahead's"
    assert rounds[1].expanded == 2 and rounds[1].new_nodes > 0
    assert rounds[1].expand.generated_tokens == 0, "the kept nodes' children are their look-ahead proposals"
