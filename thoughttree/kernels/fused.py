"""Fused per-token layer pieces: residual add + RMSNorm, rotary + KV store, SiLU-gated product.

A decode step of a Llama-family layer is two GEMM pairs and, between them, dozens of small
elementwise kernels (casts, norms, rotary halves, adds). Each kernel here replaces a chain of
them with one pass over the rows and rounds where the eager PyTorch chain rounds, so results
match it to the last bit or within a rounding step. References: ``*_reference`` in
:mod:`reference`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _add_rms_norm_kernel(
    X, RES, W, OUT, RES_OUT, n, eps, stride_x, stride_r, stride_o, stride_ro,
    HAS_RES: tl.constexpr, BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    ok = offs < n
    x = tl.load(X + row * stride_x + offs, mask=ok, other=0.0)
    if HAS_RES:
        # The residual stream is rounded to the model dtype after the add, as the eager add is.
        x = (x.to(tl.float32) + tl.load(RES + row * stride_r + offs, mask=ok, other=0.0).to(tl.float32)).to(x.dtype)
        tl.store(RES_OUT + row * stride_ro + offs, x, mask=ok)
    xf = x.to(tl.float32)
    inv = 1.0 / tl.sqrt(tl.sum(xf * xf, axis=0) / n + eps)
    y = (xf * inv).to(x.dtype).to(tl.float32)
    w = tl.load(W + offs, mask=ok, other=0.0).to(tl.float32)
    tl.store(OUT + row * stride_o + offs, (w * y).to(OUT.dtype.element_ty), mask=ok)


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm of ``x + residual`` (or of ``x``): returns (normed [T, N], new residual [T, N]).

    x, residual: [T, N] in the model dtype; weight: [N]. The sum is rounded to x's dtype before
    the norm (it is the residual stream the next layer adds to).
    """
    t, n = x.shape
    if weight.shape != (n,) or (residual is not None and residual.shape != x.shape):
        raise ValueError(f"add_rms_norm: x {tuple(x.shape)}, residual and weight [{n}] must agree")
    if any(a.stride(-1) != 1 for a in (x, weight) + (() if residual is None else (residual,))):
        raise ValueError("add_rms_norm: x, residual and weight must be contiguous along N (call .contiguous())")
    out = torch.empty_like(x)
    res_out = torch.empty_like(x) if residual is not None else x
    if t:
        _add_rms_norm_kernel[(t,)](
            x, residual if residual is not None else x, weight, out, res_out, n, eps,
            x.stride(0), (residual if residual is not None else x).stride(0), out.stride(0), res_out.stride(0),
            HAS_RES=residual is not None, BLOCK=triton.next_power_of_2(n), num_warps=8 if n >= 4096 else 4,
        )
    return out, res_out


def rope_heads(rows: int) -> int:
    """Heads per rotary program: one (the most programs in flight) for a few rows; from 128 rows
    on, four, whose angles are computed once for them all (measured faster there)."""
    return 4 if rows >= 128 else 1


@triton.jit
def rotate_halves(x1, x2, c, s):
    """Rotary halves (x1, x2) by angles with cosines c and sines s (float32, already rounded to
    the dtype): each product and the sum rounded, as in the eager x * cos + rotate_half(x) * sin."""
    dt = x1.dtype
    a1 = (x1.to(tl.float32) * c).to(dt).to(tl.float32)
    b1 = (-x2.to(tl.float32) * s).to(dt).to(tl.float32)
    a2 = (x2.to(tl.float32) * c).to(dt).to(tl.float32)
    b2 = (x1.to(tl.float32) * s).to(dt).to(tl.float32)
    return (a1 + b1).to(dt), (a2 + b2).to(dt)


