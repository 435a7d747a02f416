"""Distinct thoughts: sampling whole continuations without replacement (stochastic beam search)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from thoughttree import LM, RuntimeConfig, Sampling, ThoughtTree
from tiny_models import make_model
from thoughttree.runtime.distinct import _scores, conditioned_gumbels

PROMPT = "the cat sat"


@pytest.fixture(scope="module")
def lm(tiny_model_dir) -> LM:
    return LM.from_pretrained(tiny_model_dir, device="cpu", runtime=RuntimeConfig(page_size=4, num_pages=4096))


@pytest.fixture(scope="module")
def peaked(tmp_path_factory) -> LM:
    """A tiny model with larger weights: its next-token distributions are far from uniform."""
    path = make_model(tmp_path_factory.mktemp("tiny-peaked"), "llama", initializer_range=0.3)
    return LM.from_pretrained(path, device="cpu", runtime=RuntimeConfig(page_size=4, num_pages=4096))


def _expand(lm: LM, seed: int, sampling: Sampling, n: int = 6) -> list[tuple[int, ...]]:
    with ThoughtTree(lm, prompt=PROMPT, seed=seed) as tree:
        kids = tree.expand([tree.root], n=n, sampling=sampling)[0]
        tree.check_integrity()
        return [tuple(k.tokens) for k in kids]


def test_children_are_distinct_and_repeat_under_the_seed(lm: LM) -> None:
    sp = Sampling(max_tokens=3, temperature=0.3, top_k=2, distinct=True)  # 8 sequences, peaked
    first = _expand(lm, 1, sp)
    assert len(first) == 6 and len(set(first)) == 6
    assert _expand(lm, 1, sp) == first
    assert any(_expand(lm, s, sp) != first for s in (2, 3, 4))
    plain = [tuple(t) for t in _expand(lm, 1, Sampling(max_tokens=3, temperature=0.3, top_k=2))]
    assert len(set(plain)) < len(plain)  # the same peaked distribution repeats itself without it
    lm.kv.check_integrity()
    assert lm.kv.num_tokens == 0


def test_fewer_children_only_when_the_space_is_smaller(lm: LM) -> None:
    kids = _expand(lm, 0, Sampling(max_tokens=2, top_k=2, distinct=True), n=6)
    assert sorted(kids) == sorted(set(kids)) and len(kids) == 4


def test_stops_end_a_thought_as_plain_sampling_does(lm: LM) -> None:
    stop = lm.decode([5])
    sp = Sampling(max_tokens=8, temperature=2.0, stop=stop, distinct=True)
    with ThoughtTree(lm, prompt=PROMPT, seed=5) as tree:
        for parent_kids in tree.expand([tree.root], n=12, sampling=sp):
            for kid in parent_kids:
                reason = kid.metadata["finish_reason"]
                assert reason in ("stop", "length", "eos")
                text = lm.decode(kid.tokens)
                if reason == "stop":
                    assert stop in text and stop not in lm.decode(kid.tokens[:-1])
                else:
                    assert stop not in text
                    assert reason != "length" or len(kid.tokens) == 8


def test_distinct_children_share_their_prefix_kv_and_decode_further(lm: LM) -> None:
    sp = Sampling(max_tokens=4, temperature=0.5, top_k=3, distinct=True)
    with ThoughtTree(lm, prompt=PROMPT, seed=2) as tree:
        kids = tree.expand([tree.root], n=5, sampling=sp)[0]
        grand = tree.expand(kids[:2], n=3, sampling=sp)
        ids = [[tuple(g.tokens) for g in gs] for gs in grand]
        for node, gs in zip(kids[:2], grand):
            for g in gs:  # a grandchild's KV path carries its parent's tokens
                path = [t for seg in g.kv.path() for t in seg.tokens]
                assert path == node.path_tokens() + g.tokens
        lm.kv.check_integrity()
        tree.prune(kids[0])
        lm.kv.check_integrity()
    assert all(len(set(x)) == len(x) == 3 for x in ids)
    assert lm.kv.num_tokens == 0


def _sequence_probs(lm: LM, sp: Sampling, length: int) -> dict[tuple[int, ...], float]:
    """Every continuation of ``length`` tokens with its probability under ``sp`` (enumerated)."""
    prompt = lm.encode(PROMPT, add_bos=True)
    probs: dict[tuple[int, ...], float] = {(): 1.0}
    for _ in range(length):
        prefixes = list(probs)
        logp = _scores(lm.tree_logits([prompt + list(p) for p in prefixes]), [sp] * len(prefixes))
        probs = {
            p + (t,): probs[p] * math.exp(v)
            for p, row in zip(prefixes, logp.tolist())
            for t, v in enumerate(row)
            if v > -math.inf
        }
    return probs


def _without_replacement(probs: dict[tuple[int, ...], float], k: int) -> dict[tuple[int, ...], float]:
    """Exact inclusion probability of each sequence in k successive draws without replacement."""
    out = dict.fromkeys(probs, 0.0)
    for order in itertools.permutations(probs, k):
        p, left = 1.0, 1.0
        for y in order:
            p *= probs[y] / left
            left -= probs[y]
        for y in order:
            out[y] += p
    return out


def test_inclusion_frequencies_match_the_model_distribution(peaked: LM) -> None:
    lm = peaked
    sp = Sampling(max_tokens=2, temperature=0.5, top_k=3, ignore_eos=True, distinct=True)
    k, trials = 3, 1500
    probs = _sequence_probs(lm, sp, 2)
    assert len(probs) == 9 and abs(sum(probs.values()) - 1) < 1e-5
    exact = _without_replacement(probs, k)
    groups = [
        g
        for start in range(0, trials, 300)
        for g in lm.complete_distinct([PROMPT] * 300, k, sp, list(range(start, start + 300)))
    ]
    counts = dict.fromkeys(probs, 0)
    estimate = 0.0
    for group in groups:
        assert len({tuple(g.tokens) for g in group}) == k
        for g in group:
            counts[tuple(g.tokens)] += 1
            assert abs(g.extra["sample_logprob"] - math.log(probs[tuple(g.tokens)])) < 1e-3
            estimate += probs[tuple(g.tokens)] / g.extra["inclusion"]
    tolerance = {y: 4 * math.sqrt(exact[y] * (1 - exact[y]) / trials) + 0.005 for y in probs}
    for y in probs:
        assert abs(counts[y] / trials - exact[y]) < tolerance[y], (y, counts[y] / trials, exact[y])
    # The test separates methods: k draws with replacement, duplicates dropped, would fail it.
    with_replacement = {y: 1 - (1 - p) ** k for y, p in probs.items()}
    assert any(abs(with_replacement[y] - exact[y]) > 2 * tolerance[y] for y in probs)
    # Priority-sampling weights p / q estimate the total probability (1) without bias.
    assert abs(estimate / trials - 1) < 0.1
    assert lm.kv.num_tokens == 0


def test_conditioned_gumbels_keep_the_parent_as_their_maximum() -> None:
    gen = torch.Generator().manual_seed(0)
    phi = torch.randn(64, 10, generator=gen).log_softmax(-1)
    phi[:, 7] = -math.inf
    noise = torch.rand(64, 10, generator=gen).clamp(1e-6, 1 - 1e-6)
    parent = torch.randn(64, generator=gen)
    out = conditioned_gumbels(phi, noise, parent)
    assert torch.allclose(out.max(-1).values, parent, atol=1e-5)
    assert torch.isinf(out[:, 7]).all()
    g = phi - torch.log(-torch.log(noise))
    assert torch.equal(out[:, :7].argsort(-1), g[:, :7].argsort(-1))  # the order of the siblings is kept


def test_greedy_distinct_is_a_beam_search_for_the_most_probable(lm: LM) -> None:
    sp = Sampling(max_tokens=2, temperature=0, top_k=3, ignore_eos=True, distinct=True)
    probs = _sequence_probs(lm, sp, 2)
    best = sorted(probs, key=lambda y: -probs[y])[:3]
    got = lm.complete_distinct([PROMPT], 3, sp, [0])[0]
    assert [tuple(g.tokens) for g in got] == best


def test_a_nodes_distinct_children_do_not_depend_on_the_batch(lm: LM) -> None:
    sp = Sampling(max_tokens=3, temperature=0.8, top_k=4, distinct=True)
    with ThoughtTree(lm, prompt=PROMPT, seed=9) as tree:
        a, b = tree.expand([tree.root], n=2, sampling=Sampling(max_tokens=2, distinct=True))[0]
        together = tree.expand([b, a], n=4, sampling=sp)[1]
    with ThoughtTree(lm, prompt=PROMPT, seed=9) as tree:
        a, _ = tree.expand([tree.root], n=2, sampling=Sampling(max_tokens=2, distinct=True))[0]
        alone = tree.expand([a], n=4, sampling=sp)[0]
    assert [k.tokens for k in together] == [k.tokens for k in alone]
    for x, y in zip(together, alone):  # up to the rounding of differently shaped float32 logits
        assert x.metadata["distinct"] == pytest.approx(y.metadata["distinct"], rel=1e-5, abs=1e-6)
