"""DeFT and per-sequence Triton kernels against the fp32 reference.

On CPU the kernels run in the Triton interpreter (small shapes, float16 only: the interpreter's
tl.dot is wrong for bfloat16); the ``gpu`` tests repeat the checks at real sizes on CUDA.
"""

from __future__ import annotations

import zlib
from dataclasses import replace

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from thoughttree.kernels import TileConfig, WorkConfig, deft_tree_attention, per_sequence_attention, tree_attention
from thoughttree.kernels import deft_ws
from thoughttree.kernels.deft import deft_work, merge_heads

from tree_cases import assert_close_to_reference, build, leaves, tree_shape

CPU = dict(d=64, dtype=torch.float16, device="cpu")
# Many chunks per node, every tile size; leaves of one query keep their partial items.
SMALL_CHUNKS = WorkConfig(waves=4.0, num_sms=32, min_chunk=16, wide_tiles=(0, 0), fold_unshared=False)
ALL_SHARED = WorkConfig(waves=4.0, num_sms=32, min_chunk=16, small_node=0, fold_unshared=False, merge_block=4)  # one-token nodes shared
PREFETCHED = WorkConfig(  # register pipeline
    waves=4.0, num_sms=32, min_chunk=16, tiles=(TileConfig(16, 16, 4, 1), TileConfig(64, 32, 4, 1)), fold_unshared=False
)
NO_FOLD = WorkConfig(waves=4.0, num_sms=32, min_chunk=16, fold_own=0)  # own keys as partial items
ALL_OWN = WorkConfig(waves=4.0, num_sms=32, min_chunk=16, small_node=64, fold_own=1000, merge_block=8)  # nodes < 64 read by the merge
BY_ROUNDS = WorkConfig(num_sms=2, min_chunk=16, wide_tiles=(0, 0))  # each class's chunks sized for its own rounds


@pytest.mark.parametrize("kind", ["chain", "star", "deep_narrow", "random", "lopsided"])
@pytest.mark.parametrize("h_q,h_kv", [(2, 2), (8, 2), (8, 1)])
def test_tree_shapes_and_gqa(kind: str, h_q: int, h_kv: int) -> None:
    rng = np.random.default_rng(zlib.crc32(f"{kind}/{h_q}".encode()))  # the same trees in every process
    parents, lengths = tree_shape(kind, rng)
    qn = leaves(parents) + [0]  # every leaf plus one query on the root itself
    q, k, v, plan = build(parents, lengths, qn, None, h_q=h_q, h_kv=h_kv, page_size=16, **CPU)
    assert_close_to_reference(tree_attention(q, k, v, plan, backend="deft"), q, k, v, plan)
    assert_close_to_reference(deft_tree_attention(q, k, v, plan, config=SMALL_CHUNKS), q, k, v, plan)
    assert_close_to_reference(deft_tree_attention(q, k, v, plan, config=ALL_SHARED), q, k, v, plan)
    assert_close_to_reference(deft_tree_attention(q, k, v, plan, config=PREFETCHED), q, k, v, plan)


@pytest.mark.parametrize("page_size", [1, 3, 64])
def test_long_prompt_many_queries_across_blocks(page_size: int) -> None:
    # 1025 shared tokens, 40 leaves x G=4 rows: more rows than one tile holds.
    parents = [-1] + [0] * 40
    lengths = [1025] + [int(x) for x in np.random.default_rng(3).integers(1, 6, 40)]
    q, k, v, plan = build(parents, lengths, list(range(1, 41)), None, h_q=4, h_kv=1, page_size=page_size, **CPU)
    assert_close_to_reference(deft_tree_attention(q, k, v, plan, config=SMALL_CHUNKS), q, k, v, plan)


def test_causal_prefill_of_new_nodes_under_a_prefix() -> None:
    # Two children of a 37-token prefix are prefilled at once, 17 and 9 tokens, causally.
    parents, lengths = [-1, 0, 0], [37, 17, 9]
    qn = [1] * 17 + [2] * 9 + [0]
    qv = list(range(1, 18)) + list(range(1, 10)) + [37]
    q, k, v, plan = build(parents, lengths, qn, qv, h_q=8, h_kv=2, page_size=8, **CPU)
    assert_close_to_reference(tree_attention(q, k, v, plan), q, k, v, plan)
    assert_close_to_reference(deft_tree_attention(q, k, v, plan, config=SMALL_CHUNKS), q, k, v, plan)


