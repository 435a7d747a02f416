"""Projections of a few token rows: one pass over the weight, one program per block of outputs.

A decode step multiplies a handful of rows by every weight of the model, so each projection is a
read of its weight and little else. cuBLAS reads an 8B model's short projections (q/k/v,
attention output) well below the copy rate, and splits the attention output and MLP down over K
with a reduction launch. Here each program streams the full K of ``block_n`` weight rows through
a software pipeline and writes its outputs once, which measured faster than cuBLAS for decode
steps of 8-32 rows (``benchmarks/few_rows.py``; docs/perf-log/). The MLP's gate and up
projections can share programs (``gated``): each program then holds matching gate and up outputs
and writes their SiLU product, so the step has no ``silu_mul`` launch and no gate/up output.
Likewise the q/k/v projection's programs take the two
halves of a head's rotary pairs in turn and rotate and store them in their epilogue
(:func:`few_rows_rope_store`: no ``rope_store`` launch). The
attention output and MLP down projections add the residual stream in their epilogue and leave
the next RMSNorm to the projection after them (:func:`few_rows_add_norm`, :class:`NormedRows`):
a norm needs a whole row, which no program holds, so each program writes its columns' sums of
squares and the next projection scales its float32 product by each row's RMS (no
``add_rms_norm`` launch). On GPUs that launch a kernel behind another, those two and the q/k/v
projection start while the kernel before them finishes (see :func:`_launch`).
References: ``linear_reference`` in :mod:`reference`, then ``silu_mul_reference`` where gated,
``rotate_reference`` and ``store_kv_reference`` for the rotary epilogue, ``add_rms_norm_reference``
and ``normed_linear_reference`` for the norm.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from .device import dependent_launch
from .fused import add_rms_norm, rope_store, rotate_halves, silu_mul

MAX_ROWS = 32  # rows up to which :func:`linear` takes the few-row kernel by default
ROW_LIMIT = 64  # the most rows the kernel takes at all
# Fewest output blocks (programs) it takes: one program per block cannot fill a 132-SM GPU
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

    Measured with Llama-3-8B's projections at 8-32 rows: 64-row blocks for the wide
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
def _start_behind():
    """The start of a program launched behind the kernel before it (programmatic dependent
    launch): the kernel after this one may launch now, and this one waits for the one before
    it to end (and its writes to land) before reading anything but its weight."""
    tl.extra.cuda.gdc_launch_dependents()
    tl.extra.cuda.gdc_wait()


@triton.jit
def _project(X, W, B, SUMS, offs_n, n_ok, t, n_in, n_sums, stride_x, stride_w, stride_s, eps,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, STAGES: tl.constexpr,
             SWAP: tl.constexpr, HAS_BIAS: tl.constexpr, PRECISION: tl.constexpr, NORMED: tl.constexpr,
             BLOCK_S: tl.constexpr):
    """x[:t] @ W[offs_n].T (+ B[offs_n]) in float32, [BLOCK_M, BLOCK_N]: all of K, one weight pass.

    NORMED: each row's product is first scaled by 1 / sqrt(mean square + eps), the row's sum of
    squares being the sum of SUMS[:n_sums, row] (see :class:`NormedRows`), loaded before the
    loop so that their latency hides behind it.
    """
    offs_m = tl.arange(0, BLOCK_M)
    offs_k = tl.arange(0, BLOCK_K)
    m_ok = offs_m < t
    if NORMED:
        p = tl.arange(0, BLOCK_S)
        squares = tl.load(SUMS + p[:, None] * stride_s + offs_m[None, :], mask=(p < n_sums)[:, None] & m_ok[None, :],
                          other=0.0)
    if SWAP:
        acc = tl.zeros([BLOCK_N, BLOCK_M], tl.float32)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in tl.range(0, n_in, BLOCK_K, num_stages=STAGES):
        k = k0 + offs_k
        k_ok = k < n_in
        w = tl.load(W + offs_n[:, None].to(tl.int64) * stride_w + k[None, :], mask=n_ok[:, None] & k_ok[None, :],
                    other=0.0)
        x = tl.load(X + offs_m[:, None] * stride_x + k[None, :], mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        if SWAP:
            acc += tl.dot(w, tl.trans(x), input_precision=PRECISION)
        else:
            acc += tl.dot(x, tl.trans(w), input_precision=PRECISION)
    if SWAP:
        acc = tl.trans(acc)
    if NORMED:
        acc = acc * (1.0 / tl.sqrt(tl.sum(squares, axis=0) / n_in + eps))[:, None]
    if HAS_BIAS:
        acc += tl.load(B + offs_n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    return acc


@triton.jit(do_not_specialize=["t"])
def _few_rows_kernel(
    X, W, B, OUT, RES, NORM_W, RES_OUT, SUMS_OUT, t, n_in, n_out, stride_x, stride_w, stride_o, stride_r, stride_ro,
    stride_so,
    SUMS, n_sums, stride_s, eps,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, STAGES: tl.constexpr,
    SWAP: tl.constexpr, HAS_BIAS: tl.constexpr, PRECISION: tl.constexpr, GATED: tl.constexpr,
    NORMED: tl.constexpr, BLOCK_S: tl.constexpr, ADD_NORM: tl.constexpr, DEPENDENT: tl.constexpr,
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
    if DEPENDENT:
        _start_behind()
    ok = m_ok[:, None] & n_ok[None, :]
    if ADD_NORM:  # loaded before the projection's loop, as the squares are
        res = tl.load(RES + offs_m[:, None] * stride_r + offs_n[None, :], mask=ok, other=0.0)
        nw = tl.load(NORM_W + offs_n, mask=n_ok, other=0.0).to(tl.float32)
    acc = _project(X, W, B, SUMS, offs_n, n_ok, t, n_in, n_sums, stride_x, stride_w, stride_s, eps,
                   BLOCK_M, BLOCK_N, BLOCK_K, STAGES, SWAP, HAS_BIAS, PRECISION, NORMED, BLOCK_S)
    dt = OUT.dtype.element_ty
    if GATED:
        g, u = tl.split(tl.reshape(acc, [BLOCK_M, BLOCK_N // 2, 2]))
        cols = tl.program_id(0) * (BLOCK_N // 2) + tl.arange(0, BLOCK_N // 2)
        out = _silu_gate(g, u, dt)
        tl.store(OUT + offs_m[:, None] * stride_o + cols[None, :], out.to(dt),
                 mask=m_ok[:, None] & (cols < n_out // 2)[None, :])
    elif ADD_NORM:
        # The residual stream: the rounded projection plus the residual, rounded (as add_rms_norm
        # adds); then its rows' squares over this program's columns, and the rows times the
        # norm's weight, which the next projection scales by the whole row's RMS.
        h = (acc.to(dt).to(tl.float32) + res.to(tl.float32)).to(dt)
        tl.store(RES_OUT + offs_m[:, None] * stride_ro + offs_n[None, :], h, mask=ok)
        hf = h.to(tl.float32)
        tl.store(SUMS_OUT + tl.program_id(0) * stride_so + offs_m, tl.sum(hf * hf, axis=1), mask=m_ok)
        tl.store(OUT + offs_m[:, None] * stride_o + offs_n[None, :], (hf * nw[None, :]).to(dt), mask=ok)
    else:
        tl.store(OUT + offs_m[:, None] * stride_o + offs_n[None, :], acc.to(dt), mask=ok)


@triton.jit(do_not_specialize=["t"])
def _qkv_rope_kernel(
    X, W, B, POS, INV_FREQ, Q_OUT, KC, VC, SLOTS, page_size, t, n_in,
    stride_x, stride_w, stride_ot, stride_oh, stride_cp, stride_cs, stride_ch, stride_dp, stride_ds, stride_dh,
    SUMS, n_sums, stride_s, eps,
    HQ: tl.constexpr, HKV: tl.constexpr, HALF: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, STAGES: tl.constexpr,
    SWAP: tl.constexpr, HAS_BIAS: tl.constexpr, PRECISION: tl.constexpr, NORMED: tl.constexpr, BLOCK_S: tl.constexpr,
    DEPENDENT: tl.constexpr,
):
    # The weight's rows are the query heads', then the key heads', then the value heads', 2 * HALF
    # each. A program takes BLOCK_N // 2 rotary pairs (dims j and HALF + j) of one head, in turn,
    # so each pair meets in one accumulator row pair, and writes them as fused.rope_store does.
    P: tl.constexpr = BLOCK_N // 2
    head = tl.program_id(0) // (HALF // P)
    j = tl.program_id(0) % (HALF // P) * P + tl.arange(0, P)
    r = tl.arange(0, BLOCK_N)
    offs_n = head * 2 * HALF + tl.program_id(0) % (HALF // P) * P + r // 2 + (r % 2) * HALF
    if DEPENDENT:
        _start_behind()
    acc = _project(X, W, B, SUMS, offs_n, offs_n >= 0, t, n_in, n_sums, stride_x, stride_w, stride_s, eps,
                   BLOCK_M, BLOCK_N, BLOCK_K, STAGES, SWAP, HAS_BIAS, PRECISION, NORMED, BLOCK_S)
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


def _check_sums(name: str, x: torch.Tensor, row_sums: torch.Tensor | None) -> None:
    if row_sums is not None and (row_sums.dim() != 2 or row_sums.shape[1] != x.shape[0]
                                 or row_sums.dtype != torch.float32 or row_sums.stride(1) != 1):
        raise ValueError(f"{name}: row_sums must be float32 [P, {x.shape[0]}] with unit stride along the rows, "
                         f"got {row_sums.dtype} {tuple(row_sums.shape)}")


def _norm_args(row_sums: torch.Tensor | None, x: torch.Tensor, eps: float) -> tuple[tuple, dict]:
    """The kernels' last arguments (SUMS, n_sums, stride_s, eps) and their NORMED and BLOCK_S;
    x stands in for absent sums."""
    if row_sums is None:
        return (x, 0, 0, 0.0), dict(NORMED=False, BLOCK_S=1)
    blocks = row_sums.shape[0]
    return (row_sums, blocks, row_sums.stride(0), float(eps)), dict(NORMED=True, BLOCK_S=triton.next_power_of_2(blocks))


def few_rows_linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, tile: Tiling = NARROW, *,
    gated: bool = False,
    row_sums: torch.Tensor | None = None, eps: float = 0.0, out: torch.Tensor | None = None,
) -> torch.Tensor:
    """x [T, K] @ weight [N, K].T (+ bias [N]) -> [T, N], accumulated in float32, for T <= ROW_LIMIT.

    gated: weight is [2I, K], gate rows then up rows; returns silu(gate) * up [T, I], each
    projection rounded to x's dtype first and the silu too (``fused.silu_mul`` of the ungated
    output, bit for bit).
    row_sums: [P, T] float32 (see :class:`NormedRows`); each row's product is scaled by
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
    if out is None:
        out = torch.empty(shape, dtype=x.dtype, device=x.device)
    elif out.shape != shape or out.dtype != x.dtype or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous {shape} {x.dtype} tensor, got {tuple(out.shape)} {out.dtype}")
    if t:
        norm, normed = _norm_args(row_sums, x, eps)
        _few_rows_kernel[(triton.cdiv(out.shape[1], tile.block_n // 2 if gated else tile.block_n),)](
            x, weight, bias if bias is not None else weight, out, x, x, x, x, t, n_in, n_out,
            x.stride(0), weight.stride(0), out.stride(0), 0, 0, 0, *norm,
            **_launch(tile, t, x), **normed, HAS_BIAS=bias is not None, GATED=gated, ADD_NORM=False,
        )
    return out


def few_rows_add_norm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor, norm_weight: torch.Tensor,
    tile: Tiling = NARROW, *, dependent: bool | None = None,
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
        columns (P programs). See :class:`NormedRows`.
    """
    _check_projection("few_rows_add_norm", x, weight, bias)
    t, n_in = x.shape
    n_out = weight.shape[0]
    if (residual.shape != (t, n_out) or residual.dtype != x.dtype or residual.stride(1) != 1
            or norm_weight.shape != (n_out,)):
        raise ValueError(f"few_rows_add_norm: residual {tuple(residual.shape)} ({residual.dtype}, unit stride along N) "
                         f"and norm weight {tuple(norm_weight.shape)} must fit [{t}, {n_out}] in {x.dtype}")
    programs = triton.cdiv(n_out, tile.block_n)
    weighted = torch.empty(t, n_out, dtype=x.dtype, device=x.device)
    h = torch.empty_like(weighted)
    sums = torch.empty(programs, t, dtype=torch.float32, device=x.device)
    if t:
        norm, normed = _norm_args(None, x, 0.0)
        _few_rows_kernel[(programs,)](
            x, weight, bias if bias is not None else weight, weighted, residual, norm_weight, h, sums, t, n_in, n_out,
            x.stride(0), weight.stride(0), weighted.stride(0), residual.stride(0), h.stride(0), sums.stride(0), *norm,
            **_launch(tile, t, x, dependent), **normed, HAS_BIAS=bias is not None, GATED=False, ADD_NORM=True,
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
    if dependent is None:
        dependent = dependent_launch(x.device)
    elif dependent and not dependent_launch(x.device):
        raise ValueError(f"a dependent launch needs a CUDA GPU of compute capability 9.0 or later, not {x.device}")
    return dict(BLOCK_M=block_m, BLOCK_N=tile.block_n, BLOCK_K=tile.block_k, STAGES=_stages(tile, block_m, x),
                SWAP=tile.swap, num_warps=tile.warps, PRECISION=_precision(x), DEPENDENT=dependent,
                **({"launch_pdl": True} if dependent else {}))


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


def _rope_misfit(weight_rows: int, num_heads: int, num_kv_heads: int, tile: Tiling) -> str | None:
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
    misfit = _rope_misfit(weight.shape[0], num_heads, num_kv_heads, tile)
    if misfit is not None:
        raise ValueError(f"few_rows_rope_store: {misfit}")
    if inv_freq.shape != (d // 2,):
        raise ValueError(f"few_rows_rope_store: inv_freq {tuple(inv_freq.shape)} must hold {d // 2} "
                         "frequencies (half the head dim)")
    _check_projection("few_rows_rope_store", x, weight, bias)
    _check_sums("few_rows_rope_store", x, row_sums)
    if (positions.shape != (t,) or slots.shape != (t,) or k_cache.shape[2:] != (num_kv_heads, d)
            or v_cache.shape != k_cache.shape or v_cache.dtype != k_cache.dtype):
        raise ValueError(f"few_rows_rope_store: positions {tuple(positions.shape)}, slots {tuple(slots.shape)} "
                         f"and caches {tuple(k_cache.shape)} (one dtype) must fit {t} rows of {num_kv_heads} "
                         f"KV heads of {d}")
    if k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
        raise ValueError("few_rows_rope_store: the head dimension of the caches must be contiguous")
    q = torch.empty(t, num_heads, d, dtype=x.dtype, device=x.device)
    if t == 0:
        return q
    norm, normed = _norm_args(row_sums, x, eps)
    _qkv_rope_kernel[(weight.shape[0] // tile.block_n,)](
        x, weight, bias if bias is not None else weight, positions, inv_freq, q, k_cache, v_cache, slots,
        k_cache.shape[1],
        t, n_in, x.stride(0), weight.stride(0), q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), v_cache.stride(0), v_cache.stride(1),
        v_cache.stride(2), *norm,
        HQ=num_heads, HKV=num_kv_heads, HALF=d // 2, **_launch(tile, t, x, dependent), **normed,
        HAS_BIAS=bias is not None,
    )
    return q


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
    if tile is not None and _rope_misfit(weight.shape[0], num_heads, num_kv_heads, tile) is None:
        return few_rows_rope_store(rows, weight, bias, positions, inv_freq, k_cache, v_cache, slots, num_heads,
                                   num_kv_heads, tile,
                                   **norm, dependent=dependent)
    q, k, v = linear(x, weight, bias, max_rows).split([num_heads * d, num_kv_heads * d, num_kv_heads * d], dim=-1)
    return rope_store(q.view(t, num_heads, d), k.view(t, num_kv_heads, d), v.view(t, num_kv_heads, d),
                      positions, inv_freq, k_cache, v_cache, slots)
