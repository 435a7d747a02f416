"""Verification of draft chains and trees on the decode buffers (:class:`VerifyBatch`) keeps plain
decoding's tokens, frees what it does not keep and plans once per node count, not once per step.

On the CPU the fixed buffers run their Triton kernels in the interpreter (float16, one layer):
each case decodes a few short branches. A scripted drafter proposes each branch's true
continuation (from a plain run), made wrong from a depth that changes every call, so runs of
every length are kept, finishes fall inside them and some drafts are wrong from their first
token. For trees, a wrong sibling stands before each true node, so a kept path is never the
first nodes of the draft and its KV has to move.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import pytest
import torch

from tiny_models import make_model, prefill_on_pytorch
from thoughttree import LM, RuntimeConfig, Sampling, Speculative, ThoughtTree
from thoughttree.runtime.engine import DecodeRequest
from thoughttree.runtime.speculative import Branch, CostModel, DraftModel, DraftTree
from thoughttree.search.driver import search
from thoughttree.strategies import BFS
from thoughttree.tasks import Task, TaskConfig, Verifier

CUDA = torch.cuda.is_available()
PROMPT = list(range(3, 16))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_model(tmp_path_factory.mktemp("verify"), "llama", num_hidden_layers=1)


def _lm(path, *, fast: bool = True, num_pages: int = 1024) -> LM:
    rc = RuntimeConfig(page_size=4, num_pages=num_pages, attention="deft")
    lm = LM.from_pretrained(path, device="cuda" if CUDA else "cpu", dtype="bfloat16" if CUDA else "float16", runtime=rc)
    lm.model.fused = fast
    lm.engine.after_step = lambda: lm.kv.check_integrity()  # no draft KV left behind, none freed that is read
    return lm


class Scripted:
    """Proposes each branch's true next tokens, wrong from a depth that cycles with every call;
    ``fork`` adds a second child under the first node now and then (a tree, not a chain)."""

    def __init__(self, truth: Sequence[Sequence[int]], vocab: int, fork: bool = False) -> None:
        self.truth, self.vocab, self.fork, self.calls = truth, vocab, fork, 0

    def begin(self, kv, branches: Sequence[Branch]) -> None:
        pass

    def propose(self, branches: Sequence[Branch], max_nodes: int, max_depth: int) -> list[DraftTree]:
        out = []
        for b in branches:
            n = len(b.generated)
            true = list(self.truth[b.key][n : n + max_depth])
            wrong_from = self.calls % (max_depth + 2)
            self.calls += 1
            d = DraftTree()
            for k, t in enumerate(true):
                d.add(k - 1, t if k < wrong_from else (t + 1) % self.vocab, 0.9 - 0.01 * k)
            if self.fork and true and self.calls % 3 == 0:
                d.add(0, (true[1] + 2) % self.vocab if len(true) > 1 else 1, 0.5)
            out.append(d)
        return out

    def accepted(self, branch: Branch, tokens: Sequence[int]) -> None:
        pass

    def end(self) -> None:
        pass


def _decode(lm: LM, samplings: Sequence[Sampling]) -> list[tuple]:
    tree = ThoughtTree(lm, prompt=PROMPT, seed=0)
    prefill_on_pytorch(lm, tree, [tree.root])
    outs = lm.engine.decode([DecodeRequest(tree.root.kv, s, 11 * k) for k, s in enumerate(samplings)])
    got = [(o.tokens, o.finish_reason) for o in outs]
    logprobs = [o.logprobs for o in outs]
    for o in outs:
        lm.kv.release(o.segment)
    lm.check_integrity(tree)
    tree.release_kv()
    return got, logprobs


def _speculating(
    samplings: Sequence[Sampling], drafter, depth: int = 4, nodes: int | None = None, shape: str = "chain"
) -> list[Sampling]:
    spec = Speculative(drafter=drafter, shape=shape, adaptive=False, max_depth=depth, max_nodes=nodes or depth)
    return [dataclasses.replace(s, speculative=spec) for s in samplings]


def test_chain_drafts_verified_on_fixed_buffers_keep_plain_tokens(model_dir) -> None:
    lm = _lm(model_dir)
    vocab = lm.model.cfg.vocab_size
    plain = [
        Sampling(max_tokens=12, temperature=0.0, ignore_eos=True),
        Sampling(max_tokens=7, temperature=1.0, top_k=20, ignore_eos=True),  # drawn after a filter, on the host
        Sampling(max_tokens=12, temperature=1.0, ignore_eos=True),
    ]
    want, want_lp = _decode(lm, plain)
    truth = [tokens for tokens, _ in want]
    # Finishes inside kept drafts: a stop token (greedy row), a stop string (filtered row) and EOS
    # (a sampled row) mid-run.
    text = lm.engine.detokenize(truth[1])
    stop = text[len(text) // 2 : len(text) // 2 + 2]
    assert stop.strip()
    ends = [
        Sampling(max_tokens=12, temperature=0.0, ignore_eos=True, stop_token_ids=(truth[0][5],)),
        dataclasses.replace(plain[1], stop=(stop,)),
        Sampling(max_tokens=12, temperature=1.0),
    ]
    eos = lm.engine.eos
    lm.engine.eos = {truth[2][4]}
    try:
        want_ends, _ = _decode(lm, ends)
        got_ends, _ = _decode(lm, _speculating(ends, Scripted(truth, vocab)))
    finally:
        lm.engine.eos = eos
    assert got_ends == want_ends and [r for _, r in got_ends] == ["stop", "stop", "eos"]
    before = (lm.stats.fast_steps, lm.stats.speculative_steps, lm.stats.accepted_tokens, lm.stats.plan_builds)
    got, got_lp = _decode(lm, _speculating(plain, Scripted(truth, vocab), depth=2))
    assert got == want
    for a, b in zip(got_lp, want_lp):
        assert a == pytest.approx(b, abs=2e-2)
    fast, spec, accepted, plans = (
        a - b
        for a, b in zip(
            (lm.stats.fast_steps, lm.stats.speculative_steps, lm.stats.accepted_tokens, lm.stats.plan_builds), before
        )
    )
    # Every step verifies on the fixed buffers, the first one included (the prompt's KV is
    # stored); drafts were kept; the tree was planned up front and at most once per level count
    # (0-2), not per step.
    assert fast == spec and accepted > 0 and fast > 0
    assert plans <= 1 + 3 < spec


class Decoys(Scripted):
    """As :class:`Scripted`, with a wrong sibling before every node of the true path (scored
    above it now and then, so shapes that order by score put it first too)."""

    def propose(self, branches: Sequence[Branch], max_nodes: int, max_depth: int) -> list[DraftTree]:
        out = []
        for chain in super().propose(branches, max_nodes, max_depth):
            d, at = DraftTree(), -1
            for k, (t, score) in enumerate(zip(chain.tokens, chain.scores)):
                d.add(at, (t + 3) % self.vocab, score + (0.05 if (self.calls + k) % 2 else -0.3))
                at = d.add(at, t, score)
            out.append(d)
        return out


@pytest.mark.parametrize("shape", ["dynamic", "tree"])
def test_tree_drafts_verified_on_fixed_buffers_keep_plain_tokens(model_dir, shape: str) -> None:
    lm = _lm(model_dir)
    plain = [
        Sampling(max_tokens=10, temperature=0.0, ignore_eos=True),
        Sampling(max_tokens=9, temperature=1.0, top_k=20, ignore_eos=True),
        Sampling(max_tokens=10, temperature=1.0, ignore_eos=True),
    ]
    want, want_lp = _decode(lm, plain)
    truth = [t for t, _ in want]
    stop = [dataclasses.replace(plain[0], stop_token_ids=(truth[0][6],)), *plain[1:]]
    want_stop, _ = _decode(lm, stop)
    before = (lm.stats.fast_steps, lm.stats.forward_steps, lm.stats.accepted_tokens)
    drafter = Decoys(truth, lm.model.cfg.vocab_size)
    got, got_lp = _decode(lm, _speculating(plain, drafter, depth=3, nodes=6, shape=shape))
    got_stop, _ = _decode(lm, _speculating(stop, drafter, depth=3, nodes=6, shape=shape))
    assert got == want and got_stop == want_stop and got_stop[0][1] == "stop"
    for a, b in zip(got_lp, want_lp):
        assert a == pytest.approx(b, abs=2e-2)
    fast, steps, accepted = (
        a - b for a, b in zip((lm.stats.fast_steps, lm.stats.forward_steps, lm.stats.accepted_tokens), before)
    )
    # Each of the two calls has its prefill; every step after it runs on the fixed buffers, the
    # first one included (verifying trees, or plain where no branch has room left to draft), and
    # paths were kept (each through a node after its decoy sibling, so its KV was moved).
    assert fast == steps - 2 and accepted > 0


@pytest.mark.parametrize("shape", ["chain", "dynamic"])
def test_a_first_step_on_the_fixed_buffers_writes_each_parents_last_kv_once(model_dir, shape: str) -> None:
    """Children of just-decoded nodes (whose last token has no KV yet), three per parent: the
    speculating call's first step runs on the fixed buffers too, one row per parent writes that
    token's KV, and the children are those of plain decoding."""
    lm = _lm(model_dir)
    first = Sampling(max_tokens=5, temperature=1.0, ignore_eos=True)
    then = Sampling(max_tokens=9, temperature=1.0, ignore_eos=True)
    grown = []
    for drafter in (None, "scripted"):
        tree = ThoughtTree(lm, prompt=PROMPT, seed=4)
        prefill_on_pytorch(lm, tree, [tree.root])
        kids = tree.expand([tree.root], n=2, sampling=first)[0]
        assert all(k.kv.written < len(k.kv.tokens) for k in kids)
        sampling = then
        if drafter is not None:
            truth = [t for t in grown[0]]
            sampling = _speculating([then], Scripted(truth, lm.model.cfg.vocab_size), depth=3, nodes=4, shape=shape)[0]
        before = (lm.stats.fast_steps, lm.stats.forward_steps)
        grand = tree.expand(kids, n=3, sampling=sampling)
        fast, steps = lm.stats.fast_steps - before[0], lm.stats.forward_steps - before[1]
        assert fast == steps  # no general forward, the first step included
        grown.append([g.tokens for gs in grand for g in gs])
        lm.check_integrity(tree)
        tree.release_kv()
    assert grown[0] == grown[1]