@pytest.mark.parametrize("h_q,h_kv", [(2, 2), (8, 2)])
def test_causal_prefill_across_chunks(h_q: int, h_kv: int) -> None:
    # One 70-token node prefilled causally: chunks after the first skip queries that end before
    # them, and the queries span more than one tile of rows (a merge program per query makes
    # the interpreter's time grow with the node).
    n = 70
    q, k, v, plan = build([-1], [n], [0] * n, list(range(1, n + 1)), h_q=h_q, h_kv=h_kv, page_size=16, **CPU)
    assert_close_to_reference(deft_tree_attention(q, k, v, plan, config=SMALL_CHUNKS), q, k, v, plan)
    assert_close_to_reference(deft_tree_attention(q, k, v, plan, config=PREFETCHED), q, k, v, plan)
    assert_close_to_reference(deft_tree_attention(q, k, v, plan, config=BY_ROUNDS), q, k, v, plan)


def test_speculative_token_tree() -> None:
    # 15 draft tokens in a tree under a 97-token prompt; every draft node is a query seeing itself.
    parents = [-1, 0, 1, 1, 2, 2, 3, 3, 4, 5, 6, 7, 8, 8, 9, 10]
    lengths = [97] + [1] * 15
    qn = list(range(1, 16))
    q, k, v, plan = build(parents, lengths, qn, [1] * 15, h_q=4, h_kv=1, page_size=16, **CPU)
    assert_close_to_reference(tree_attention(q, k, v, plan), q, k, v, plan)
    assert_close_to_reference(deft_tree_attention(q, k, v, plan, config=ALL_SHARED), q, k, v, plan)


@pytest.mark.parametrize("h_q,h_kv", [(4, 4), (8, 1), (6, 2)])
def test_per_sequence_baseline(h_q: int, h_kv: int) -> None:
    parents, lengths = tree_shape("random", np.random.default_rng(5))
    qn = leaves(parents)
    q, k, v, plan = build(parents, lengths, qn, None, h_q=h_q, h_kv=h_kv, page_size=4, **CPU)
    assert_close_to_reference(tree_attention(q, k, v, plan, backend="per_sequence"), q, k, v, plan)
    assert_close_to_reference(per_sequence_attention(q, k, v, plan, config=SMALL_CHUNKS), q, k, v, plan)


def test_non_power_of_two_group_and_head_dim() -> None:
    parents, lengths = [-1, 0, 0, 1], [37, 17, 1, 5]
    q, k, v, plan = build(parents, lengths, [2, 3], None, h_q=6, h_kv=2, d=80, page_size=5, dtype=torch.float16, device="cpu")
    assert_close_to_reference(tree_attention(q, k, v, plan), q, k, v, plan)


def test_deterministic_and_reuses_workspaces() -> None:
    parents, lengths = tree_shape("star", np.random.default_rng(7))
    q, k, v, plan = build(parents, lengths, leaves(parents), None, h_q=4, h_kv=2, page_size=16, **CPU)
    first = deft_tree_attention(q, k, v, plan, config=SMALL_CHUNKS)
    cached = dict(plan.backend_data)
    second = deft_tree_attention(q, k, v, plan, config=SMALL_CHUNKS)
    assert torch.equal(first, second)
    assert plan.backend_data.keys() == cached.keys()
    assert all(plan.backend_data[key] is cached[key] for key in cached)


@pytest.mark.parametrize("h_q,h_kv", [(4, 2), (16, 8)])
def test_softmax_scale_and_queries_that_see_none_of_their_own_node(h_q: int, h_kv: int) -> None:
    # A GQA group of two (Qwen3-0.6B's 16 query heads over 8 KV heads), a softmax scale other
    # than 1/sqrt(D), node lengths at chunk and tile boundaries, and queries that see none of
    # their own node's keys (only their ancestors'), next to queries that see part or all of it.
    parents, lengths = [-1, 0, 1, 1], [64, 32, 16, 1]
    qn, qv = [1, 2, 2, 3, 3, 0], [0, 0, 16, 0, 1, 64]
    q, k, v, plan = build(parents, lengths, qn, qv, h_q=h_q, h_kv=h_kv, page_size=16, **CPU)
    for out in (
        tree_attention(q, k, v, plan, sm_scale=0.3),
        deft_tree_attention(q, k, v, plan, sm_scale=0.3, config=SMALL_CHUNKS),
        per_sequence_attention(q, k, v, plan, sm_scale=0.3, config=SMALL_CHUNKS),
    ):
        assert_close_to_reference(out, q, k, v, plan, sm_scale=0.3)


