"""Sampling: filters, seeds independent of the batch, stop strings across tokens, EOS, log-probs."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch

from thoughttree import LM, RuntimeConfig, Sampling, ThoughtTree
from thoughttree.runtime.engine import DecodeRequest
from thoughttree.runtime.sampler import sample


@pytest.fixture(scope="module")
def lm(tiny_model_dir) -> LM:
    return LM.from_pretrained(tiny_model_dir, device="cpu", runtime=RuntimeConfig(page_size=4, num_pages=1024))


def _freqs(logits: torch.Tensor, sp: Sampling, n: int = 4000) -> Counter[int]:
    draw = sample(logits.repeat(n, 1), [sp] * n, list(range(n)), [0] * n)
    return Counter(draw.tokens)


LOGITS = torch.tensor([[2.0, 1.5, 1.0, 0.5, 0.0, -1.0, -3.0]])


def test_temperature_sampling_follows_softmax() -> None:
    for temp in (0.5, 1.0, 2.0):
        counts = _freqs(LOGITS, Sampling(temperature=temp))
        want = torch.softmax(LOGITS[0] / temp, dim=0)
        for tok in range(LOGITS.shape[1]):
            assert abs(counts[tok] / 4000 - want[tok].item()) < 0.03, (temp, tok)


def test_filters_restrict_the_support() -> None:
    assert set(_freqs(LOGITS, Sampling(top_k=2))) == {0, 1}
    probs = torch.softmax(LOGITS[0], 0)  # 0.42, 0.25, 0.15, ...: mass before token 2 is 0.67
    assert set(_freqs(LOGITS, Sampling(top_p=0.6))) == {0, 1}
    assert set(_freqs(LOGITS, Sampling(top_p=0.7))) == {0, 1, 2}
    keep = {i for i in range(7) if probs[i] >= 0.3 * probs[0]}
    assert set(_freqs(LOGITS, Sampling(min_p=0.3))) == keep
    assert set(_freqs(LOGITS, Sampling(temperature=0))) == {0}


def test_seed_gives_same_tokens_whatever_the_batch(lm: LM) -> None:
    def build() -> tuple[ThoughtTree, list]:
        tree = ThoughtTree(lm, prompt="the quick brown fox", seed=11)
        return tree, [tree.root.extend(t) for t in (" jumps", " over", " the")]

    sp = Sampling(max_tokens=9, temperature=1.0, ignore_eos=True)
    t1, (a1, b1, c1) = build()
    alone = t1.expand([b1], n=3, sampling=sp)[0]
    t2, (a2, b2, c2) = build()
    mixed = t2.expand([c2, b2, a2], n=3, sampling=sp)[1]
    assert [k.tokens for k in alone] == [k.tokens for k in mixed]
    assert len({tuple(k.tokens) for k in alone}) > 1, "siblings should differ"
    t3, (a3, b3, c3) = build()
    other = t3.expand([b3], n=3, sampling=Sampling(max_tokens=9, temperature=1.0, ignore_eos=True, seed=1))[0]
    assert [k.tokens for k in other] != [k.tokens for k in alone]
    for t in (t1, t2, t3):
        t.prune(t.root)


def test_seed_gives_the_same_subtree_whatever_was_expanded_before(lm: LM) -> None:
    # Node ids follow creation order; seeds follow positions, so a's grandchildren are the same
    # whether b was expanded before a, after it or beside it.
    sp = Sampling(max_tokens=4, temperature=1.0, ignore_eos=True)

    def grandchildren(order: str) -> list[list[int]]:
        tree = ThoughtTree(lm, prompt="the quick brown fox", seed=5)
        a, b = tree.root.extend(" jumps"), tree.root.extend(" runs")
        if order == "b first":
            tree.expand([b], n=2, sampling=sp)
            kids = tree.expand([a], n=2, sampling=sp)[0]
        else:
            kids = tree.expand([a, b] if order == "together" else [b, a], n=2, sampling=sp)[0 if order == "together" else 1]
        out = [k.tokens for k in tree.expand([kids[0]], n=3, sampling=sp)[0]]
        tree.prune(tree.root)
        return out

    want = grandchildren("together")
    assert grandchildren("b first") == want and grandchildren("b beside, first") == want


def test_a_node_expanded_again_gets_the_children_one_larger_call_would_have_given(lm: LM) -> None:
    # A child's seed counts the parent's children before it, so a second call goes on drawing
    # where the first stopped instead of drawing the same children again.
    sp = Sampling(max_tokens=6, temperature=1.0, ignore_eos=True)
    with ThoughtTree(lm, prompt="the quick brown fox", seed=3) as tree:
        twice = [k.tokens for _ in range(2) for k in tree.expand([tree.root], n=2, sampling=sp)[0]]
    with ThoughtTree(lm, prompt="the quick brown fox", seed=3) as tree:
        once = [k.tokens for k in tree.expand([tree.root], n=4, sampling=sp)[0]]
    assert twice == once and len({tuple(t) for t in once}) == 4


def test_the_tree_seed_and_each_roots_place_change_the_draws(lm: LM) -> None:
    sp = Sampling(max_tokens=6, temperature=1.0, ignore_eos=True)

    def kids(seed: int) -> list[list[list[int]]]:
        with ThoughtTree(lm, prompt="the quick brown fox", seed=seed) as tree:
            tree.add_root(tree.root.tokens)  # the same prompt again, as a second root
            return [[k.tokens for k in ks] for ks in tree.expand(tree.roots, n=2, sampling=sp)]

    first, again, other = kids(0), kids(0), kids(1)
    assert first == again
    assert first[0] != first[1], "two roots of one prompt should not draw the same children"
    assert first[0] != other[0] and first[1] != other[1], "the tree seed should change the children"


def test_logprobs_are_the_models(lm: LM) -> None:
    tree = ThoughtTree(lm, prompt="Tree of thoughts", seed=0)
    (kid,) = tree.expand([tree.root], n=1, sampling=Sampling(max_tokens=6, temperature=0.8, ignore_eos=True))[0]
    path = tree.root.tokens + kid.tokens
    logits = lm.tree_logits([path[: len(tree.root.tokens) + i] for i in range(len(kid.tokens))])
    want = torch.log_softmax(logits, -1)[torch.arange(len(kid.tokens)), torch.tensor(kid.tokens)]
    torch.testing.assert_close(torch.tensor(kid.metadata["token_logprobs"]), want, atol=1e-4, rtol=0)
    assert kid.logprob == pytest.approx(float(want.sum()), abs=1e-3)
    tree.prune(tree.root)


def test_stops(lm: LM) -> None:
    tree = ThoughtTree(lm, prompt="value: sure", seed=0)
    free = Sampling(max_tokens=10, temperature=0, ignore_eos=True)
    (ref,) = tree.expand([tree.root], sampling=free)[0]
    assert ref.metadata["finish_reason"] == "length" and len(ref.tokens) == 10
    texts = [lm.decode(ref.tokens[:k]) for k in range(11)]  # text after k tokens
    # A stop string made of the end of one token's text and the start of the next stops right there.
    i = next(
        i for i in range(1, 8)
        if len(texts[i + 1]) > len(texts[i]) > len(texts[i - 1]) and texts[i + 2].startswith(texts[i + 1])
        and len(texts[i + 2]) > len(texts[i + 1])
    )
    stop = texts[i + 1][-1] + texts[i + 2][len(texts[i + 1])]
    if stop in texts[i + 1]:
        pytest.skip("the spanning stop string already occurs earlier in this random text")
    (kid,) = tree.expand([tree.root], sampling=Sampling(max_tokens=10, temperature=0, ignore_eos=True, stop=stop))[0]
    assert kid.tokens == ref.tokens[: i + 2] and kid.metadata["finish_reason"] == "stop"
    assert stop in kid.text and kid.text == lm.decode(kid.tokens)
    j = next(j for j in range(2, 10) if ref.tokens[j] not in ref.tokens[:j])
    sp = Sampling(max_tokens=10, temperature=0, ignore_eos=True, stop_token_ids=(ref.tokens[j],))
    (kid,) = tree.expand([tree.root], sampling=sp)[0]
    assert kid.tokens == ref.tokens[: j + 1] and kid.metadata["finish_reason"] == "stop"
    saved = lm.engine.eos
    lm.engine.eos = {ref.tokens[j]}
    try:
        (kid,) = tree.expand([tree.root], sampling=Sampling(max_tokens=10, temperature=0))[0]
        assert kid.tokens == ref.tokens[: j + 1] and kid.metadata["finish_reason"] == "eos"
        (kid,) = tree.expand([tree.root], sampling=free)[0]
        assert kid.tokens == ref.tokens
    finally:
        lm.engine.eos = saved
    tree.prune(tree.root)


def test_an_ending_token_drawn_at_the_length_limit_keeps_its_reason(lm: LM) -> None:
    # Tasks read "eos" as a finished thought: a last allowed token that is EOS or a stop token
    # ends the generation for that reason, not for its length.
    with ThoughtTree(lm, prompt="value: sure", seed=0) as tree:
        free = Sampling(max_tokens=10, temperature=0, ignore_eos=True)
        (ref,) = tree.expand([tree.root], sampling=free)[0]
        j = next(j for j in range(2, 10) if ref.tokens[j] not in ref.tokens[:j])
        sp = Sampling(max_tokens=j + 1, temperature=0, ignore_eos=True, stop_token_ids=(ref.tokens[j],))
        (kid,) = tree.expand([tree.root], sampling=sp)[0]
        assert kid.tokens == ref.tokens[: j + 1] and kid.metadata["finish_reason"] == "stop"
        saved = lm.engine.eos
        lm.engine.eos = {ref.tokens[j]}
        try:
            (kid,) = tree.expand([tree.root], sampling=Sampling(max_tokens=j + 1, temperature=0))[0]
        finally:
            lm.engine.eos = saved
        assert kid.tokens == ref.tokens[: j + 1] and kid.metadata["finish_reason"] == "eos"


def test_requests_with_different_endings_in_one_call_each_end_as_alone(lm: LM) -> None:
    """One engine call mixing lengths, stop strings (two different tuples), stop tokens and EOS:
    each request's tokens and finish reason equal its own call's."""
    tree = ThoughtTree(lm, prompt="value: sure", seed=0)
    tree.materialize([tree.root])
    root = tree.root
    free = Sampling(max_tokens=12, temperature=0, ignore_eos=True)
    (ref,) = lm.engine.decode([DecodeRequest(root.kv, free, 0)])
    lm.kv.release(ref.segment)
    text = [lm.decode(ref.tokens[:k]) for k in range(13)]
    late = next(k for k in range(6, 12) if text[k + 1][len(text[k]):].strip())  # a token that adds text
    samplings = [
        free,
        Sampling(max_tokens=3, temperature=0, ignore_eos=True),
        Sampling(max_tokens=12, temperature=0, ignore_eos=True, stop=(text[3][-1],)),
        Sampling(max_tokens=12, temperature=0, ignore_eos=True, stop=(text[late + 1][len(text[late]):],)),
        Sampling(max_tokens=12, temperature=0, ignore_eos=True, stop_token_ids=(ref.tokens[5],)),
        Sampling(max_tokens=12, temperature=0),  # ends at EOS if the model writes it
        Sampling(max_tokens=12, temperature=1.0, ignore_eos=True, stop=(text[3][-1],)),
    ]
    requests = [DecodeRequest(root.kv, sp, seed) for seed, sp in enumerate(samplings)]
    together = lm.engine.decode(requests)
    for request, out in zip(requests, together):
        (alone,) = lm.engine.decode([request])
        assert (out.tokens, out.finish_reason, out.text) == (alone.tokens, alone.finish_reason, alone.text)
        lm.kv.release(alone.segment)
    assert {o.finish_reason for o in together} >= {"length", "stop"}
    assert len(together[1].tokens) == 3 and together[4].tokens[-1] == ref.tokens[5]
    for out in together:
        lm.kv.release(out.segment)
    lm.check_integrity(tree)
    tree.prune(tree.root)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(temperature=-1), "temperature"),
        (dict(top_p=0), "top_p"),
        (dict(top_p=1.5), "top_p"),
        (dict(top_k=-2), "top_k"),
        (dict(min_p=1.0), "min_p"),
        (dict(max_tokens=0), "max_tokens"),
        (dict(stop=("",)), "stop"),
        (dict(stop=b"\n"), "stop must be a non-empty string or a list of them"),
        (dict(stop=["a", 3]), "stop must be"),
        (dict(stop_token_ids="12"), "stop_token_ids must be a list of token ids"),
        (dict(stop_token_ids=[-1]), "stop_token_ids"),
        (dict(ignore_eos="no"), "ignore_eos must be True or False"),
        (dict(temperature="1"), "temperature"),
        (dict(temperature=float("nan")), "temperature"),
        (dict(seed=1.0), "seed must be an integer"),
        (dict(seed="a"), "seed must be an integer"),
        (dict(max_tokens=True), "max_tokens"),
    ],
)
def test_invalid_sampling_values(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Sampling(**kwargs)


def test_numpy_integers_are_taken_as_python_ones() -> None:
    # A seed hashes its repr: numpy's 3 must seed as Python's 3 does.
    sampling = Sampling(max_tokens=np.int64(5), seed=np.int64(3), stop_token_ids=[np.int64(7)], stop=["x"])
    assert sampling == Sampling(max_tokens=5, seed=3, stop_token_ids=(7,), stop=("x",))
    assert type(sampling.seed) is int and repr(sampling.seed) == "3"


def test_batch_decode_equals_decode(lm) -> None:
    lists = [[5, 6, 7], [1, 2, 40, 41], [], [100, 3]]
    assert lm.decode_batch(lists) == [lm.decode(t) for t in lists]


def test_a_prompt_asked_several_times_is_tokenized_once_and_sampled_per_seed(lm, monkeypatch) -> None:
    sp = Sampling(max_tokens=6, temperature=1.0, ignore_eos=True)
    alone = [lm.complete([p], sp, [s])[0].tokens for p, s in (("4 5 6", 1), ("4 5 6", 2), ("1 2", 3))]
    calls = []
    encode_batch = lm.encode_batch
    monkeypatch.setattr(lm, "encode_batch", lambda texts, **kw: calls.append(list(texts)) or encode_batch(texts, **kw))
    together = lm.complete(["4 5 6", "4 5 6", "1 2"], sp, [1, 2, 3])
    assert calls == [["4 5 6", "1 2"]]  # each distinct prompt once, in one call
    assert [g.tokens for g in together] == alone
    assert alone[0] != alone[1]  # the two samples of one prompt differ by their seeds
