"""Projections of a few token rows on the few-row kernels (:mod:`few_rows`) where they are
faster, else on cuBLAS.

A decode step multiplies a handful of rows by every weight of the model. cuBLAS reads an 8B
model's short projections (q/k/v, attention output) well below the copy rate, and splits the
attention output and MLP down over K with a reduction launch; the few-row kernels, one pass over
the weight, measured faster for decode steps of 8-32 rows (``benchmarks/few_rows.py``;
docs/perf-log/). :func:`linear` sends a call to them where its rows and the weight's width suit
them (:func:`tiling`), as do the fused forms: :func:`linear_silu_mul` (no ``silu_mul`` launch, no
gate/up output), :func:`linear_rope_store` (no ``rope_store`` launch) and :func:`linear_add_norm`,
which leaves the next RMSNorm to the projection after it (:class:`NormedRows`: no
``add_rms_norm`` launch).
References: ``linear_reference`` in :mod:`reference`, then ``silu_mul_reference`` where gated,
``rotate_reference`` and ``store_kv_reference`` for the rotary epilogue, ``add_rms_norm_reference``
and ``normed_linear_reference`` for the norm.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
import triton

from .few_rows import NARROW, ROW_LIMIT, WIDE, Tiling, rope_misfit
from .few_rows import few_rows_add_norm, few_rows_linear, few_rows_rope_store
from .fused import add_rms_norm, rope_store, silu_mul

MAX_ROWS = 32  # rows up to which :func:`linear` takes the few-row kernel by default
# Fewest output blocks (programs) it takes: one program per block cannot fill a 132-SM GPU
# with fewer, where cuBLAS splits K. Measured on weights of 96 to 2004 blocks; narrower ones (a
# small model's) stay with cuBLAS.
MIN_PROGRAMS = 96


def tiling(n_out: int) -> Tiling | None:
    """The tiling for a weight of ``n_out`` rows, None where too few programs fill the GPU.

    Measured with Llama-3-8B's projections at 8-32 rows: 64-row blocks for the wide
    ones (q/k/v, gate/up, LM head), 32-row blocks where 64 would leave SMs idle (attention
    output, MLP down).
    """
    if triton.cdiv(n_out, WIDE.block_n) >= MIN_PROGRAMS:
        return WIDE
    if triton.cdiv(n_out, NARROW.block_n) >= MIN_PROGRAMS:
        return NARROW
    return None


@dataclass(frozen=True)
class NormedRows:
    """RMSNorm(h) of rows h [T, K], left for the next projection to finish.

    ``weighted`` [T, K] is h times the norm's weight, rounded; ``sums`` [P, T] float32 holds the
    rows' sums of squares of h in P blocks of columns (row t's is ``sums[:, t].sum()``). A
    few-row projection of these rows scales each row of its float32 product by
    1 / sqrt(mean(h²) + eps) before its epilogue: RMSNorm rounds h / RMS before the weight,
    this rounds the weighted rows instead and the scale not at all. ``residual`` is h itself:
    :meth:`dense` is RMSNorm(h) as ``fused.add_rms_norm`` computes it, for a projection that
    cannot take the kernel.
    """

    weighted: torch.Tensor
    sums: torch.Tensor
    residual: torch.Tensor
    weight: torch.Tensor
    eps: float

    def dense(self) -> torch.Tensor:
        """RMSNorm(h) [T, K]."""
        return add_rms_norm(self.residual, None, self.weight, self.eps)[0]


Rows = torch.Tensor | NormedRows


def _dense(x: Rows) -> torch.Tensor:
    return x.dense() if isinstance(x, NormedRows) else x


def _operand(x: Rows) -> tuple[torch.Tensor, dict]:
    """The kernel's x and, for normed rows, their sums of squares and eps."""
    if isinstance(x, NormedRows):
        return x.weighted, {"row_sums": x.sums, "eps": x.eps}
    return x, {}


def _tile(x: torch.Tensor, weight: torch.Tensor, max_rows: int) -> Tiling | None:
    """The kernel's tiling for this call, None where it goes to cuBLAS."""
    if x.dim() != 2 or not 0 < x.shape[0] <= min(max_rows, ROW_LIMIT) or x.stride(1) != 1 or weight.stride(1) != 1:
        return None
    return tiling(weight.shape[0])


