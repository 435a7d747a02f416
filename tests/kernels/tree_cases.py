"""Tree shapes and checks shared by the kernel tests."""

from __future__ import annotations

import numpy as np
import torch

from thoughttree.kernels import TreePlan, plan_tree_attention, tree_attention
from thoughttree.kernels.reference import query_chunks


def tree_shape(kind: str, rng: np.random.Generator, lengths: tuple[int, ...] = (1, 17, 37, 97)) -> tuple[list[int], list[int]]:
    """(parents, node lengths) of a named tree shape with node lengths drawn from ``lengths``."""
    pick = lambda: int(rng.choice(lengths))  # noqa: E731
    if kind == "chain":
        parents = [-1, 0, 1, 2, 3]
    elif kind == "star":
        parents = [-1] + [0] * 6
    elif kind == "deep_narrow":  # a long spine with a short side branch at every level
        parents = [-1]
        for _ in range(6):
            spine = len(parents) - 1 if len(parents) == 1 else len(parents) - 2
            parents += [spine, spine]
    elif kind == "random":
        parents = [-1] + [int(rng.integers(0, i)) for i in range(1, 12)]
    elif kind == "lopsided":  # one deep heavy branch, many one-token leaves at the root
        parents = [-1, 0, 1, 2] + [0] * 5
        return parents, [97, 37, 17, 37] + [1] * 5
    else:
        raise ValueError(kind)
    return parents, [pick() for _ in parents]


def leaves(parents: list[int]) -> list[int]:
    has_child = set(p for p in parents if p >= 0)
    return [i for i in range(len(parents)) if i not in has_child]


def random_cache(num_tokens: int, page_size: int, h_kv: int, d: int, dtype: torch.dtype, device: str, seed: int):
    """Caches with some spare pages, and a random permutation of their slots to hand out."""
    g = torch.Generator().manual_seed(seed)
    num_pages = -(-num_tokens // page_size) + 2
    k = torch.randn(num_pages, page_size, h_kv, d, generator=g).to(device=device, dtype=dtype)
    v = torch.randn(num_pages, page_size, h_kv, d, generator=g).to(device=device, dtype=dtype)
    perm = torch.randperm(num_pages * page_size, generator=g).numpy()
    return k, v, perm


def build(
    parents: list[int],
    lengths: list[int],
    query_nodes: list[int],
    query_visible: list[int] | None,
    *,
    h_q: int,
    h_kv: int,
    d: int,
    page_size: int,
    dtype: torch.dtype,
    device: str,
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, TreePlan]:
    k, v, perm = random_cache(sum(lengths), page_size, h_kv, d, dtype, device, seed)
    bounds = np.cumsum([0, *lengths])
    node_slots = [perm[bounds[i] : bounds[i + 1]] for i in range(len(lengths))]
    plan = plan_tree_attention(parents, node_slots, query_nodes, query_visible, page_size=page_size, device=device)
    g = torch.Generator().manual_seed(seed + 1)
    q = torch.randn(len(query_nodes), h_q, d, generator=g).to(device=device, dtype=dtype)
    return q, k, v, plan


def low_precision_attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, plan: TreePlan, sm_scale: float | None = None
) -> torch.Tensor:
    """The same sums done by PyTorch in q's dtype: the error yardstick for the kernels."""
    num_q, h_q, d = q.shape
    h_kv = k_cache.shape[2]
    ids, valid = plan.padded_query_slots
    keys, values = k_cache.reshape(-1, h_kv, d), v_cache.reshape(-1, h_kv, d)
    out = torch.empty_like(q)
    for rows in query_chunks(num_q, ids.shape[1] * h_q * d * q.element_size()):
        k = keys[ids[rows]].repeat_interleave(h_q // h_kv, dim=2)  # [q, L, H_q, D]
        v = values[ids[rows]].repeat_interleave(h_q // h_kv, dim=2)
        scores = torch.einsum("qhd,qlhd->qhl", q[rows], k) * (1.0 / d**0.5 if sm_scale is None else sm_scale)
        scores = scores.masked_fill(~valid[rows, None, :], float("-inf"))
        out[rows] = torch.einsum("qhl,qlhd->qhd", torch.softmax(scores, dim=-1), v)
    return out


def assert_close_to_reference(
    out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: TreePlan, sm_scale: float | None = None
) -> None:
    """Error against the fp32 reference at most twice PyTorch's own low-precision error (both
    with softmax scale ``sm_scale``, default 1/sqrt(D)).

    PyTorch's error is floored at one unit in the last place at the output's scale: over a
    handful of outputs it can round luckily and come out near zero.
    """
    assert out.shape == q.shape and out.dtype == q.dtype
    ref = tree_attention(q, k, v, plan, sm_scale=sm_scale, backend="reference").float()
    low = low_precision_attention(q, k, v, plan, sm_scale).float()
    err = (out.float() - ref).abs().max().item()
    ulp = torch.finfo(q.dtype).eps * ref.abs().max().item()
    yardstick = max((low - ref).abs().max().item(), ulp)
    assert torch.isfinite(out).all()
    assert err <= 2.0 * yardstick + 1e-6, f"kernel error {err:.3g} vs PyTorch {q.dtype} error {yardstick:.3g}"