class Digits(Task):
    """Continue a numbers prompt, each node valued by the digits on its path (no model call)."""

    def __init__(self, sampling: Sampling) -> None:
        self.config = TaskConfig(sampling=sampling)

    def prompt(self, problem: str) -> str:
        return f"Use {problem} to make 24.\n"

    def evaluator(self) -> Verifier:
        return Verifier(lambda problem, node: sum(ch.isdigit() for ch in node.path_text(include_root=False)) / 10)

    def is_terminal(self, problem: str, node) -> bool:
        return node.depth >= 2

    def answer(self, problem: str, node) -> str | None:
        return node.path_text(include_root=False).strip() or None


def test_a_search_verifying_on_the_fixed_buffers_returns_the_plain_tree(arch_model_dir) -> None:
    """BFS with every expansion's draft trees verified on the decode buffers, drafted by the
    target's own weights on the PyTorch layers: the tree is the one plain decoding grows, on
    every supported architecture."""
    path = arch_model_dir[1]
    lm = _lm(path)
    twin = LM.from_pretrained(path, device="cpu", dtype="float16", runtime=RuntimeConfig(page_size=4, num_pages=1024))
    task = Digits(Sampling(max_tokens=6, temperature=0.0, ignore_eos=True))
    plain = search(task, BFS(breadth=2, samples=2, depth=2), lm, problem="4 5 6 10", seed=2).tree
    before = (lm.stats.fast_steps, lm.stats.speculative_steps, lm.stats.accepted_tokens)
    lm.speculative = Speculative(drafter=DraftModel(twin), shape="dynamic", adaptive=False, max_depth=3, max_nodes=4)
    drafted = search(task, BFS(breadth=2, samples=2, depth=2), lm, problem="4 5 6 10", seed=2).tree
    lm.speculative = None
    fast, spec, accepted = (
        a - b for a, b in zip((lm.stats.fast_steps, lm.stats.speculative_steps, lm.stats.accepted_tokens), before)
    )
    assert [(n.parent.id if n.parent else -1, n.tokens) for n in drafted.nodes] == [
        (n.parent.id if n.parent else -1, n.tokens) for n in plain.nodes
    ]
    # The plain tree holds the prompt's KV, so every step ran on the fixed buffers, the first ones included.
    assert spec > 0 and fast == spec and accepted > 0
    lm.check_integrity(plain, drafted)


