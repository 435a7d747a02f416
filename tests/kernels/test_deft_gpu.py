"""The Triton kernels on CUDA at real sizes (skipped without a GPU)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from thoughttree.kernels import WorkConfig, deft_tree_attention, per_sequence_attention, plan_tree_attention, store_kv, store_kv_reference, tree_attention

from thoughttree.kernels import deft, deft_ws
from thoughttree.kernels.deft import _launch_partials, deft_work
from thoughttree.kernels.plan.tiles import TILE_NEEDS, programs_per_sm

from tree_cases import assert_close_to_reference, build, leaves, tree_shape

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]
ODD = (1, 17, 37, 97, 1025)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("h_q,h_kv", [(8, 8), (16, 4), (64, 8)])
def test_head_dims_dtypes_and_gqa(dtype: torch.dtype, d: int, h_q: int, h_kv: int) -> None:
    parents, lengths = tree_shape("random", np.random.default_rng(d + h_q), ODD)
    q, k, v, plan = build(parents, lengths, leaves(parents) + [0], None, h_q=h_q, h_kv=h_kv, d=d, page_size=16, dtype=dtype, device="cuda")
    assert_close_to_reference(tree_attention(q, k, v, plan), q, k, v, plan)
    assert_close_to_reference(tree_attention(q, k, v, plan, backend="per_sequence"), q, k, v, plan)


@pytest.mark.parametrize("kind", ["chain", "star", "deep_narrow", "random", "lopsided"])
@pytest.mark.parametrize("page_size", [1, 16, 64])
def test_tree_shapes_at_scale(kind: str, page_size: int) -> None:
    parents, lengths = tree_shape(kind, np.random.default_rng(page_size), ODD)
    qn = leaves(parents) * 9  # many queries per leaf so shared chunks span several tiles
    q, k, v, plan = build(parents, lengths, qn, None, h_q=32, h_kv=8, d=128, page_size=page_size, dtype=torch.bfloat16, device="cuda")
    assert_close_to_reference(tree_attention(q, k, v, plan), q, k, v, plan)
    wide = WorkConfig(wide_tiles=(0, 0))  # 128-row tiles wherever the rows fill them
    assert_close_to_reference(deft_tree_attention(q, k, v, plan, config=wide), q, k, v, plan)


def test_long_star_and_prefill_and_token_tree() -> None:
    # 20k-token prompt, 64 leaves of 37 tokens, one leaf prefilled causally, and a token tree.
    rng = np.random.default_rng(0)
    parents = [-1] + [0] * 64 + [1 + int(rng.integers(0, 64))] + [0] * 0
    lengths = [20000] + [37] * 64 + [97]
    spec_parents = [65] + [66 + int(rng.integers(0, i)) for i in range(1, 31)]
    parents += spec_parents
    lengths += [1] * 31
    qn = list(range(1, 65)) + [65] * 97 + list(range(66, 97))
    qv = [37] * 64 + list(range(1, 98)) + [1] * 31
    q, k, v, plan = build(parents, lengths, qn, qv, h_q=32, h_kv=8, d=128, page_size=16, dtype=torch.bfloat16, device="cuda")
    out = deft_tree_attention(q, k, v, plan)
    assert_close_to_reference(out, q, k, v, plan)
    assert torch.equal(out, deft_tree_attention(q, k, v, plan))
    assert_close_to_reference(per_sequence_attention(q, k, v, plan), q, k, v, plan)


def test_tile_classes_side_by_side_equal_one_after_another_and_in_a_graph() -> None:
    # A 4k prompt under 50 leaves of 200 keys: a 64-row launch for the prompt and a 16-row
    # launch for the leaves, on two streams or one; eager and replayed from a CUDA graph.
    parents, lengths = [-1] + [0] * 50, [4096] + [200] * 50
    q, k, v, plan = build(parents, lengths, list(range(1, 51)), None, h_q=32, h_kv=8, d=128, page_size=16, dtype=torch.bfloat16, device="cuda")
    apart = deft_tree_attention(q, k, v, plan, config=WorkConfig(side_by_side=False))
    together = deft_tree_attention(q, k, v, plan)
    assert len(deft_work(plan, 32, 8, 128, WorkConfig()).classes) == 2
    assert torch.equal(apart, together)
    assert_close_to_reference(together, q, k, v, plan)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        deft_tree_attention(q, k, v, plan)  # warm-up off the capture stream
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = deft_tree_attention(q, k, v, plan)
    q.copy_(torch.randn_like(q))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, deft_tree_attention(q, k, v, plan, config=WorkConfig(side_by_side=False)))


@pytest.mark.parametrize(
    "config",
    # One tile class; two on one stream; two on one stream, no own keys in the merge; two on two
    # streams (the merge is not launched early there).
    [WorkConfig(max_block_m=64), WorkConfig(side_by_side=False), WorkConfig(side_by_side=False, fold_own=0), WorkConfig()],
)
def test_early_merge_equals_the_merge_after_the_partials(config: WorkConfig) -> None:
    # A 6k prompt under 40 leaves of 1-130 keys (the short ones read by the merge itself) and a
    # second prompt node with 24 leaves: the merge launched early (behind the last partial
    # launch, reading its own keys before it waits) against launched after, eager and in a graph.
    rng = np.random.default_rng(5)
    parents = [-1] + [0] * 40 + [0] + [41] * 24
    lengths = [6000] + [int(x) for x in rng.integers(1, 130, 40)] + [2500] + [int(x) for x in rng.integers(1, 40, 24)]
    q, k, v, plan = build(parents, lengths, list(range(1, 41)) + list(range(42, 66)), None, h_q=32, h_kv=8, d=128,
                          page_size=16, dtype=torch.bfloat16, device="cuda")
    late = dataclasses.replace(config, early_merge=False)
    expected = deft_tree_attention(q, k, v, plan, config=late)
    early = deft_tree_attention(q, k, v, plan, config=config)
    assert torch.equal(early, expected)
    assert_close_to_reference(early, q, k, v, plan)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        deft_tree_attention(q, k, v, plan, config=config)  # warm-up off the capture stream
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = deft_tree_attention(q, k, v, plan, config=config)
    for _ in range(3):
        q.copy_(torch.randn_like(q))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(captured, deft_tree_attention(q, k, v, plan, config=late))


def test_tile_needs_match_the_compiled_kernels() -> None:
    """The planner's table of what each default tile takes gives the residency the compiled
    kernels really have on this GPU and Triton (an 8k prompt under 64 leaves, and a 3k node under
    24 more, the leaves as partial items: one launch of each tile class)."""
    parents, lengths = [-1] + [0] * 64 + [0] + [65] * 24, [8192] + [30] * 64 + [3000] + [40] * 24
    q, k, v, plan = build(parents, lengths, list(range(1, 65)) + list(range(66, 90)), None, h_q=32, h_kv=8, d=128,
                          page_size=16, dtype=torch.bfloat16, device="cuda")
    work = deft_work(plan, 32, 8, 128, WorkConfig(fold_unshared=False))
    shapes = {c.tile: c for c in work.classes}
    assert set(shapes) == set(TILE_NEEDS)
    props = torch.cuda.get_device_properties(0)
    smem, regs = props.shared_memory_per_multiprocessor, props.regs_per_multiprocessor
    flat = k.stride(0) == 16 * k.stride(1) and v.stride(0) == 16 * v.stride(1)
    for shape, tc in shapes.items():
        compiled = _launch_partials(q, k, v, work, tc, 128**-0.5, 16, 4, 128, 128, flat, deft_ws.int32_offsets(k, v))
        needs = (compiled.metadata.shared, compiled.n_regs)
        assert programs_per_sm(shape, 128, smem, regs, needs) == programs_per_sm(shape, 128, smem, regs), (
            f"tile {shape}: compiled kernel takes {needs} (shared bytes, registers), table says {TILE_NEEDS[shape]}")


def test_store_kv_on_gpu() -> None:
    k_cache = torch.zeros(40, 16, 8, 128, dtype=torch.bfloat16, device="cuda")
    v_cache = torch.zeros_like(k_cache)
    slots = torch.randperm(640, device="cuda")[:300]
    k, v = torch.randn(2, 300, 8, 128, device="cuda")
    want_k, want_v = k_cache.clone(), v_cache.clone()
    store_kv_reference(want_k, want_v, k, v, slots)
    store_kv(k_cache, v_cache, k, v, slots)
    assert torch.equal(k_cache, want_k) and torch.equal(v_cache, want_v)


hopper = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9,
    reason="needs compute capability 9.0 or later")


def _padded_pages(x: torch.Tensor) -> torch.Tensor:
    """The same cache with one unused token row after each page (pages not back to back)."""
    pages, size, h, d = x.shape
    out = torch.zeros(pages, size + 1, h, d, dtype=x.dtype, device=x.device)
    out[:, :size] = x
    return out[:, :size]


@hopper
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("h_q,h_kv", [(32, 8), (28, 4), (16, 16)])
@pytest.mark.parametrize("pages", ["flat", "padded"])
@pytest.mark.parametrize("rows", [128, 64])
def test_warp_specialized_tile_equals_the_triton_tile(dtype: torch.dtype, h_q: int, h_kv: int, pages: str, rows: int) -> None:
    # A 5k prompt under 70 leaves of odd lengths; one leaf prefilled causally (own-node queries
    # that see a prefix of their chunk), and a short token tree: the shared chunks in 128-row
    # tiles (two consumer warpgroups), or in 64-row tiles (one).
    rng = np.random.default_rng(h_q + h_kv)
    parents = [-1] + [0] * 70 + [3]
    lengths = [5003] + [int(x) for x in rng.integers(1, 300, 70)] + [133]
    parents += [71] + [72 + int(rng.integers(0, i)) for i in range(1, 20)]
    lengths += [1] * 20
    qn = list(range(1, 71)) + [71] * 133 + list(range(72, 92))
    qv = [lengths[i] for i in range(1, 71)] + list(range(1, 134)) + [1] * 20
    q, k, v, plan = build(parents, lengths, qn, qv, h_q=h_q, h_kv=h_kv, d=128, page_size=16, dtype=dtype, device="cuda")
    if pages == "padded":
        k, v = _padded_pages(k), _padded_pages(v)
    config = WorkConfig(wide_tiles=(0, 0)) if rows == 128 else WorkConfig(max_block_m=64)
    assert any(c.tile.block_m == rows for c in deft_work(plan, h_q, h_kv, 128, config).classes)
    assert rows in deft_ws.TILES and deft_ws.fits(k, v)
    out = deft_tree_attention(q, k, v, plan, config=config)
    triton_tile = deft_tree_attention(q, k, v, plan, config=dataclasses.replace(config, warp_specialized=False))
    assert torch.equal(out, triton_tile)
    assert_close_to_reference(out, q, k, v, plan)


@hopper
def test_warp_specialized_tile_declines_caches_it_cannot_copy_by_16_bytes() -> None:
    parents, lengths = [-1] + [0] * 40, [3000] + [20] * 40
    q, k, v, plan = build(parents, lengths, list(range(1, 41)), None, h_q=32, h_kv=8, d=128, page_size=16,
                          dtype=torch.bfloat16, device="cuda")
    # The same caches 4 elements (8 bytes) past a 16-byte boundary.
    k_off = torch.empty(k.numel() + 4, dtype=k.dtype, device="cuda")[4:].view(k.shape)
    v_off = torch.empty(v.numel() + 4, dtype=v.dtype, device="cuda")[4:].view(v.shape)
    k_off.copy_(k)
    v_off.copy_(v)
    assert not deft_ws.fits(k_off, v_off) and deft_ws.fits(k, v)
    wide = WorkConfig(wide_tiles=(0, 0))
    assert torch.equal(deft_tree_attention(q, k_off, v_off, plan, config=wide), deft_tree_attention(q, k, v, plan, config=wide))


def test_caches_past_two_to_the_31_elements_take_64_bit_offsets() -> None:
    # The same tree with its pages at the end of caches of more than 2**31 elements (4.3 GB
    # each): no 32-bit offset reaches them, so the warp-specialised tile declines them and the
    # Triton tile and the merge (which reads the leaves) compute offsets in 64 bits.
    parents, lengths = [-1] + [0] * 64, [3000] + [37] * 64
    qn = list(range(1, 65))
    q, k, v, plan = build(parents, lengths, qn, None, h_q=32, h_kv=8, d=128, page_size=16, dtype=torch.bfloat16, device="cuda")
    pages = k.shape[0]
    far = 2**31 // (16 * 8 * 128) + 1  # the first page past 2**31 elements
    big_k = torch.empty(far + pages, *k.shape[1:], dtype=k.dtype, device="cuda")
    big_v = torch.empty_like(big_k)
    big_k[far:], big_v[far:] = k, v
    assert deft_ws.fits(k, v) and not deft_ws.fits(big_k, big_v)
    slots = [plan.slots[plan.node_offsets[i] : plan.node_offsets[i + 1]] + far * 16 for i in range(len(parents))]
    far_plan = plan_tree_attention(parents, slots, qn, page_size=16, device="cuda")
    triton_tile = WorkConfig(warp_specialized=False)
    near = deft_tree_attention(q, k, v, plan, config=triton_tile)
    assert_close_to_reference(near, q, k, v, plan)
    assert torch.equal(deft_tree_attention(q, big_k, big_v, far_plan), near)
    del big_k, big_v
    torch.cuda.empty_cache()


@pytest.mark.parametrize("heads", [None, 1, 2, 4, 8])
def test_merge_programs_over_several_kv_heads_on_gpu(heads: int | None) -> None:
    # 256 queries with 32-token leaves of their own under a 4k prompt (the merge reads the
    # leaves): every grouping of KV heads per merge program gives the same exact answer.
    parents, lengths = [-1] + [0] * 256, [4096] + [32] * 256
    q, k, v, plan = build(parents, lengths, list(range(1, 257)), None, h_q=32, h_kv=8, d=128, page_size=16, dtype=torch.bfloat16, device="cuda")
    assert deft_work(plan, 32, 8, 128, WorkConfig()).own_start is not None
    assert_close_to_reference(deft_tree_attention(q, k, v, plan, config=WorkConfig(merge_heads=heads)), q, k, v, plan)


@pytest.mark.parametrize("heads", [1, 4])
def test_merge_own_key_pipeline_depths_agree(heads: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # 48 leaves of 1 to 128 keys under a 2k prompt, each read by its query's merge in one to
    # sixteen steps: every pipeline depth of that loop gives the reference's answer, bitwise alike.
    rng = np.random.default_rng(0)
    lengths = [2048] + rng.integers(1, 129, 48).tolist()
    q, k, v, plan = build([-1] + [0] * 48, lengths, list(range(1, 49)), None, h_q=32, h_kv=8, d=128, page_size=16, dtype=torch.bfloat16, device="cuda")
    cfg = WorkConfig(merge_heads=heads)
    assert deft_work(plan, 32, 8, 128, cfg).own_longest == max(lengths[1:])
    outs = []
    for stages in (1, 2, 3):
        monkeypatch.setattr(deft, "OWN_STAGES", stages)
        outs.append(deft_tree_attention(q, k, v, plan, config=cfg))
        assert_close_to_reference(outs[-1], q, k, v, plan)
    assert all(torch.equal(outs[0], o) for o in outs[1:])