def linear(
    x: Rows, weight: torch.Tensor, bias: torch.Tensor | None = None, max_rows: int = MAX_ROWS,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """``F.linear`` whose few-row calls (at most ``max_rows`` rows, and ROW_LIMIT, of a wide
    enough weight) take :func:`few_rows_linear`; normed rows are finished by the kernel or
    made dense for cuBLAS. ``out``: a contiguous [T, N] tensor in x's dtype to write into."""
    rows, norm = _operand(x)
    tile = _tile(rows, weight, max_rows)
    if tile is not None:
        return few_rows_linear(rows, weight, bias, tile, **norm, out=out)
    if out is None:
        return F.linear(_dense(x), weight, bias)
    return dense_into(_dense(x), weight, bias, out)


def dense_into(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` [T, N] written into ``out`` (the same cuBLAS product)."""
    if bias is None:
        return torch.mm(x, weight.t(), out=out)
    return torch.addmm(bias, x, weight.t(), out=out)


def linear_silu_mul(x: Rows, weight: torch.Tensor, bias: torch.Tensor | None = None,
                    max_rows: int = MAX_ROWS) -> torch.Tensor:
    """``silu_mul(F.linear(x, weight, bias))`` (weight [2I, K], gate rows then up rows -> [T, I]),
    in one launch of the few-row kernel where :func:`linear` would take it."""
    rows, norm = _operand(x)
    tile = _tile(rows, weight, max_rows)
    if tile is None or weight.shape[0] % 2:
        return silu_mul(F.linear(_dense(x), weight, bias))
    return few_rows_linear(rows, weight, bias, tile, gated=True, **norm)


def linear_add_norm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor, norm_weight: torch.Tensor,
    eps: float, max_rows: int = MAX_ROWS, dependent: bool | None = None,
) -> tuple[Rows, torch.Tensor]:
    """``fused.add_rms_norm(F.linear(x, weight, bias), residual, norm_weight, eps)``: (RMSNorm of
    the sum, the sum as the new residual). Where :func:`linear` would take the projection to the
    kernel, one launch of :func:`few_rows_add_norm` and the norm as :class:`NormedRows`, for the
    next projection (:func:`linear`, :func:`linear_silu_mul`, :func:`linear_rope_store`) to finish.
    dependent: the kernel's launch, as :func:`few_rows_add_norm`'s."""
    tile = _tile(x, weight, max_rows)
    if tile is None:
        return add_rms_norm(F.linear(x, weight, bias), residual, norm_weight, eps)
    weighted, sums, h = few_rows_add_norm(x, weight, bias, residual, norm_weight, tile, dependent=dependent)
    return NormedRows(weighted, sums, h, norm_weight, eps), h


def linear_rope_store(
    x: Rows,
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
    dependent: bool | None = None,
) -> torch.Tensor:
    """``fused.rope_store`` of the q/k/v projection ``F.linear(x, weight, bias)`` (split into
    num_heads query, then num_kv_heads key and value heads); in one launch of
    :func:`few_rows_rope_store` (launched as ``dependent`` says) where :func:`linear` would take
    the projection to the kernel and the head dim fits its tiling. Returns rotated q,
    [T, num_heads, D]."""
    rows, norm = _operand(x)
    t = rows.shape[0]
    d = weight.shape[0] // (num_heads + 2 * num_kv_heads)
    tile = _tile(rows, weight, max_rows)
    if tile is not None and rope_misfit(weight.shape[0], num_heads, num_kv_heads, tile) is None:
        return few_rows_rope_store(rows, weight, bias, positions, inv_freq, k_cache, v_cache, slots, num_heads,
                                   num_kv_heads, tile,
                                   **norm, dependent=dependent)
    q, k, v = linear(x, weight, bias, max_rows).split([num_heads * d, num_kv_heads * d, num_kv_heads * d], dim=-1)
    return rope_store(q.view(t, num_heads, d), k.view(t, num_kv_heads, d), v.view(t, num_kv_heads, d),
                      positions, inv_freq, k_cache, v_cache, slots)
