"""The KV store kernel and the vectorised plan arithmetic."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from thoughttree.kernels import plan_tree_attention, store_kv, store_kv_reference
from thoughttree.kernels.topology import concat_ranges, path_sums, preorder
from thoughttree.kernels.workplan import upload_int32


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("page_size,h_kv,d", [(16, 2, 64), (3, 3, 80)])
def test_store_kv_matches_reference(dtype: torch.dtype, page_size: int, h_kv: int, d: int) -> None:
    g = torch.Generator().manual_seed(0)
    shape = (6, page_size, h_kv, d)
    k_cache, v_cache = torch.zeros(shape, dtype=dtype), torch.zeros(shape, dtype=dtype)
    slots = torch.randperm(6 * page_size, generator=g)[:11]
    k, v = torch.randn(11, h_kv, d, generator=g), torch.randn(11, h_kv, d, generator=g)
    want_k, want_v = k_cache.clone(), v_cache.clone()
    store_kv_reference(want_k, want_v, k, v, slots)
    store_kv(k_cache, v_cache, k, v, slots)
    assert torch.equal(k_cache, want_k) and torch.equal(v_cache, want_v)


def test_store_kv_rejects_bad_shapes() -> None:
    cache = torch.zeros(2, 4, 2, 8)
    with pytest.raises(ValueError, match="expected k, v"):
        store_kv(cache, cache.clone(), torch.zeros(3, 2, 8), torch.zeros(3, 2, 8), torch.arange(2))
    with pytest.raises(ValueError, match="int64"):
        store_kv(cache, cache.clone(), torch.zeros(2, 2, 8), torch.zeros(2, 2, 8), torch.zeros(2))


def _dfs_order(parents: list[int]) -> list[int]:
    children: list[list[int]] = [[] for _ in parents]
    for i, p in enumerate(parents):
        if p >= 0:
            children[p].append(i)
    order: list[int] = []
    stack = [i for i in reversed(range(len(parents))) if parents[i] < 0]
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(reversed(children[node]))
    return order


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 10**6), min_size=1, max_size=40), st.integers(0, 2**16))
def test_preorder_path_sums_and_subtrees_match_a_walk(draws: list[int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    parents = [-1] + [int(x % (i + 1)) - (1 if rng.random() < 0.1 else 0) for i, x in enumerate(draws[1:])]
    parents = [min(p, i - 1) if i else -1 for i, p in enumerate(parents)]
    par = np.array(parents)
    values = rng.integers(0, 50, len(par))
    order = _dfs_order(parents)
    pre, size = preorder(par)
    assert [int(x) for x in np.argsort(pre)] == order
    for i in range(len(par)):
        subtree = order[pre[i] : pre[i] + size[i]]
        node, path_total = i, 0
        while node >= 0:
            path_total += values[node]
            node = parents[node]
        assert path_sums(par, values)[i] == path_total
        assert all(i in _ancestors(parents, j) for j in subtree)
        assert size[i] == sum(i in _ancestors(parents, j) for j in range(len(par)))


def _ancestors(parents: list[int], node: int) -> set[int]:
    out = set()
    while node >= 0:
        out.add(node)
        node = parents[node]
    return out


def test_concat_ranges() -> None:
    assert concat_ranges(np.array([5, 0, 10]), np.array([2, 0, 3])).tolist() == [5, 6, 10, 11, 12]
    assert concat_ranges(np.array([], dtype=np.int64), np.array([], dtype=np.int64)).tolist() == []


def test_plan_accepts_arrays_and_tensors_and_views_follow_the_paths() -> None:
    parents = np.array([-1, 0, 0, 1])
    slots = [np.arange(0, 5), torch.arange(5, 8), [8, 9], np.arange(10, 14)]
    plan = plan_tree_attention(parents, slots, torch.tensor([3, 2, 1]), [2, 2, 1], page_size=4, device="cpu")
    assert plan.visible_slots(0).tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 10, 11]
    assert plan.visible_slots(1).tolist() == [0, 1, 2, 3, 4, 8, 9]
    assert plan.visible_slots(2).tolist() == [0, 1, 2, 3, 4, 5]
    with pytest.raises(ValueError, match="integers"):
        plan_tree_attention([-1], [np.array([0.5])], [0], page_size=4, device="cpu")


def test_uploaded_metadata_views_start_16_byte_aligned() -> None:
    # Triton compiles a kernel variant per pointer alignment: every view must start aligned,
    # whatever the sizes before it, and keep its values.
    arrays = [np.arange(n, dtype=np.int64) * 3 - 1 for n in (5, 1, 0, 7, 4, 9)]
    views = upload_int32(arrays, torch.device("cpu"))
    for a, v in zip(arrays, views):
        assert v.data_ptr() % 16 == 0
        assert v.tolist() == a.tolist()
