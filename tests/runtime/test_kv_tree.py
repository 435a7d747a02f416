"""KV pool and KV tree invariants under random fork / extend / expand / prune sequences."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from thoughttree import LM, RuntimeConfig, Sampling, Status, ThoughtTree
from thoughttree.runtime import KVPool, KVPoolExhausted, KVTree

PAGE = 4


@pytest.fixture(scope="module")
def lm(tiny_model_dir) -> LM:
    return LM.from_pretrained(tiny_model_dir, device="cpu", runtime=RuntimeConfig(page_size=PAGE, num_pages=600))


OPS = st.lists(
    st.tuples(st.sampled_from(["expand", "extend", "prune", "materialize", "logits"]), st.integers(0, 10**6), st.integers(1, 3)),
    min_size=1,
    max_size=10,
)
WORDS = [" jumps", " over the", " 10 - 4 = 6", "\n", " sure"]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS, seed=st.integers(0, 100))
def test_random_tree_edits_keep_invariants(lm: LM, ops, seed: int) -> None:
    tree = ThoughtTree(lm, prompt="the quick brown fox", seed=seed)
    other = ThoughtTree(lm, prompt="the quick brown dog", seed=seed)  # shares a radix prefix with tree
    other.materialize()
    for op, pick, n in ops:
        live = [x for x in tree.nodes if x.alive]
        if not live:
            break
        node = live[pick % len(live)]
        if op == "expand":
            tree.expand([node] + live[:1] if node is not live[0] else [node], n=n, sampling=Sampling(max_tokens=n + 1, ignore_eos=True))
        elif op == "extend":
            node.extend(WORDS[pick % len(WORDS)])
        elif op == "prune" and not node.is_root:
            tree.prune(node)
        elif op == "materialize":
            tree.materialize([node])
        elif op == "logits":
            lm.tree_logits([node.path_tokens(), other.root.tokens + [5, 6]])
        lm.check_integrity(tree, other)
    tree.prune(tree.root)
    other.prune(other.root)
    lm.check_integrity(tree, other)
    assert lm.kv.pool.num_used == 0 and not lm.kv.segments, "a fully pruned tree returns every page"


def test_memory_is_unique_tokens_plus_one_partial_page_per_segment(lm: LM) -> None:
    tree = ThoughtTree(lm, prompt="Tree of thoughts search expands many branches at once.", seed=0)
    kids = tree.expand([tree.root], n=4, sampling=Sampling(max_tokens=7, ignore_eos=True))[0]
    for k in kids:
        k.extend(" 10 - 4 = 6")
    tree.expand(kids[:2], n=3, sampling=Sampling(max_tokens=5, ignore_eos=True))
    tree.materialize()
    unique = sum(len(x.tokens) for x in tree.nodes)
    assert lm.kv.num_tokens == unique
    segments = len(lm.kv.segments)
    used = lm.kv.pool.num_used * PAGE
    assert unique <= used < unique + segments * PAGE
    lm.check_integrity(tree)
    tree.prune(tree.root)
    assert lm.kv.pool.num_used == 0


def test_equal_prompts_are_stored_once(lm: LM) -> None:
    a = ThoughtTree(lm, prompt="value: sure likely impossible. answer: 24")
    b = ThoughtTree(lm, prompt="value: sure likely impossible. answer: 25")
    a.materialize(), b.materialize()
    shared = len(a.root.tokens) - 1
    assert lm.kv.num_tokens == len(a.root.tokens) + len(b.root.tokens) - shared
    lm.check_integrity(a, b)
    a.prune(a.root)
    lm.check_integrity(a, b)
    assert lm.kv.num_tokens == len(b.root.tokens)
    b.prune(b.root)
    assert lm.kv.pool.num_used == 0


@settings(max_examples=60, deadline=None)
@given(seqs=st.lists(st.lists(st.integers(0, 2), min_size=1, max_size=40), min_size=1, max_size=8))
def test_inserted_sequences_share_exactly_their_common_prefixes(seqs: list[list[int]]) -> None:
    """Tokens stored = distinct prefixes of the inserted sequences (a trie's size), and each
    sequence reads back whole from its tail's path, whatever order the splits happen in."""
    kv = KVTree(KVPool(1, 400, PAGE, 1, 4, dtype=torch.float32, device="cpu"))
    tails = [kv.insert(None, list(seq)) for seq in seqs]
    assert kv.num_tokens == len({tuple(seq[:n]) for seq in seqs for n in range(1, len(seq) + 1)})
    for seq, tail in zip(seqs, tails):
        assert [t for s in tail.path() for t in s.tokens] == seq
    for tail in tails:
        kv.release(tail)
    assert kv.pool.num_used == 0


def test_a_generated_child_is_shared_by_later_sequences_through_it(lm: LM) -> None:
    # Decoding seals a child's segment, so a sequence that runs through it reuses its KV and
    # stores only what follows.
    with ThoughtTree(lm, prompt="the quick brown fox", seed=0) as tree:
        (kid,) = tree.expand([tree.root], sampling=Sampling(max_tokens=6, ignore_eos=True))[0]
        tokens, prefill = lm.kv.num_tokens, lm.stats.prefill_tokens
        lm.tree_logits([kid.path_tokens() + [5]])
        assert lm.stats.prefill_tokens - prefill == 1 and lm.kv.num_tokens == tokens
        lm.check_integrity(tree)


def test_pool_exhaustion_is_clear_and_recoverable(tiny_model_dir) -> None:
    small = LM.from_pretrained(tiny_model_dir, device="cpu", runtime=RuntimeConfig(page_size=PAGE, num_pages=12))
    tree = ThoughtTree(small, prompt="the quick brown fox", seed=0)
    sp = Sampling(max_tokens=12, ignore_eos=True)
    kids = tree.expand([tree.root], n=2, sampling=sp)[0]
    before = len(tree)
    with pytest.raises(KVPoolExhausted, match=r"pages in use .* tokens in all"):
        tree.expand(kids, n=3, sampling=sp)
    assert len(tree) == before
    small.check_integrity(tree)
    tree.prune(kids[1])
    assert kids[1].status is Status.PRUNED
    (more,) = tree.expand([kids[0]], n=1, sampling=Sampling(max_tokens=4, ignore_eos=True))
    assert len(more[0].tokens) == 4
    small.check_integrity(tree)


def test_pool_refuses_double_release() -> None:
    pool = KVPool(1, 4, PAGE, 1, 8, dtype=__import__("torch").float32, device="cpu")
    kv = KVTree(pool)
    seg = kv.insert(None, [1, 2, 3, 4, 5])
    assert pool.num_used == 2
    kv.release(seg)
    assert pool.num_used == 0
    with pytest.raises(RuntimeError, match="more often"):
        pool.release(0)


def test_a_dropped_lm_is_freed_at_once(tiny_model_dir) -> None:
    """Nothing an LM builds holds the LM itself, so dropping the last reference frees it (and its
    KV pool, and on a GPU its graphs) without waiting for the cycle collector."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        lm = LM.from_pretrained(tiny_model_dir, device="cpu", runtime=RuntimeConfig(page_size=PAGE, num_pages=64))
        lm.tree_logits([lm.encode("the quick brown"), lm.encode("the quick fox")])
        ref = weakref.ref(lm)
        del lm
        assert ref() is None
    finally:
        if collecting:
            gc.enable()


def test_append_each_takes_a_page_where_one_is_full_and_changes_nothing_when_short() -> None:
    pool = KVPool(1, 4, PAGE, 1, 8, dtype=torch.float32, device="cpu")
    kv = KVTree(pool)
    root = kv.insert(None, [1, 2, 3])  # one page
    a, b = kv.open_child(root), kv.open_child(root)
    for token in range(PAGE):
        kv.append_each([a, b], [10 + token, 20 + token])
    assert a.tokens == [10, 11, 12, 13] and b.tokens == [20, 21, 22, 23]
    assert pool.num_used == 3 and a.slots == list(range(a.slots[0], a.slots[0] + PAGE)) and a.slots[0] % PAGE == 0
    # Both segments need a new page and one is free: neither grows.
    with pytest.raises(KVPoolExhausted):
        kv.append_each([a, b], [14, 24])
    assert len(a.tokens) == len(a.slots) == PAGE and len(b.tokens) == len(b.slots) == PAGE and pool.num_used == 3
    kv.append_each([a], [14])
    assert a.slots[-1] % PAGE == 0 and pool.num_used == 4
    for seg in (a, b, root):
        kv.release(seg)
    kv.check_integrity()
    assert pool.num_used == 0


def test_slot_array_follows_a_segment_cut_and_grown_back_onto_other_pages() -> None:
    pool = KVPool(1, 8, PAGE, 1, 8, dtype=torch.float32, device="cpu")
    kv = KVTree(pool)
    root = kv.insert(None, [1, 2, 3])
    seg, other = kv.open_child(root), kv.open_child(root)
    kv.extend(seg, list(range(2 * PAGE)))
    before = seg.slot_array.copy()
    kv.truncate(seg, PAGE)  # frees the second page
    kv.extend(other, [5])  # which the other segment takes
    kv.extend(seg, list(range(PAGE)))  # back to the same length, on another page
    assert seg.slot_array.tolist() == seg.slots and seg.slots[PAGE:] != before[PAGE:].tolist()
    for s in (seg, other, root):
        kv.release(s)
    kv.check_integrity()


@pytest.mark.parametrize("keep", [0, 1, 3, 4, 5, 9])
def test_truncate_keeps_the_first_tokens_and_frees_only_pages_they_leave(keep: int) -> None:
    pool = KVPool(1, 8, PAGE, 1, 8, dtype=torch.float32, device="cpu")
    kv = KVTree(pool)
    root = kv.insert(None, [1, 2, 3])
    seg = kv.open_child(root)
    kv.append_each([seg], [100])
    kv.extend(seg, [101, 102, 103, 104, 105])  # fills the first page, then takes a second
    kv.extend(seg, [])
    kv.extend(seg, [106, 107, 108, 109])  # three pages: 4 + 4 + 2 tokens
    assert all(b == a + 1 for a, b in zip(seg.slots, seg.slots[1:]) if b % PAGE)
    seg.written = 10
    slots = list(seg.slots)
    kv.truncate(seg, keep)
    assert seg.tokens == [100 + t for t in range(keep)] and seg.slots == slots[:keep] and seg.written == keep
    assert pool.num_used == 1 + -(-keep // PAGE)
    kv.check_integrity()
    kv.append_each([seg], [7])  # the next token takes the slot after the last kept one
    with pytest.raises(KVPoolExhausted):
        kv.extend(seg, list(range(PAGE * 8)))
    assert len(seg.tokens) == len(seg.slots) == keep + 1
    assert seg.slots[-1] == (slots[keep] if keep % PAGE else seg.slots[-1]) and seg.slots[-1] % PAGE == keep % PAGE
    for s in (seg, root):
        kv.release(s)
    kv.check_integrity()
    assert pool.num_used == 0