def test_rejects_float32_and_mixed_dtypes() -> None:
    q, k, v, plan = build([-1], [5], [0], None, h_q=2, h_kv=2, page_size=4, **CPU)
    with pytest.raises(ValueError, match="float16 or all bfloat16"):
        deft_tree_attention(q.float(), k.float(), v.float(), plan)
    with pytest.raises(ValueError, match="float16 or all bfloat16"):
        deft_tree_attention(q, k.float(), v, plan)


@pytest.mark.parametrize("attention", [deft_tree_attention, per_sequence_attention])
def test_launchers_reject_tensors_that_do_not_fit_the_plan(attention) -> None:
    # Called directly (not through tree_attention), the launchers check shapes too: a mismatch
    # used to run and return garbage or read past q.
    q, k, v, plan = build([-1, 0, 0], [20, 5, 3], [1, 2], None, h_q=4, h_kv=2, page_size=8, **CPU)
    for args, message in (
        ((q[:, :3].contiguous(), k, v), "multiple of KV heads"),
        ((q[:1].contiguous(), k, v), "rows but the plan has 2 queries"),
        ((q, k[..., :32].contiguous(), v[..., :32].contiguous()), "equal head dims"),
        ((q, k, v[:, :, :1].contiguous()), "expected q"),
        ((q, k.reshape(-1, 4, 2, 64), v.reshape(-1, 4, 2, 64)), "page size 4 differs"),
        ((q, k[:, :, :0], v[:, :, :0]), "multiple of KV heads 0"),
    ):
        with pytest.raises(ValueError, match=message):
            attention(*args, plan)


@st.composite
def _random_tree(draw: st.DrawFn) -> tuple[list[int], list[int], list[int], list[int]]:
    n = draw(st.integers(1, 8))
    parents = [-1] + [draw(st.integers(-1, i - 1)) for i in range(1, n)]
    lengths = [draw(st.sampled_from([0, 1, 2, 17, 40])) for _ in range(n)]
    queries = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=6))
    visible = [draw(st.integers(0, lengths[node])) for node in queries]
    return parents, lengths, queries, visible


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=_random_tree(), group=st.sampled_from([1, 4]), config=st.sampled_from([SMALL_CHUNKS, ALL_SHARED, PREFETCHED, NO_FOLD, ALL_OWN, BY_ROUNDS]))
def test_random_forests_with_partial_visibility(tree: tuple, group: int, config: WorkConfig) -> None:
    parents, lengths, queries, visible = tree
    depth_tokens = list(lengths)
    for i, p in enumerate(parents):
        if p >= 0:
            depth_tokens[i] += depth_tokens[p]
    visible = [max(vis, 1) if depth_tokens[n] == lengths[n] else vis for n, vis in zip(queries, visible)]
    if any(lengths[n] == 0 and depth_tokens[n] == 0 for n in queries):
        return  # a query over an empty root path sees nothing; the plan rejects it (tested elsewhere)
    q, k, v, plan = build(parents, lengths, queries, visible, h_q=group, h_kv=1, page_size=7, **CPU)
    assert_close_to_reference(deft_tree_attention(q, k, v, plan, config=config), q, k, v, plan)


def test_caches_whose_pages_are_not_back_to_back() -> None:
    # Pages padded to 11 slots of which 8 are used: slot ids must go through (page, offset).
    parents, lengths = [-1, 0, 0], [37, 17, 9]
    q, k, v, plan = build(parents, lengths, [1, 2], None, h_q=4, h_kv=2, page_size=8, **CPU)
    pad = lambda t: torch.cat([t, torch.zeros_like(t[:, :3])], dim=1)[:, :8]  # noqa: E731
    k_strided, v_strided = pad(k), pad(v)
    assert k_strided.stride(0) != 8 * k_strided.stride(1)
    assert_close_to_reference(tree_attention(q, k_strided, v_strided, plan), q, k, v, plan)


