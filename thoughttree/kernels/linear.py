"""Projections of a few token rows: one pass over the weight, one program per block of outputs.

A decode step multiplies a handful of rows by every weight of the model, so each projection is a
read of its weight and little else. On an H200, cuBLAS reads an 8B model's short projections
(q/k/v, attention output) at 58-78% of the copy rate, and splits the attention output and MLP down
over K with a reduction launch. Here each program streams the full K of ``block_n`` weight rows through a
software pipeline and writes its outputs once: decode steps of 8-32 rows took 3-7% less time
than with cuBLAS (BENCHMARKS.md: "Few-row projections on Triton"). The MLP's gate and up
projections can share programs (``gated``): each program then holds matching gate and up outputs
and writes their SiLU product, so the step has no ``silu_mul`` launch and no gate/up output
(1.1-1.4% less per step at 8-32 rows). Likewise the q/k/v projection's programs take the two
halves of a head's rotary pairs in turn and rotate and store them in their epilogue
(:func:`few_rows_rope_store`: no ``rope_store`` launch, 1.1-1.6% less per step).
References: ``linear_reference`` in :mod:`reference`, then ``silu_mul_reference`` where gated,
``rotate_reference`` and ``store_kv_reference`` for the rotary epilogue.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from .fused import rope_store, rotate_halves, silu_mul

MAX_ROWS = 32  # rows up to which :func:`linear` takes the few-row kernel by default
ROW_LIMIT = 64  # the most rows the kernel takes at all
# Fewest output blocks (programs) it takes: one program per block cannot fill an H200's 132 SMs
# with fewer, where cuBLAS splits K. Measured on weights of 96 to 2004 blocks; narrower ones (a
# small model's) stay with cuBLAS.
MIN_PROGRAMS = 96


@dataclass(frozen=True)
class Tiling:
    """One program's share: ``block_n`` weight rows, ``block_k`` of K per pipeline stage.

    swap: the weight rows are the tensor-core product's M side and the token rows its N side
    (wgmma needs 64 rows on M; a few token rows would be mostly padding there).
    """

    block_n: int
    block_k: int
    stages: int
    swap: bool
    warps: int = 4


NARROW = Tiling(block_n=32, block_k=256, stages=5, swap=False)
WIDE = Tiling(block_n=64, block_k=128, stages=4, swap=True)


def tiling(n_out: int) -> Tiling | None:
    """The tiling for a weight of ``n_out`` rows, None where too few programs fill the GPU.

    Measured on an H200 with Llama-3-8B's projections at 8-32 rows: 64-row blocks for the wide
    ones (q/k/v, gate/up, LM head), 32-row blocks where 64 would leave SMs idle (attention
    output, MLP down).
    """
    if triton.cdiv(n_out, WIDE.block_n) >= MIN_PROGRAMS:
        return WIDE
    if triton.cdiv(n_out, NARROW.block_n) >= MIN_PROGRAMS:
        return NARROW
    return None


@functools.cache
def _shared_memory(index: int) -> int:
    """Bytes of shared memory one program may take on CUDA device ``index``."""
    return getattr(torch.cuda.get_device_properties(index), "shared_memory_per_block_optin", 232448)


def _stages(tile: Tiling, block_m: int, x: torch.Tensor) -> int:
    """The tile's pipeline depth, cut to what the device's shared memory holds for ``block_m``
    rows (64 KiB kept for the rest of the program: layout changes, the epilogue)."""
    if x.device.type != "cuda":
        return tile.stages
    stage = (block_m + tile.block_n) * tile.block_k * x.element_size()
    return max(1, min(tile.stages, (_shared_memory(x.device.index or 0) - (64 << 10)) // stage))


@triton.jit
def _silu_gate(g, u, DTYPE: tl.constexpr):
    """silu(g) * u of the rounded projections g, u (float32 in): as :func:`fused.silu_mul`."""
    g = g.to(DTYPE).to(tl.float32)
    act = (g / (1.0 + tl.exp(-g))).to(DTYPE).to(tl.float32)
    return act * u.to(DTYPE).to(tl.float32)


@triton.jit
def _project(X, W, B, offs_n, n_ok, t, n_in, stride_x, stride_w,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, STAGES: tl.constexpr,
             SWAP: tl.constexpr, HAS_BIAS: tl.constexpr, PRECISION: tl.constexpr):
    """x[:t] @ W[offs_n].T (+ B[offs_n]) in float32, [BLOCK_M, BLOCK_N]: all of K, one weight pass."""
    offs_m = tl.arange(0, BLOCK_M)
    offs_k = tl.arange(0, BLOCK_K)
    m_ok = offs_m < t
    if SWAP:
        acc = tl.zeros([BLOCK_N, BLOCK_M], tl.float32)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in tl.range(0, n_in, BLOCK_K, num_stages=STAGES):
        k = k0 + offs_k
        k_ok = k < n_in
        w = tl.load(W + offs_n[:, None].to(tl.int64) * stride_w + k[None, :], mask=n_ok[:, None] & k_ok[None, :], other=0.0)
        x = tl.load(X + offs_m[:, None] * stride_x + k[None, :], mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        if SWAP:
            acc += tl.dot(w, tl.trans(x), input_precision=PRECISION)
        else:
            acc += tl.dot(x, tl.trans(w), input_precision=PRECISION)
    if SWAP:
        acc = tl.trans(acc)
    if HAS_BIAS:
        acc += tl.load(B + offs_n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    return acc


@triton.jit(do_not_specialize=["t"])
def _few_rows_kernel(
    X, W, B, OUT, t, n_in, n_out, stride_x, stride_w, stride_o,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, STAGES: tl.constexpr,
    SWAP: tl.constexpr, HAS_BIAS: tl.constexpr, PRECISION: tl.constexpr, GATED: tl.constexpr,
):
    offs_m = tl.arange(0, BLOCK_M)
    m_ok = offs_m < t
    r = tl.arange(0, BLOCK_N)
    if GATED:
        # n_out = 2I weight rows, gate then up: the program's BLOCK_N // 2 outputs take gate row j
        # and up row I + j in turn, so each pair meets in one accumulator row pair.
        col = tl.program_id(0) * (BLOCK_N // 2) + r // 2
        n_ok = col < n_out // 2
        offs_n = col + (r % 2) * (n_out // 2)
    else:
        offs_n = tl.program_id(0) * BLOCK_N + r
        n_ok = offs_n < n_out
    acc = _project(X, W, B, offs_n, n_ok, t, n_in, stride_x, stride_w,
                   BLOCK_M, BLOCK_N, BLOCK_K, STAGES, SWAP, HAS_BIAS, PRECISION)
    if GATED:
        g, u = tl.split(tl.reshape(acc, [BLOCK_M, BLOCK_N // 2, 2]))
        cols = tl.program_id(0) * (BLOCK_N // 2) + tl.arange(0, BLOCK_N // 2)
        out = _silu_gate(g, u, OUT.dtype.element_ty)
        tl.store(OUT + offs_m[:, None] * stride_o + cols[None, :], out.to(OUT.dtype.element_ty),
                 mask=m_ok[:, None] & (cols < n_out // 2)[None, :])
    else:
        tl.store(OUT + offs_m[:, None] * stride_o + offs_n[None, :], acc.to(OUT.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


@triton.jit(do_not_specialize=["t"])
def _qkv_rope_kernel(
    X, W, B, POS, INV_FREQ, Q_OUT, KC, VC, SLOTS, page_size, t, n_in, stride_x, stride_w, stride_ot, stride_oh,
    stride_cp, stride_cs, stride_ch, stride_dp, stride_ds, stride_dh,
    HQ: tl.constexpr, HKV: tl.constexpr, HALF: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, STAGES: tl.constexpr,
    SWAP: tl.constexpr, HAS_BIAS: tl.constexpr, PRECISION: tl.constexpr,
):
    # The weight's rows are the query heads', then the key heads', then the value heads', 2 * HALF
    # each. A program takes BLOCK_N // 2 rotary pairs (dims j and HALF + j) of one head, in turn,
    # so each pair meets in one accumulator row pair, and writes them as fused.rope_store does.
    P: tl.constexpr = BLOCK_N // 2
    head = tl.program_id(0) // (HALF // P)
    j = tl.program_id(0) % (HALF // P) * P + tl.arange(0, P)
    r = tl.arange(0, BLOCK_N)
    offs_n = head * 2 * HALF + tl.program_id(0) % (HALF // P) * P + r // 2 + (r % 2) * HALF
    acc = _project(X, W, B, offs_n, offs_n >= 0, t, n_in, stride_x, stride_w,
                   BLOCK_M, BLOCK_N, BLOCK_K, STAGES, SWAP, HAS_BIAS, PRECISION)
    dt = Q_OUT.dtype.element_ty
    x1, x2 = tl.split(tl.reshape(acc, [BLOCK_M, P, 2]))
    x1, x2 = x1.to(dt), x2.to(dt)  # the projection's output, rounded
    rows = tl.arange(0, BLOCK_M)
    m_ok = rows < t
    if head < HQ + HKV:  # queries and keys turn; values are stored as they are
        angle = tl.load(POS + rows, mask=m_ok, other=0).to(tl.float32)[:, None] * tl.load(INV_FREQ + j)[None, :]
        x1, x2 = rotate_halves(x1, x2, tl.cos(angle).to(dt).to(tl.float32), tl.sin(angle).to(dt).to(tl.float32))
    if head < HQ:
        dst = Q_OUT + rows[:, None].to(tl.int64) * stride_ot + head * stride_oh + j[None, :]
        tl.store(dst, x1, mask=m_ok[:, None])
        tl.store(dst + HALF, x2, mask=m_ok[:, None])
    else:
        # A row that only recomputes its logits (slot -1) writes nothing.
        slot = tl.load(SLOTS + rows, mask=m_ok, other=-1).to(tl.int64)
        ok = (slot >= 0)[:, None]
        slot = tl.maximum(slot, 0)
        page = slot // page_size
        off = slot - page * page_size
        if head < HQ + HKV:
            dst = KC + (page * stride_cp + off * stride_cs)[:, None] + (head - HQ) * stride_ch + j[None, :]
        else:
            dst = VC + (page * stride_dp + off * stride_ds)[:, None] + (head - HQ - HKV) * stride_dh + j[None, :]
        tl.store(dst, x1.to(KC.dtype.element_ty), mask=ok)
        tl.store(dst + HALF, x2.to(KC.dtype.element_ty), mask=ok)


def _check_projection(name: str, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    """The shapes and strides every few-row launch needs, or a ValueError naming ``name``."""
    if weight.shape[1] != x.shape[1] or (bias is not None and bias.shape != (weight.shape[0],)):
        raise ValueError(f"{name}: x {tuple(x.shape)}, weight {tuple(weight.shape)} and bias must agree on K and N")
    if x.shape[0] > ROW_LIMIT or x.stride(1) != 1 or weight.stride(1) != 1:
        raise ValueError(f"{name} takes at most {ROW_LIMIT} rows with unit stride along K; got x {tuple(x.shape)}")


def _precision(x: torch.Tensor) -> str:
    """The products' precision: float32 as torch's matmul computes it by default (no TF32)."""
    return "ieee" if x.dtype == torch.float32 else "tf32"


def few_rows_linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, tile: Tiling = NARROW, *, gated: bool = False,
) -> torch.Tensor:
    """x [T, K] @ weight [N, K].T (+ bias [N]) -> [T, N], accumulated in float32, for T <= ROW_LIMIT.

    gated: weight is [2I, K], gate rows then up rows; returns silu(gate) * up [T, I], each
    projection rounded to x's dtype first and the silu too (``fused.silu_mul`` of the ungated
    output, bit for bit).
    x and weight need unit stride along K; the output has x's dtype.
    """
    _check_projection("few_rows_linear", x, weight, bias)
    t, n_in = x.shape
    n_out = weight.shape[0]
    if gated and n_out % 2:
        raise ValueError(f"a gated projection needs gate and up rows alike (an even count), got {n_out}")
    out = torch.empty(t, n_out // 2 if gated else n_out, dtype=x.dtype, device=x.device)
    if t:
        block_m = max(16, triton.next_power_of_2(t))
        _few_rows_kernel[(triton.cdiv(out.shape[1], tile.block_n // 2 if gated else tile.block_n),)](
            x, weight, bias if bias is not None else weight, out, t, n_in, n_out, x.stride(0), weight.stride(0), out.stride(0),
            BLOCK_M=block_m, BLOCK_N=tile.block_n, BLOCK_K=tile.block_k, STAGES=_stages(tile, block_m, x),
            SWAP=tile.swap, HAS_BIAS=bias is not None, GATED=gated, num_warps=tile.warps, PRECISION=_precision(x),
        )
    return out


def _tile(x: torch.Tensor, weight: torch.Tensor, max_rows: int) -> Tiling | None:
    """The kernel's tiling for this call, None where it goes to cuBLAS."""
    if x.dim() != 2 or not 0 < x.shape[0] <= min(max_rows, ROW_LIMIT) or x.stride(1) != 1 or weight.stride(1) != 1:
        return None
    return tiling(weight.shape[0])


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, max_rows: int = MAX_ROWS) -> torch.Tensor:
    """``F.linear`` whose few-row calls (at most ``max_rows`` rows, and ROW_LIMIT, of a wide
    enough weight) take :func:`few_rows_linear`."""
    tile = _tile(x, weight, max_rows)
    return F.linear(x, weight, bias) if tile is None else few_rows_linear(x, weight, bias, tile)


