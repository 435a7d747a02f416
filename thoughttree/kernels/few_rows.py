"""Projections of a few token rows: the launches of :mod:`few_rows_kernels`, one pass over the
weight, one program per block of outputs.

A decode step multiplies a handful of rows by every weight of the model, so each projection is a
read of its weight and little else. Here each program streams the full K of ``block_n`` weight
rows through a software pipeline and writes its outputs once (:func:`few_rows_linear`). The MLP's
gate and up projections can share programs (``gated``): each program then holds matching gate and
up outputs and writes their SiLU product. The q/k/v projection's programs take the two halves of
a head's rotary pairs in turn and rotate and store them in their epilogue
(:func:`few_rows_rope_store`). The attention output and MLP down projections add the residual
stream in their epilogue and leave the next RMSNorm to the projection after them
(:func:`few_rows_add_norm`): a norm needs a whole row, which no program holds, so each program
writes its columns' sums of squares and the next projection scales its float32 product by each
row's RMS. On GPUs that launch a kernel behind another, those two and the q/k/v projection start
while the kernel before them finishes (see :func:`_launch`). Which calls take these kernels is
:mod:`linear`'s part.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton

from .device import dependent_launch
from .few_rows_kernels import few_rows_kernel, qkv_rope_kernel

ROW_LIMIT = 64  # the most rows the kernel takes at all


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


def _check_projection(name: str, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    """The shapes and strides every few-row launch needs, or a ValueError naming ``name``."""
    if weight.shape[1] != x.shape[1] or (bias is not None and bias.shape != (weight.shape[0],)):
        raise ValueError(f"{name}: x {tuple(x.shape)}, weight {tuple(weight.shape)} and bias must agree on K and N")
    if x.shape[0] > ROW_LIMIT or x.stride(1) != 1 or weight.stride(1) != 1:
        raise ValueError(f"{name} takes at most {ROW_LIMIT} rows with unit stride along K; got x {tuple(x.shape)}")


def _precision(x: torch.Tensor) -> str:
    """The products' precision: float32 as torch's matmul computes it by default (no TF32)."""
    return "ieee" if x.dtype == torch.float32 else "tf32"


def _check_sums(name: str, x: torch.Tensor, row_sums: torch.Tensor | None) -> None:
    if row_sums is not None and (
        row_sums.dim() != 2
        or row_sums.shape[1] != x.shape[0]
        or row_sums.dtype != torch.float32
        or row_sums.stride(1) != 1
    ):
        raise ValueError(
            f"{name}: row_sums must be float32 [P, {x.shape[0]}] with unit stride along the rows, "
            f"got {row_sums.dtype} {tuple(row_sums.shape)}"
        )


def _norm_args(row_sums: torch.Tensor | None, x: torch.Tensor, eps: float) -> tuple[tuple, dict]:
    """The kernels' last arguments (SUMS, n_sums, stride_s, eps) and their NORMED and BLOCK_S;
    x stands in for absent sums."""
    if row_sums is None:
        return (x, 0, 0, 0.0), dict(NORMED=False, BLOCK_S=1)
    blocks = row_sums.shape[0]
    return (row_sums, blocks, row_sums.stride(0), float(eps)), dict(NORMED=True, BLOCK_S=triton.next_power_of_2(blocks))


def few_rows_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    tile: Tiling = NARROW,
    *,
    gated: bool = False,
    row_sums: torch.Tensor | None = None,
    eps: float = 0.0,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """x [T, K] @ weight [N, K].T (+ bias [N]) -> [T, N], accumulated in float32, for T <= ROW_LIMIT.

    gated: weight is [2I, K], gate rows then up rows; returns silu(gate) * up [T, I], each
    projection rounded to x's dtype first and the silu too (``fused.silu_mul`` of the ungated
    output, bit for bit).
    row_sums: [P, T] float32 (see :class:`linear.NormedRows`); each row's product is scaled by
    1 / sqrt(row_sums[:, t].sum() / K + eps) before the bias and the rounding.
    x and weight need unit stride along K; the output has x's dtype (``out``: a contiguous tensor
    of that shape and dtype to write it into).
    """
    _check_projection("few_rows_linear", x, weight, bias)
    _check_sums("few_rows_linear", x, row_sums)
    t, n_in = x.shape
    n_out = weight.shape[0]
    if gated and n_out % 2:
        raise ValueError(f"a gated projection needs gate and up rows alike (an even count), got {n_out}")
    shape = (t, n_out // 2 if gated else n_out)
    if out is not None and (out.shape != shape or out.dtype != x.dtype or not out.is_contiguous()):
        raise ValueError(f"out must be a contiguous {shape} {x.dtype} tensor, got {tuple(out.shape)} {out.dtype}")
    result = torch.empty(shape, dtype=x.dtype, device=x.device) if out is None else out
    if t:
        norm, normed = _norm_args(row_sums, x, eps)
        few_rows_kernel[(triton.cdiv(result.shape[1], tile.block_n // 2 if gated else tile.block_n),)](
            x,
            weight,
            bias if bias is not None else weight,
            result,
            x,
            x,
            x,
            x,
            t,
            n_in,
            n_out,
            x.stride(0),
            weight.stride(0),
            result.stride(0),
            0,
            0,
            0,
            *norm,
            **_launch(tile, t, x),
            **normed,
            HAS_BIAS=bias is not None,
            GATED=gated,
            ADD_NORM=False,
        )
    return result


def few_rows_add_norm(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    residual: torch.Tensor,
    norm_weight: torch.Tensor,
    tile: Tiling = NARROW,
    *,
    dependent: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The projection ``few_rows_linear(x, weight, bias, tile)`` added to the residual stream, and
    RMSNorm of the sum left to the next projection, in one launch.

    Args:
        x: [T <= ROW_LIMIT, K]; weight: [N, K]; bias: [N] or None.
        residual: [T, N] in x's dtype; norm_weight: [N].
        dependent: launched behind the kernel before it (see :func:`_launch`); None: where the
            device can.
    Returns:
        (weighted, sums, h): h = the projection (rounded) + residual, rounded, as
        ``fused.add_rms_norm``'s new residual [T, N]; weighted = h * norm_weight, rounded,
        [T, N]; sums [P, T] float32, the sums of squares of h's rows in each program's
        columns (P programs). See :class:`linear.NormedRows`.
    """
    _check_projection("few_rows_add_norm", x, weight, bias)
    t, n_in = x.shape
    n_out = weight.shape[0]
    if (
        residual.shape != (t, n_out)
        or residual.dtype != x.dtype
        or residual.stride(1) != 1
        or norm_weight.shape != (n_out,)
    ):
        raise ValueError(
            f"few_rows_add_norm: residual {tuple(residual.shape)} ({residual.dtype}, unit stride along N) "
            f"and norm weight {tuple(norm_weight.shape)} must fit [{t}, {n_out}] in {x.dtype}"
        )
    programs = triton.cdiv(n_out, tile.block_n)
    weighted = torch.empty(t, n_out, dtype=x.dtype, device=x.device)
    h = torch.empty_like(weighted)
    sums = torch.empty(programs, t, dtype=torch.float32, device=x.device)
    if t:
        norm, normed = _norm_args(None, x, 0.0)
        few_rows_kernel[(programs,)](
            x,
            weight,
            bias if bias is not None else weight,
            weighted,
            residual,
            norm_weight,
            h,
            sums,
            t,
            n_in,
            n_out,
            x.stride(0),
            weight.stride(0),
            weighted.stride(0),
            residual.stride(0),
            h.stride(0),
            sums.stride(0),
            *norm,
            **_launch(tile, t, x, dependent),
            **normed,
            HAS_BIAS=bias is not None,
            GATED=False,
            ADD_NORM=True,
        )
    return weighted, sums, h