@triton.jit
def _rope_store_kernel(
    Q, K, V, POS, INV_FREQ, Q_OUT, KC, VC, SLOTS, page_size,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_ot, stride_oh,
    stride_cp, stride_cs, stride_ch, stride_dp, stride_ds, stride_dh,
    HQ: tl.constexpr, HKV: tl.constexpr, HEADS: tl.constexpr, HALF: tl.constexpr, HALF_PAD: tl.constexpr,
):
    # Program (t, b) takes HEADS heads of token t: query heads first, then key heads (stored with
    # their values). A token's angles are computed once per block of heads, not once per head.
    t = tl.program_id(0).to(tl.int64)
    q_blocks: tl.constexpr = (HQ + HEADS - 1) // HEADS
    b = tl.program_id(1)
    j = tl.arange(0, HALF_PAD)
    j_ok = j < HALF
    angle = tl.load(POS + t).to(tl.float32) * tl.load(INV_FREQ + j, mask=j_ok, other=0.0)
    dt = Q.dtype.element_ty
    c = tl.cos(angle).to(dt).to(tl.float32)[None, :]
    s = tl.sin(angle).to(dt).to(tl.float32)[None, :]
    if b < q_blocks:
        hq = b * HEADS + tl.arange(0, HEADS)[:, None]
        q_ok = (hq < HQ) & j_ok[None, :]
        q_src = Q + t * stride_qt + hq * stride_qh + j[None, :]
        q1, q2 = rotate_halves(tl.load(q_src, mask=q_ok, other=0.0), tl.load(q_src + HALF, mask=q_ok, other=0.0), c, s)
        q_dst = Q_OUT + t * stride_ot + hq * stride_oh + j[None, :]
        tl.store(q_dst, q1, mask=q_ok)
        tl.store(q_dst + HALF, q2, mask=q_ok)
    else:
        slot = tl.load(SLOTS + t).to(tl.int64)
        hk = (b - q_blocks) * HEADS + tl.arange(0, HEADS)[:, None]
        # A row that only recomputes its logits (slot -1) writes nothing.
        kv_ok = (hk < HKV) & j_ok[None, :] & (hk * 0 + slot >= 0)
        slot = tl.maximum(slot, 0)
        page = slot // page_size
        off = slot - page * page_size
        k_src = K + t * stride_kt + hk * stride_kh + j[None, :]
        k1, k2 = rotate_halves(tl.load(k_src, mask=kv_ok, other=0.0), tl.load(k_src + HALF, mask=kv_ok, other=0.0), c,
                               s)
        k_dst = KC + page * stride_cp + off * stride_cs + hk * stride_ch + j[None, :]
        tl.store(k_dst, k1.to(KC.dtype.element_ty), mask=kv_ok)
        tl.store(k_dst + HALF, k2.to(KC.dtype.element_ty), mask=kv_ok)
        v_src = V + t * stride_vt + hk * stride_vh + j[None, :]
        v_dst = VC + page * stride_dp + off * stride_ds + hk * stride_dh + j[None, :]
        tl.store(v_dst, tl.load(v_src, mask=kv_ok, other=0.0).to(VC.dtype.element_ty), mask=kv_ok)
        tl.store(v_dst + HALF, tl.load(v_src + HALF, mask=kv_ok, other=0.0).to(VC.dtype.element_ty), mask=kv_ok)


def rope_store(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    positions: torch.Tensor,
    inv_freq: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slots: torch.Tensor,
) -> torch.Tensor:
    """Rotate q and k by their positions, write rotated k and v into their cache slots; returns q.

    Args:
        q: [T, H_q, D]; k, v: [T, H_kv, D] (views into a fused QKV output are fine).
        positions: [T] int64; inv_freq: [D / 2] float32 (scaling applied).
        k_cache, v_cache: [num_pages, page_size, H_kv, D]; slots: [T] distinct slot ids, -1 for a
            row whose k and v are not stored (it only recomputes its output).
    Returns:
        rotated q, [T, H_q, D] contiguous.
    """
    t, hq, d = q.shape
    hkv = k.shape[1]
    if k.shape != (t, hkv, d) or v.shape != k.shape or positions.shape != (t,) or slots.shape != (t,):
        raise ValueError(f"rope_store: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}, "
                         f"positions {tuple(positions.shape)}, slots {tuple(slots.shape)} disagree")
    if d % 2 or inv_freq.shape != (d // 2,) or k_cache.shape[2:] != (hkv, d):
        raise ValueError(f"rope_store: head_dim {d} needs inv_freq [{d // 2}] and caches [.., .., {hkv}, {d}]")
    if any(x.stride(-1) != 1 for x in (q, k, v, k_cache, v_cache)):
        raise ValueError("rope_store: the head dimension of every tensor must be contiguous")
    q_out = torch.empty(t, hq, d, dtype=q.dtype, device=q.device)
    if t:
        heads = rope_heads(t)
        blocks = triton.cdiv(hq, heads) + triton.cdiv(hkv, heads)
        _rope_store_kernel[(t, blocks)](
            q, k, v, positions, inv_freq, q_out, k_cache, v_cache, slots, k_cache.shape[1],
            q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
            q_out.stride(0), q_out.stride(1),
            k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
            v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
            HQ=hq, HKV=hkv, HEADS=heads, HALF=d // 2, HALF_PAD=triton.next_power_of_2(d // 2), num_warps=1,
        )
    return q_out


@triton.jit
def _silu_mul_kernel(GU, OUT, n, stride_g, stride_o, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    g = tl.load(GU + row * stride_g + offs, mask=ok, other=0.0)
    u = tl.load(GU + row * stride_g + n + offs, mask=ok, other=0.0)
    gf = g.to(tl.float32)
    act = (gf / (1.0 + tl.exp(-gf))).to(g.dtype).to(tl.float32)
    tl.store(OUT + row * stride_o + offs, (act * u.to(tl.float32)).to(OUT.dtype.element_ty), mask=ok)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """[T, 2I] (gate then up) -> [T, I]: silu(gate) * up, silu rounded to the dtype first."""
    t, width = gate_up.shape
    if width % 2 or gate_up.stride(1) != 1:
        raise ValueError(f"silu_mul needs [T, 2I] with contiguous rows, got {tuple(gate_up.shape)}")
    n = width // 2
    out = torch.empty(t, n, dtype=gate_up.dtype, device=gate_up.device)
    block = 1024
    if t:
        _silu_mul_kernel[(t, triton.cdiv(n, block))](gate_up, out, n, gate_up.stride(0), out.stride(0), BLOCK=block,
                                                     num_warps=4)
    return out