def linear_silu_mul(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, max_rows: int = MAX_ROWS) -> torch.Tensor:
    """``silu_mul(F.linear(x, weight, bias))`` (weight [2I, K], gate rows then up rows -> [T, I]),
    in one launch of the few-row kernel where :func:`linear` would take it."""
    tile = _tile(x, weight, max_rows)
    if tile is None or weight.shape[0] % 2:
        return silu_mul(F.linear(x, weight, bias))
    return few_rows_linear(x, weight, bias, tile, gated=True)


def few_rows_rope_store(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    positions: torch.Tensor,
    inv_freq: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slots: torch.Tensor,
    num_heads: int,
    num_kv_heads: int,
    tile: Tiling = WIDE,
) -> torch.Tensor:
    """``fused.rope_store`` of the q/k/v projection ``few_rows_linear(x, weight, bias, tile)`` in one
    launch: the projection's epilogue rotates and stores, rounding where the two kernels round
    (on an H200 some values land one rounding step from theirs: the compiled kernels differ).

    Args:
        x: [T <= ROW_LIMIT, K]; weight: [(num_heads + 2 * num_kv_heads) * D, K], the query heads'
            rows, then the key heads', then the value heads'; bias: [that many] or None.
        positions, inv_freq, k_cache, v_cache, slots: as ``fused.rope_store``.
        tile: half a head's dims must hold whole blocks of ``tile.block_n // 2`` rotary pairs.
    Returns:
        rotated q, [T, num_heads, D].
    """
    t, n_in = x.shape
    d = weight.shape[0] // (num_heads + 2 * num_kv_heads)
    if d * (num_heads + 2 * num_kv_heads) != weight.shape[0] or d % 2 or inv_freq.shape != (d // 2,):
        raise ValueError(f"few_rows_rope_store: weight rows {weight.shape[0]} are not {num_heads} + 2 x {num_kv_heads} heads "
                         f"of an even head dim with inv_freq {tuple(inv_freq.shape)}")
    if (d // 2) % (tile.block_n // 2):
        raise ValueError(f"few_rows_rope_store: head dim {d} must hold whole blocks of {tile.block_n // 2} rotary pairs per half")
    _check_projection("few_rows_rope_store", x, weight, bias)
    if (positions.shape != (t,) or slots.shape != (t,) or k_cache.shape[2:] != (num_kv_heads, d)
            or v_cache.shape != k_cache.shape or v_cache.dtype != k_cache.dtype):
        raise ValueError(f"few_rows_rope_store: positions {tuple(positions.shape)}, slots {tuple(slots.shape)} and caches "
                         f"{tuple(k_cache.shape)} (one dtype) must fit {t} rows of {num_kv_heads} KV heads of {d}")
    if k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
        raise ValueError("few_rows_rope_store: the head dimension of the caches must be contiguous")
    q = torch.empty(t, num_heads, d, dtype=x.dtype, device=x.device)
    if t == 0:
        return q
    block_m = max(16, triton.next_power_of_2(t))
    _qkv_rope_kernel[(weight.shape[0] // tile.block_n,)](
        x, weight, bias if bias is not None else weight, positions, inv_freq, q, k_cache, v_cache, slots, k_cache.shape[1],
        t, n_in, x.stride(0), weight.stride(0), q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        HQ=num_heads, HKV=num_kv_heads, HALF=d // 2,
        BLOCK_M=block_m, BLOCK_N=tile.block_n, BLOCK_K=tile.block_k, STAGES=_stages(tile, block_m, x),
        SWAP=tile.swap, HAS_BIAS=bias is not None, num_warps=tile.warps, PRECISION=_precision(x),
    )
    return q


def linear_rope_store(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    positions: torch.Tensor,
    inv_freq: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slots: torch.Tensor,
    num_heads: int,
    num_kv_heads: int,
    max_rows: int = MAX_ROWS,
) -> torch.Tensor:
    """``fused.rope_store`` of the q/k/v projection ``F.linear(x, weight, bias)`` (split into
    num_heads query, then num_kv_heads key and value heads); in one launch of
    :func:`few_rows_rope_store` where :func:`linear` would take the projection to the kernel and
    the head dim fits its tiling. Returns rotated q, [T, num_heads, D]."""
    t = x.shape[0]
    d = weight.shape[0] // (num_heads + 2 * num_kv_heads)
    tile = _tile(x, weight, max_rows)
    if tile is not None and d * (num_heads + 2 * num_kv_heads) == weight.shape[0] and d % 2 == 0 and (d // 2) % (tile.block_n // 2) == 0:
        return few_rows_rope_store(x, weight, bias, positions, inv_freq, k_cache, v_cache, slots, num_heads, num_kv_heads, tile)
    q, k, v = linear(x, weight, bias, max_rows).split([num_heads * d, num_kv_heads * d, num_kv_heads * d], dim=-1)
    return rope_store(q.view(t, num_heads, d), k.view(t, num_kv_heads, d), v.view(t, num_kv_heads, d),
                      positions, inv_freq, k_cache, v_cache, slots)