def _launch(tile: Tiling, t: int, x: torch.Tensor, dependent: bool | None = False) -> dict:
    """The launch's parameters for ``t`` rows of x.

    dependent: a programmatic dependent launch (None: where the device can). Its programs start
    while the kernel before it finishes and wait for its end before reading x; each lets the
    kernel after it launch as it starts. Decode steps measured faster with the q/k/v, attention
    output and MLP down projections launched so, and slower with the gate/up projection and the
    LM head too (docs/perf-log/), so :func:`few_rows_linear` never is."""
    block_m = max(16, triton.next_power_of_2(t))
    if dependent and not dependent_launch(x.device):
        raise ValueError(f"a dependent launch needs a CUDA GPU of compute capability 9.0 or later, not {x.device}")
    behind = dependent_launch(x.device) if dependent is None else dependent
    return dict(
        BLOCK_M=block_m,
        BLOCK_N=tile.block_n,
        BLOCK_K=tile.block_k,
        STAGES=_stages(tile, block_m, x),
        SWAP=tile.swap,
        num_warps=tile.warps,
        PRECISION=_precision(x),
        DEPENDENT=behind,
        **({"launch_pdl": True} if behind else {}),
    )


def rope_misfit(weight_rows: int, num_heads: int, num_kv_heads: int, tile: Tiling) -> str | None:
    """Why a q/k/v weight of ``weight_rows`` rows cannot take the rotary epilogue in ``tile``
    (the rows are not the heads of one even head dim, or half a head holds no whole block of the
    tile's rotary pairs); None where it can."""
    heads = num_heads + 2 * num_kv_heads
    d = weight_rows // heads
    if d * heads != weight_rows or d % 2:
        return f"weight rows {weight_rows} are not {num_heads} + 2 x {num_kv_heads} heads of an even head dim"
    if (d // 2) % (tile.block_n // 2):
        return f"head dim {d} must hold whole blocks of {tile.block_n // 2} rotary pairs per half"
    return None


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
    *,
    row_sums: torch.Tensor | None = None,
    eps: float = 0.0,
    dependent: bool | None = None,
) -> torch.Tensor:
    """``fused.rope_store`` of the q/k/v projection ``few_rows_linear(x, weight, bias, tile)`` in one
    launch: the projection's epilogue rotates and stores, rounding where the two kernels round
    (on a GPU some values land one rounding step from theirs: the compiled kernels differ).

    Args:
        x: [T <= ROW_LIMIT, K]; weight: [(num_heads + 2 * num_kv_heads) * D, K], the query heads'
            rows, then the key heads', then the value heads'; bias: [that many] or None.
        positions, inv_freq, k_cache, v_cache, slots: as ``fused.rope_store``.
        tile: half a head's dims must hold whole blocks of ``tile.block_n // 2`` rotary pairs.
        row_sums, eps: x's rows normed, as in :func:`few_rows_linear`.
        dependent: as :func:`few_rows_add_norm`'s.
    Returns:
        rotated q, [T, num_heads, D].
    """
    t, n_in = x.shape
    d = weight.shape[0] // (num_heads + 2 * num_kv_heads)
    misfit = rope_misfit(weight.shape[0], num_heads, num_kv_heads, tile)
    if misfit is not None:
        raise ValueError(f"few_rows_rope_store: {misfit}")
    if inv_freq.shape != (d // 2,):
        raise ValueError(
            f"few_rows_rope_store: inv_freq {tuple(inv_freq.shape)} must hold {d // 2} frequencies (half the head dim)"
        )
    _check_projection("few_rows_rope_store", x, weight, bias)
    _check_sums("few_rows_rope_store", x, row_sums)
    if (
        positions.shape != (t,)
        or slots.shape != (t,)
        or k_cache.shape[2:] != (num_kv_heads, d)
        or v_cache.shape != k_cache.shape
        or v_cache.dtype != k_cache.dtype
    ):
        raise ValueError(
            f"few_rows_rope_store: positions {tuple(positions.shape)}, slots {tuple(slots.shape)} "
            f"and caches {tuple(k_cache.shape)} (one dtype) must fit {t} rows of {num_kv_heads} "
            f"KV heads of {d}"
        )
    if k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
        raise ValueError("few_rows_rope_store: the head dimension of the caches must be contiguous")
    q = torch.empty(t, num_heads, d, dtype=x.dtype, device=x.device)
    if t == 0:
        return q
    norm, normed = _norm_args(row_sums, x, eps)
    qkv_rope_kernel[(weight.shape[0] // tile.block_n,)](
        x,
        weight,
        bias if bias is not None else weight,
        positions,
        inv_freq,
        q,
        k_cache,
        v_cache,
        slots,
        k_cache.shape[1],
        t,
        n_in,
        x.stride(0),
        weight.stride(0),
        q.stride(0),
        q.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        v_cache.stride(0),
        v_cache.stride(1),
        v_cache.stride(2),
        *norm,
        HQ=num_heads,
        HKV=num_kv_heads,
        HALF=d // 2,
        **_launch(tile, t, x, dependent),
        **normed,
        HAS_BIAS=bias is not None,
    )
    return q
