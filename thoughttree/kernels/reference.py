"""Plain-PyTorch references, written in problem terms (not mirroring any kernel's tiling)."""

from __future__ import annotations

import math

import torch

from .plan.tree_plan import TreePlan


CHUNK_BYTES = 1 << 30  # the most the keys (or values) gathered for one chunk of query rows take


def query_chunks(num_q: int, row_bytes: int, budget: int | None = None) -> list[slice]:
    """Consecutive slices of ``num_q`` query rows whose gathered keys (``row_bytes`` per row)
    stay within ``budget`` bytes, at least one row each: a long shared prompt read by many rows
    would otherwise be gathered once per row all at once."""
    step = max(1, (CHUNK_BYTES if budget is None else budget) // max(1, row_bytes))
    return [slice(a, min(a + step, num_q)) for a in range(0, num_q, step)]


def tree_attention_reference(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    plan: TreePlan,
    sm_scale: float | None = None,
) -> torch.Tensor:
    """Each query row attends, in float32, to the KV slots its plan says it sees.

    Rows are taken a chunk at a time (:func:`query_chunks`), so memory stays bounded however
    long the views are.

    Args:
        q: [Q, H_q, D] queries.
        k_cache, v_cache: [num_pages, page_size, H_kv, D]; H_q is a multiple of H_kv (GQA).
        plan: from :func:`plan_tree_attention`.
    Returns:
        [Q, H_q, D] in q's dtype.
    """
    num_q, h_q, d = q.shape
    h_kv = k_cache.shape[2]
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(d)
    ids, valid = plan.padded_query_slots  # [Q, L], [Q, L]
    group = h_q // h_kv
    qg = q.float().reshape(num_q, h_kv, group, d)
    out = torch.empty(num_q, h_kv, group, d, dtype=torch.float32, device=q.device)
    keys, values = k_cache.reshape(-1, h_kv, d), v_cache.reshape(-1, h_kv, d)
    for rows in query_chunks(num_q, ids.shape[1] * h_kv * d * 4):
        k = keys[ids[rows]].float()  # [q, L, H_kv, D]
        v = values[ids[rows]].float()
        scores = torch.einsum("qhgd,qlhd->qhgl", qg[rows], k) * scale
        scores = scores.masked_fill(~valid[rows, None, None, :], float("-inf"))
        out[rows] = torch.einsum("qhgl,qlhd->qhgd", torch.softmax(scores, dim=-1), v)
    return out.reshape(num_q, h_q, d).to(q.dtype)


def store_kv_reference(
    k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor
) -> None:
    """Write k, v ([T, H_kv, D]) into the caches ([num_pages, page_size, H_kv, D]) at ``slots`` ([T])."""
    h_kv, d = k_cache.shape[2], k_cache.shape[3]
    k_cache.view(-1, h_kv, d)[slots] = k.to(k_cache.dtype)
    v_cache.view(-1, h_kv, d)[slots] = v.to(v_cache.dtype)


_M32 = 0xFFFFFFFF


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """(x * c) mod 2**32 for x < 2**32 without overflowing int64."""
    lo, hi = x & 0xFFFF, x >> 16
    return (lo * c + (((hi * c) & 0xFFFF) << 16)) & _M32


def _hash32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer finaliser (xorshift-multiply) applied elementwise to int64 in [0, 2**32)."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def uniform_noise(seeds: torch.Tensor, steps: torch.Tensor, vocab: int) -> torch.Tensor:
    """[R, vocab] float32 in (0, 1), a pure function of (seed, step, token id) per row."""
    ids = torch.arange(vocab, device=seeds.device, dtype=torch.int64)
    return uniform_noise_at(seeds[:, None], steps[:, None], ids[None, :])


def uniform_noise_at(seeds: torch.Tensor, steps: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """The noise :func:`uniform_noise` gives token ``ids`` at (seed, step): float32 in (0, 1),
    elementwise over the broadcast int64 ``seeds``, ``steps`` and ``ids``."""
    lo, hi = seeds & _M32, (seeds >> 32) & _M32
    key = _hash32(_hash32(lo ^ _hash32(hi + 0x9E3779B9)) ^ (steps & _M32))
    bits = _hash32((key + _hash32(ids) * 2654435761) & _M32)
    return ((bits >> 8).float() + 0.5) / float(1 << 24)


def gumbel_sample_reference(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    seeds: torch.Tensor,
    steps: torch.Tensor,
    scores: torch.Tensor | None = None,
) -> torch.Tensor:
    """Seeded Gumbel-max draw per row; shapes and meaning as :func:`kernels.sample.gumbel_sample`.

    Returns [R, 2] float64: the chosen token (argmax of the logits for temperature 0, else of
    ``scores + g`` or ``logits / temperature + g``) and its log-softmax under the raw logits.
    """
    greedy = temperature == 0
    if scores is None:
        scores = logits / torch.where(greedy, torch.ones_like(temperature), temperature)[:, None]
    gumbel = -torch.log(-torch.log(uniform_noise(seeds, steps, logits.shape[1])))
    chosen = torch.where(greedy, logits.argmax(dim=-1), (scores + gumbel).argmax(dim=-1))
    picked = torch.log_softmax(logits, dim=-1).gather(1, chosen[:, None])[:, 0]
    return torch.stack([chosen.double(), picked.double()], dim=1)


def rms_norm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dim, in float32, rounded to x's dtype before the weight (as Llama does)."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def add_rms_norm_reference(
    x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(RMSNorm(x + residual), x + residual) for [T, N] rows; without a residual, of x alone."""
    total = x if residual is None else x + residual
    return rms_norm_reference(total, weight, eps), total


def rope_cos_sin(
    positions: torch.Tensor, inv_freq: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [T, 1, D] of each position's rotary angles, in ``dtype``."""
    freqs = positions.float()[:, None] * inv_freq[None, :]  # [T, D/2]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype)[:, None, :], emb.sin().to(dtype)[:, None, :]


def rotate_reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of x [T, H, D]: x * cos + rotate_half(x) * sin."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def rope_store_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    positions: torch.Tensor,
    inv_freq: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slots: torch.Tensor,
) -> torch.Tensor:
    """Rotate q and k by position, store rotated k and v at ``slots`` (-1: not stored); returns rotated q."""
    cos, sin = rope_cos_sin(positions, inv_freq, q.dtype)
    write = slots >= 0
    store_kv_reference(k_cache, v_cache, rotate_reference(k, cos, sin)[write], v[write], slots[write])
    return rotate_reference(q, cos, sin).contiguous()


def silu_mul_reference(gate_up: torch.Tensor) -> torch.Tensor:
    """[T, 2I] -> [T, I]: silu(gate) * up."""
    gate, up = gate_up.chunk(2, dim=-1)
    return torch.nn.functional.silu(gate) * up


def linear_reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [T, K] @ weight [N, K].T (+ bias [N]) in float32, rounded once to x's dtype: [T, N]."""
    out = x.float() @ weight.float().T
    if bias is not None:
        out = out + bias.float()
    return out.to(x.dtype)


def normed_linear_reference(
    h: torch.Tensor, norm_weight: torch.Tensor, eps: float, weight: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """RMSNorm(h) [T, K] @ weight [N, K].T (+ bias [N]) as a projection of normed rows computes it
    (``linear.NormedRows``): h * norm_weight rounded to h's dtype, multiplied in float32, each
    row scaled by 1 / sqrt(mean(h²) + eps), then the bias; rounded once to h's dtype."""
    hf = h.float()
    weighted = (hf * norm_weight.float()).to(h.dtype).float()
    out = (weighted @ weight.float().T) / torch.sqrt(hf.pow(2).mean(-1, keepdim=True) + eps)
    if bias is not None:
        out = out + bias.float()
    return out.to(h.dtype)
