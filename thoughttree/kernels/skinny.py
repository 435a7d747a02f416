"""Linear layers over a few rows (decode steps): ``x @ W.T (+ b)`` as a stream over the weight.

With a handful of token rows a decode step's projections are matrix-vector products: all their
time is reading the weight once. Each program here owns a narrow band of the weight's output
rows and streams it through the whole reduction dimension, multiplying every token row at once
on tensor cores, so many bands are in flight on every SM and each weight byte is read once.
Reference: ``torch.nn.functional.linear``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
import triton
import triton.language as tl


@dataclass(frozen=True)
class SkinnyConfig:
    """When the skinny kernel replaces ``F.linear`` and how it is tiled.

    max_rows: most token rows (above it, a tiled GEMM reuses weight tiles across rows);
    min_programs: fewest output bands (below it the GPU is not filled: ``F.linear``);
    block_n, block_k, num_warps, num_stages: the tile and its pipeline depth.
    """

    max_rows: int = 16
    min_programs: int = 128
    block_n: int = 16
    block_k: int = 256
    num_warps: int = 4
    num_stages: int = 4


@triton.jit
def _skinny_kernel(
    X, W, B, Y, rows, n, k, stride_x, stride_w, stride_y,
    HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    band = tl.program_id(0)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = band * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_ok = offs_m < rows
    n_ok = offs_n < n
    x_ptr = X + offs_m[:, None] * stride_x + offs_k[None, :]
    w_ptr = W + offs_n.to(tl.int64)[:, None] * stride_w + offs_k[None, :]
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(0, k, BLOCK_K):  # k is a multiple of BLOCK_K
        x = tl.load(x_ptr + k0, mask=m_ok[:, None], other=0.0)
        w = tl.load(w_ptr + k0, mask=n_ok[:, None], other=0.0)
        acc += tl.dot(x, tl.trans(w))
    if HAS_BIAS:
        acc += tl.load(B + offs_n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    tl.store(Y + offs_m[:, None] * stride_y + offs_n[None, :], acc.to(Y.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


def skinny_fits(x: torch.Tensor, weight: torch.Tensor, config: SkinnyConfig) -> bool:
    """Whether :func:`skinny_linear` takes ``x`` [T, K] @ ``weight`` [N, K].T under ``config``."""
    t, k = x.shape
    n = weight.shape[0]
    return (
        0 < t <= config.max_rows and k % config.block_k == 0 and -(-n // config.block_n) >= config.min_programs
        and x.dtype == weight.dtype and x.dtype in (torch.float16, torch.bfloat16)
        and x.stride(1) == 1 and weight.stride(1) == 1
    )


def skinny_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, config: SkinnyConfig | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` for x [T, K], weight [N, K], bias [N]: [T, N] in x's dtype.

    Runs the skinny kernel when :func:`skinny_fits` (few rows, K a multiple of the tile's depth,
    enough output bands to fill the GPU), else ``F.linear``.
    """
    cfg = config or SkinnyConfig()
    if not skinny_fits(x, weight, cfg):
        return F.linear(x, weight, bias)
    t, k = x.shape
    n = weight.shape[0]
    y = torch.empty(t, n, dtype=x.dtype, device=x.device)
    _skinny_kernel[(triton.cdiv(n, cfg.block_n),)](
        x, weight, bias if bias is not None else weight, y, t, n, k, x.stride(0), weight.stride(0), y.stride(0),
        HAS_BIAS=bias is not None, BLOCK_M=max(16, triton.next_power_of_2(t)), BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    return y