def test_a_batch_for_chains_refuses_a_tree(model_dir) -> None:
    from thoughttree.runtime.verify_batch import VerifyBatch

    lm = _lm(model_dir)
    tree = ThoughtTree(lm, prompt=PROMPT, seed=0)
    prefill_on_pytorch(lm, tree, [tree.root])
    request = DecodeRequest(tree.root.kv, Sampling(max_tokens=8, temperature=0.0, ignore_eos=True), 0)
    tail = lm.kv.open_child(tree.root.kv)
    lm.kv.append_each([tail], [5])
    batch = VerifyBatch(lm.engine, [0], [request], [tail], depth=4)
    with pytest.raises(ValueError, match="tree=True"):
        batch.verify([0], {0: [1, 2]}, {0: [-1, -1]})
    with pytest.raises(ValueError, match="earlier node"):
        VerifyBatch(lm.engine, [0], [request], [tail], depth=4, tree=True).verify([0], {0: [1, 2]}, {0: [-1, 1]})
    lm.kv.release(tail)
    tree.release_kv()


def test_drafts_without_room_in_the_pool_are_dropped(model_dir) -> None:
    # Pages of 4 tokens: the prompt takes 4; two branches of 8 tokens need 2 each, 3 with a placeholder
    # page; drafts of up to 4 more need more than the pool has left at some steps.
    lm = _lm(model_dir, num_pages=10)
    plain = [Sampling(max_tokens=8, temperature=0.0, ignore_eos=True)] * 2
    want, _ = _decode(lm, plain)
    got, _ = _decode(lm, _speculating(plain, Scripted([t for t, _ in want], lm.model.cfg.vocab_size)))
    assert got == want


