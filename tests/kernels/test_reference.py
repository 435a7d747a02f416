"""The reference backend against torch's own scaled_dot_product_attention on explicit sequences."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from thoughttree.kernels import plan_tree_attention, tree_attention


def _cache(num_pages: int, page_size: int, h_kv: int, d: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    k = torch.randn(num_pages, page_size, h_kv, d, generator=g)
    v = torch.randn(num_pages, page_size, h_kv, d, generator=g)
    return k, v


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """q [H_q, D] against k, v [L, H_kv, D]."""
    group = q.shape[0] // k.shape[1]
    k = k.repeat_interleave(group, dim=1).transpose(0, 1)  # [H_q, L, D]
    v = v.repeat_interleave(group, dim=1).transpose(0, 1)
    return F.scaled_dot_product_attention(q[:, None], k, v, scale=scale)[:, 0]


@pytest.mark.parametrize("h_q,h_kv", [(4, 4), (8, 2), (6, 1)])
def test_star_tree_equals_each_path_alone(h_q: int, h_kv: int) -> None:
    page_size, d = 4, 16
    k_cache, v_cache = _cache(16, page_size, h_kv, d)
    perm = torch.randperm(64, generator=torch.Generator().manual_seed(1)).tolist()
    prefix, leaves = perm[:13], [perm[13:18], perm[18:19], perm[19:30]]
    parents = [-1, 0, 0, 0]
    plan = plan_tree_attention(parents, [prefix, *leaves], [1, 2, 3, 0], page_size=page_size, device="cpu")
    q = torch.randn(4, h_q, d)
    flat_k, flat_v = k_cache.reshape(-1, h_kv, d), v_cache.reshape(-1, h_kv, d)
    for scale in (None, 0.3):
        out = tree_attention(q, k_cache, v_cache, plan, sm_scale=scale, backend="reference")
        for row, path in enumerate([prefix + leaves[0], prefix + leaves[1], prefix + leaves[2], prefix]):
            want = _sdpa(q[row], flat_k[path], flat_v[path], scale)
            torch.testing.assert_close(out[row], want, atol=1e-5, rtol=1e-5)


def test_query_visible_gives_causal_prefill() -> None:
    page_size, h, d, n = 8, 2, 8, 11
    k_cache, v_cache = _cache(4, page_size, h, d)
    slots = list(range(3, 3 + n))
    plan = plan_tree_attention([-1], [slots], [0] * n, list(range(1, n + 1)), page_size=page_size, device="cpu")
    q = torch.randn(n, h, d)
    out = tree_attention(q, k_cache, v_cache, plan, backend="reference")
    k = k_cache.reshape(-1, h, d)[slots].transpose(0, 1)
    v = v_cache.reshape(-1, h, d)[slots].transpose(0, 1)
    want = F.scaled_dot_product_attention(q.transpose(0, 1), k, v, is_causal=True).transpose(0, 1)
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(parents=[0], node_slots=[[0]], query_nodes=[0]), "parent"),
        (dict(parents=[-1, 2, 1], node_slots=[[0], [1], [2]], query_nodes=[0]), "parent"),
        (dict(parents=[-1], node_slots=[[0], [1]], query_nodes=[0]), "node_slots"),
        (dict(parents=[-1], node_slots=[[0]], query_nodes=[1]), "query_nodes"),
        (dict(parents=[-1], node_slots=[[0]], query_nodes=[0], query_visible=[2]), "sees 2 tokens"),
        (dict(parents=[-1], node_slots=[[0]], query_nodes=[0], query_visible=[0]), "no token"),
        (dict(parents=[-1], node_slots=[[-3]], query_nodes=[0]), r"slot ids must be in \[0, 2\^31\)"),
        (dict(parents=[-1], node_slots=[[0, 2**31]], query_nodes=[0]), r"int32.*got \[0, 2147483648\]"),
        # Slot ids in lists are checked as arrays are: a float is refused, not truncated to a slot.
        (dict(parents=[-1], node_slots=[[0.5, 1.7]], query_nodes=[0]), "node_slots must hold integers"),
        (dict(parents=[-1, 0], node_slots=[(0, 1), [2.0]], query_nodes=[1]), "node_slots must hold integers"),
        # An array of another rank is refused by name, not flattened into other nodes or queries.
        (dict(parents=[[-1, 0]], node_slots=[[0], [1]], query_nodes=[1]), r"parents must be one-dimensional"),
        (dict(parents=[-1, 0], node_slots=[[0], [1]], query_nodes=[[0, 1]]), r"query_nodes must be one-dimensional"),
    ],
)
def test_plan_rejects_bad_trees(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        plan_tree_attention(**kwargs, page_size=4, device="cpu")


def test_unknown_backend_and_shape_errors() -> None:
    k_cache, v_cache = _cache(2, 4, 2, 8)
    plan = plan_tree_attention([-1], [[0, 1]], [0], page_size=4, device="cpu")
    with pytest.raises(ValueError, match="unknown tree-attention backend"):
        tree_attention(torch.randn(1, 2, 8), k_cache, v_cache, plan, backend="nope")
    with pytest.raises(ValueError, match="multiple of KV heads"):
        tree_attention(torch.randn(1, 3, 8), k_cache, v_cache, plan, backend="reference")
    with pytest.raises(ValueError, match="rows"):
        tree_attention(torch.randn(2, 2, 8), k_cache, v_cache, plan, backend="reference")


def test_reference_in_chunks_of_query_rows_equals_all_rows_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from tree_cases import build, low_precision_attention

    from thoughttree.kernels import reference

    parents, lengths = [-1] + [0] * 9 + [3], [300] + [7] * 9 + [11]
    q, k, v, plan = build(
        parents,
        lengths,
        list(range(1, 11)) * 2,
        None,
        h_q=4,
        h_kv=2,
        d=16,
        page_size=4,
        dtype=torch.float32,
        device="cpu",
    )
    whole = tree_attention(q, k, v, plan, backend="reference")
    low = low_precision_attention(q, k, v, plan)
    assert reference.query_chunks(20, 1000, 3000) == [slice(a, min(a + 3, 20)) for a in range(0, 20, 3)]
    assert reference.query_chunks(2, 10**9, 1) == [slice(0, 1), slice(1, 2)]
    monkeypatch.setattr(reference, "CHUNK_BYTES", 3 * 311 * 2 * 16 * 4)  # three rows of keys a chunk
    assert len(reference.query_chunks(20, 311 * 2 * 16 * 4)) == 7
    torch.testing.assert_close(tree_attention(q, k, v, plan, backend="reference"), whole, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(low_precision_attention(q, k, v, plan), low, rtol=1e-6, atol=1e-6)