@pytest.mark.parametrize("flat", [True, False])
def test_64_bit_offsets_equal_32_bit_ones(flat: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # Caches of more than 2**31 elements take 64-bit offsets in the partial tiles and the
    # merge's own-key loop; here the small caches are made to take them too (a GPU test uses
    # real 4.3 GB caches). Both arithmetics address the same keys: the same answer, bitwise.
    parents, lengths = [-1, 0, 0, 0, 1], [70, 20, 9, 45, 3]
    q, k, v, plan = build(parents, lengths, [4, 2, 3, 0], None, h_q=8, h_kv=2, page_size=8, **CPU)
    if not flat:
        k, v = (torch.cat([t, torch.zeros_like(t[:, :3])], dim=1)[:, :8] for t in (k, v))
    config = replace(ALL_OWN, fold_unshared=True)
    assert deft_work(plan, 8, 2, CPU["d"], config).own_start is not None  # the merge reads keys too
    narrow = deft_tree_attention(q, k, v, plan, config=config)
    monkeypatch.setattr(deft_ws, "int32_offsets", lambda *caches: False)
    assert torch.equal(deft_tree_attention(q, k, v, plan, config=config), narrow)
    assert_close_to_reference(narrow, q, k, v, plan)


@pytest.mark.parametrize("wide_sms", [None, 0, 3])
def test_a_wide_launch_sized_for_fewer_sms(wide_sms: int | None) -> None:
    # A prompt above 20 leaves of one query each, on 8 SMs: its 160 rows in 128-row tiles (one
    # program per SM) beside the leaves' 16-row launch. Sized for every SM (0), for its share by
    # the launch model (6 items instead of 8, launched first), or forced onto 3 SMs (2 items).
    parents, lengths = [-1] + [0] * 20, [900] + [40] * 20
    q, k, v, plan = build(parents, lengths, list(range(1, 21)), None, h_q=8, h_kv=1, page_size=16, **CPU)
    cfg = WorkConfig(num_sms=8, min_chunk=16, wide_tiles=(0, 0), fold_unshared=False, wide_sms=wide_sms)
    launches = [(c.tile.block_m, c.num_items) for c in deft_work(plan, 8, 1, 64, cfg).classes]
    assert launches == [(128, {None: 6, 0: 8, 3: 2}[wide_sms]), (16, 20)]
    assert_close_to_reference(deft_tree_attention(q, k, v, plan, config=cfg), q, k, v, plan)


def test_long_chain_of_short_nodes_is_split() -> None:
    # 90 seven-token nodes in a chain: 630 unshared tokens per query, more than one piece.
    n = 90
    parents = [-1] + list(range(n - 1))
    q, k, v, plan = build(parents, [7] * n, [n - 1, n - 2], None, h_q=4, h_kv=1, page_size=16, **CPU)
    assert_close_to_reference(tree_attention(q, k, v, plan), q, k, v, plan)


def test_own_keys_folded_into_the_merge_or_not() -> None:
    # Queries at depths 10 and 89 of a chain of seven-token nodes: 77 own tokens are read by the
    # merge, 630 are more than fold_own and go to partial items; both answers are exact.
    n = 90
    parents = [-1] + list(range(n - 1))
    q, k, v, plan = build(parents, [7] * n, [10, n - 1, 0], None, h_q=4, h_kv=1, page_size=16, **CPU)
    for config, folds in ((WorkConfig(), True), (NO_FOLD, False), (ALL_OWN, True)):
        assert (deft_work(plan, 4, 1, CPU["d"], config).own_start is not None) == folds
        assert_close_to_reference(deft_tree_attention(q, k, v, plan, config=config), q, k, v, plan)


def test_leaves_of_one_query_read_by_the_merge() -> None:
    # A prompt under leaves of one query each, from one key to more than fold_own: the short ones
    # are read by their query's merge, the long one by partial items, a shared node by both.
    parents = [-1, 0, 0, 0, 0, 0, 5, 5]
    lengths = [70, 1, 17, 32, 150, 9, 40, 3]
    q, k, v, plan = build(parents, lengths, [1, 2, 3, 4, 6, 7, 0], None, h_q=8, h_kv=2, page_size=16, **CPU)
    config = WorkConfig(waves=4.0, num_sms=32, min_chunk=16)
    for cfg, nodes in ((config, {0, 4, 5}), (replace(config, fold_unshared=False), {0, 2, 3, 4, 5, 6})):
        assert set(deft_work(plan, 8, 2, CPU["d"], cfg).items[:, 3].tolist()) == nodes  # nodes with partial items
        assert_close_to_reference(deft_tree_attention(q, k, v, plan, config=cfg), q, k, v, plan)


def test_a_launch_of_short_shared_nodes_folded_into_the_merges() -> None:
    # A 300-key prompt's four children of 20 keys, two queries each (G = 4): the children's
    # 16-row launch beside the prompt's 64-row one is read by the merges instead; exact either way.
    parents, lengths = [-1, 0, 0, 0, 0], [300, 20, 20, 20, 20]
    q, k, v, plan = build(parents, lengths, [1, 1, 2, 2, 3, 3, 4, 4], None, h_q=8, h_kv=2, page_size=16, **CPU)
    config = WorkConfig(num_sms=32, min_chunk=16)
    for cfg, nodes in ((config, {0}), (replace(config, fold_launches=False), {0, 1, 2, 3, 4})):
        assert set(deft_work(plan, 8, 2, CPU["d"], cfg).items[:, 3].tolist()) == nodes  # nodes with partial items
        assert_close_to_reference(deft_tree_attention(q, k, v, plan, config=cfg), q, k, v, plan)


@pytest.mark.parametrize("own_block", [None, 16, 32])
def test_own_keys_read_in_either_block(own_block: int | None) -> None:
    # One-token and 9-token leaves of one query each (every own range fits 16 keys): chosen (16)
    # or fixed by the config, the merge's own-key loop gives the same exact answer.
    parents = [-1, 0, 0, 0, 0, 0]
    lengths = [40, 1, 9, 1, 3, 1]
    q, k, v, plan = build(parents, lengths, [1, 2, 3, 4, 5], None, h_q=8, h_kv=2, page_size=16, **CPU)
    config = WorkConfig(waves=4.0, num_sms=32, min_chunk=16, own_block=own_block)
    assert deft_work(plan, 8, 2, CPU["d"], config).own_block == (own_block or 16)
    assert_close_to_reference(deft_tree_attention(q, k, v, plan, config=config), q, k, v, plan)


@pytest.mark.parametrize("heads", [1, 2, 4, 8])
@pytest.mark.parametrize("h_q,h_kv,page_size", [(16, 4, 16), (12, 4, 7), (4, 2, 16)])
def test_merge_programs_over_several_kv_heads(heads: int, h_q: int, h_kv: int, page_size: int) -> None:
    # Each merge program takes `heads` KV heads (as many as the model has, at most): its partial
    # rows and its own keys, short leaves of one query under a shared prompt, come out exact,
    # for a group that is not a power of two (3) and an odd page size too.
    parents, lengths = [-1, 0, 0, 0, 1], [45, 20, 3, 33, 9]
    q, k, v, plan = build(parents, lengths, [2, 3, 4, 0], None, h_q=h_q, h_kv=h_kv, page_size=page_size, **CPU)
    config = WorkConfig(waves=4.0, num_sms=32, min_chunk=16, merge_heads=heads)
    assert deft_work(plan, h_q, h_kv, CPU["d"], config).own_start is not None
    assert_close_to_reference(deft_tree_attention(q, k, v, plan, config=config), q, k, v, plan)


def test_merge_heads_fit_the_model() -> None:
    assert merge_heads(8, 64, 2, 4, 128) == 2 and merge_heads(2, 64, 6, 4, 128) == 2 and merge_heads(4, 64, 1, 4, 128) == 1
    # Unasked: as many KV heads as leave 512 programs, at most four, and at most 16 x 128
    # elements of a partial's rows (4 query heads of 128 per KV head: four KV heads).
    assert [merge_heads(None, q, 8, 4, 128) for q in (8, 64, 127, 128, 256, 4096)] == [1, 1, 1, 2, 4, 4]
    assert merge_heads(None, 4096, 2, 4, 128) == 2 and merge_heads(None, 4096, 6, 4, 128) == 2
    assert merge_heads(None, 4096, 4, 8, 128) == 2  # 7 query heads per KV head, padded to 8
    assert merge_heads(None, 4096, 8, 4, 256) == 2 and merge_heads(None, 4096, 8, 16, 128) == 1
    assert merge_heads(None, 4096, 32, 1, 128) == 4  # one query head per KV head
    with pytest.raises(ValueError, match="merge_heads must be a power of two"):
        WorkConfig(merge_heads=3)


@pytest.mark.parametrize("chains", [True, False])
def test_paths_of_nodes_read_as_one(chains: bool) -> None:
    # Root (0) -> 1 -> 3 -> 4, node 2 (a child of the root with no queries) stored between 1 and
    # 3: chains {0, 1} and {3, 4}, each cut into 64-key chunks across its nodes' boundary; node
    # 4's own queries see causal prefixes of it, and the chunk that starts in node 3 starts at a
    # negative key of node 4.
    parents, lengths = [-1, 0, 0, 1, 3], [40, 97, 9, 37, 120]
    qn, visible = [4] * 6, [1, 7, 120, 120, 63, 2]
    q, k, v, plan = build(parents, lengths, qn, visible, h_q=8, h_kv=2, page_size=16, **CPU)
    config = replace(SMALL_CHUNKS, chains=chains)
    work = deft_work(plan, 8, 2, CPU["d"], config)
    assert set(work.items[:, 3].tolist()) == ({1, 4} if chains else {0, 1, 3, 4})
    assert (work.items[:, 2].min().item() < 0) == chains
    assert_close_to_reference(deft_tree_attention(q, k, v, plan, config=config), q, k, v, plan)


@pytest.mark.parametrize("chains", [True, False])
def test_short_nodes_join_a_chain(chains: bool) -> None:
    # A path 50 -> 3 -> 60 -> 2 keys with queries on its last node, seeing causal prefixes of it:
    # chained, one chain of 115 keys read by partial items (the 3- and 2-key nodes too, so the
    # merges read no keys of their own); unchained, the two short nodes read by each query's merge.
    parents, lengths = [-1, 0, 1, 2], [50, 3, 60, 2]
    q, k, v, plan = build(parents, lengths, [3] * 4, [1, 2, 2, 1], h_q=8, h_kv=2, page_size=16, **CPU)
    config = replace(SMALL_CHUNKS, chains=chains)
    work = deft_work(plan, 8, 2, CPU["d"], config)
    assert set(work.items[:, 3].tolist()) == ({3} if chains else {0, 2})
    assert (work.own_len is None) == chains  # no query reads keys of its own
    assert_close_to_reference(deft_tree_attention(q, k, v, plan, config=config), q, k, v, plan)


def test_a_folded_launch_of_chains_reads_every_node_of_them() -> None:
    # A 600-key prompt's four paths of two 20-key nodes, two queries at the end of each: each
    # path is one 40-key chain, and their launch beside the prompt's is read by the merges, every
    # query reading both nodes of its chain; as its own launch (fold_launches=False), exact too.
    parents, lengths = [-1, 0, 1, 0, 3, 0, 5, 0, 7], [600] + [20] * 8
    q, k, v, plan = build(parents, lengths, [2, 2, 4, 4, 6, 6, 8, 8], None, h_q=8, h_kv=2, page_size=16, **CPU)
    config = WorkConfig(num_sms=32, min_chunk=16)
    work = deft_work(plan, 8, 2, CPU["d"], config)
    assert set(work.items[:, 3].tolist()) == {0} and (work.own_len[0] == 40).all()
    for cfg in (config, replace(config, fold_launches=False)):
        assert_close_to_reference(deft_tree_attention(q, k, v, plan, config=cfg), q, k, v, plan)
    assert set(deft_work(plan, 8, 2, CPU["d"], replace(config, fold_launches=False)).items[:, 3].tolist()) == {0, 2, 4, 6, 8}


@st.composite
def _cut_path(draw: st.DrawFn) -> tuple[list[int], list[int], list[int], list[int]]:
    # A path of nodes (some shorter than small_node), queries on its last node seeing causal
    # prefixes of it, and leaves below it: the chains cut the path where they can.
    lengths = draw(st.lists(st.sampled_from([1, 5, 9, 23, 40, 70]), min_size=2, max_size=6))
    leaves = draw(st.lists(st.sampled_from([1, 3, 30]), max_size=3))
    last = len(lengths) - 1
    parents = list(range(-1, last)) + [last] * len(leaves)
    own = draw(st.lists(st.integers(1, lengths[-1]), max_size=4))
    queries = [last] * len(own) + list(range(last + 1, last + 1 + len(leaves)))
    if not queries:
        queries, own = [last], [lengths[-1]]
    visible = own + leaves  # a leaf's query sees all of it
    return parents, lengths + leaves, queries, visible


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=_cut_path(), config=st.sampled_from([SMALL_CHUNKS, BY_ROUNDS, ALL_OWN]))
def test_random_paths_read_as_chains(tree: tuple, config: WorkConfig) -> None:
    parents, lengths, queries, visible = tree
    q, k, v, plan = build(parents, lengths, queries, visible, h_q=4, h_kv=1, page_size=7, **CPU)
    out = deft_tree_attention(q, k, v, plan, config=config)
    assert_close_to_reference(out, q, k, v, plan)
    assert_close_to_reference(deft_tree_attention(q, k, v, plan, config=replace(config, chains=False)), q, k, v, plan)