def test_levels_follow_acceptance_and_row_cost() -> None:
    cost = CostModel(explore_every=10**9)
    for rows, seconds in ((8, 0.010), (16, 0.011), (32, 0.013), (64, 0.017)):
        cost.record_step(rows, seconds)  # 1/8 ms a row over a 9 ms step: rows are cheap
    sure = [[(0.95, d) for d in range(1, 5)]] * 8
    for _ in range(50):
        cost.record_acceptance([0.95] * 4, [1, 2, 3, 4], [True] * 4)
    assert cost.levels(8, sure, adaptive=True) == 4
    never = CostModel(explore_every=10**9)
    for rows, seconds in ((8, 0.010), (64, 0.060)):  # rows are dear
        never.record_step(rows, seconds)
    for _ in range(50):
        never.record_acceptance([0.95] * 4, [1, 2, 3, 4], [False] * 4)
    assert never.levels(8, sure, adaptive=True) == 0
    assert never.levels(8, sure, adaptive=False) == 4 and never.levels(8, [[]], adaptive=True) == 0


def test_drafts_must_also_pay_for_the_overlap_plain_steps_keep() -> None:
    """One branch on a GPU: rows are nearly free, so a draft kept one time in five pays for its
    row; but once plain steps are measured 1.4 ms faster than a verification step of the same
    rows (they overlap the host's work), it no longer does, and the drafter is not asked."""
    cost = CostModel(explore_every=10**9)
    for rows, seconds in ((1, 0.0070), (2, 0.00701), (5, 0.00703), (9, 0.00706)):
        cost.record_step(rows, seconds)
    for k in range(40):
        cost.record_acceptance([0.9], [1], [k % 5 == 0])
    chains = [[(0.9, 1)]]
    assert cost.levels(1, chains, adaptive=True) == 1 and cost.worth_drafting(1)
    cost.record_plain(1, 0.0056)
    assert cost.levels(1, chains, adaptive=True) == 0 and not cost.worth_drafting(1)
    fresh = CostModel()
    fresh.record_plain(1, 0.001)  # no verification step measured yet: nothing to compare with
    assert fresh._plain_gain == 0.0
