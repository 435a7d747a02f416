"""The few-row projection kernels in Triton: one pass over the weight, one program per block of
outputs (:mod:`few_rows` launches them).

:func:`few_rows_kernel` multiplies up to 64 token rows by ``BLOCK_N`` weight rows, streaming all
of K through a software pipeline: a plain projection, a gated one (gate and up rows in turn, the
SiLU product out) or one that adds the residual stream and leaves the next RMSNorm to the
projection after it (each program's columns' sums of squares out). :func:`qkv_rope_kernel` is
the q/k/v projection whose programs take the two halves of a head's rotary pairs in turn, rotate
them and store the keys and values in the KV cache. Either may start behind the kernel before it
(``DEPENDENT``: programmatic dependent launch).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .fused import rotate_halves


@triton.jit
def _silu_gate(g, u, DTYPE: tl.constexpr):
    """silu(g) * u of the rounded projections g, u (float32 in): as :func:`fused.silu_mul`."""
    gate = g.to(DTYPE).to(tl.float32)
    act = (gate / (1.0 + tl.exp(-gate))).to(DTYPE).to(tl.float32)
    return act * u.to(DTYPE).to(tl.float32)


@triton.jit
def _start_behind():
    """The start of a program launched behind the kernel before it (programmatic dependent
    launch): the kernel after this one may launch now, and this one waits for the one before
    it to end (and its writes to land) before reading anything but its weight."""
    tl.extra.cuda.gdc_launch_dependents()
    tl.extra.cuda.gdc_wait()


@triton.jit
def _project(
    X,
    W,
    B,
    SUMS,
    offs_n,
    n_ok,
    t,
    n_in,
    n_sums,
    stride_x,
    stride_w,
    stride_s,
    eps,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    STAGES: tl.constexpr,
    SWAP: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    PRECISION: tl.constexpr,
    NORMED: tl.constexpr,
    BLOCK_S: tl.constexpr,
):
    """x[:t] @ W[offs_n].T (+ B[offs_n]) in float32, [BLOCK_M, BLOCK_N]: all of K, one weight pass.

    NORMED: each row's product is first scaled by 1 / sqrt(mean square + eps), the row's sum of
    squares being the sum of SUMS[:n_sums, row] (see :class:`linear.NormedRows`), loaded before the
    loop so that their latency hides behind it.
    """
    offs_m = tl.arange(0, BLOCK_M)
    offs_k = tl.arange(0, BLOCK_K)
    m_ok = offs_m < t
    if NORMED:
        p = tl.arange(0, BLOCK_S)
        squares = tl.load(
            SUMS + p[:, None] * stride_s + offs_m[None, :], mask=(p < n_sums)[:, None] & m_ok[None, :], other=0.0
        )
    if SWAP:
        acc = tl.zeros([BLOCK_N, BLOCK_M], tl.float32)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in tl.range(0, n_in, BLOCK_K, num_stages=STAGES):
        k = k0 + offs_k
        k_ok = k < n_in
        w = tl.load(
            W + offs_n[:, None].to(tl.int64) * stride_w + k[None, :], mask=n_ok[:, None] & k_ok[None, :], other=0.0
        )
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
def few_rows_kernel(
    X,
    W,
    B,
    OUT,
    RES,
    NORM_W,
    RES_OUT,
    SUMS_OUT,
    t,
    n_in,
    n_out,
    stride_x,
    stride_w,
    stride_o,
    stride_r,
    stride_ro,
    stride_so,
    SUMS,
    n_sums,
    stride_s,
    eps,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    STAGES: tl.constexpr,
    SWAP: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    PRECISION: tl.constexpr,
    GATED: tl.constexpr,
    NORMED: tl.constexpr,
    BLOCK_S: tl.constexpr,
    ADD_NORM: tl.constexpr,
    DEPENDENT: tl.constexpr,
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
    acc = _project(
        X,
        W,
        B,
        SUMS,
        offs_n,
        n_ok,
        t,
        n_in,
        n_sums,
        stride_x,
        stride_w,
        stride_s,
        eps,
        BLOCK_M,
        BLOCK_N,
        BLOCK_K,
        STAGES,
        SWAP,
        HAS_BIAS,
        PRECISION,
        NORMED,
        BLOCK_S,
    )
    dt = OUT.dtype.element_ty
    if GATED:
        g, u = tl.split(tl.reshape(acc, [BLOCK_M, BLOCK_N // 2, 2]))
        cols = tl.program_id(0) * (BLOCK_N // 2) + tl.arange(0, BLOCK_N // 2)
        out = _silu_gate(g, u, dt)
        tl.store(
            OUT + offs_m[:, None] * stride_o + cols[None, :],
            out.to(dt),
            mask=m_ok[:, None] & (cols < n_out // 2)[None, :],
        )
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
def qkv_rope_kernel(
    X,
    W,
    B,
    POS,
    INV_FREQ,
    Q_OUT,
    KC,
    VC,
    SLOTS,
    page_size,
    t,
    n_in,
    stride_x,
    stride_w,
    stride_ot,
    stride_oh,
    stride_cp,
    stride_cs,
    stride_ch,
    stride_dp,
    stride_ds,
    stride_dh,
    SUMS,
    n_sums,
    stride_s,
    eps,
    HQ: tl.constexpr,
    HKV: tl.constexpr,
    HALF: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    STAGES: tl.constexpr,
    SWAP: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    PRECISION: tl.constexpr,
    NORMED: tl.constexpr,
    BLOCK_S: tl.constexpr,
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
    acc = _project(
        X,
        W,
        B,
        SUMS,
        offs_n,
        offs_n >= 0,
        t,
        n_in,
        n_sums,
        stride_x,
        stride_w,
        stride_s,
        eps,
        BLOCK_M,
        BLOCK_N,
        BLOCK_K,
        STAGES,
        SWAP,
        HAS_BIAS,
        PRECISION,
        NORMED,
        BLOCK_S,
    )
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
