"""The DeFT Triton kernels: split-KV partial attention over work items, then a merge.

:func:`partial_kernel`, one program per (work item, KV head): the item's KV chunk is read once
and multiplied, on tensor cores, against all query rows of the item at once, the G query heads
that share the KV head packed as consecutive rows (rows = queries x G). It writes a normalised
partial output and its log2-sum-exp per row. :func:`merge_kernel`, one program per query and KV
head (or group of KV heads), combines a query's partials along its path in a fixed order: no
atomics, deterministic; it also reads the query's own short ranges of keys itself (its short
nodes, a decode tail), so they need no partial launch. It reads them first: on GPUs with
programmatic dependent launch it starts while the partial launch finishes and waits for the
partials only after them. :mod:`deft` launches them.
"""

from __future__ import annotations

import triton
import triton.language as tl

_NEG = tl.constexpr(-1.0e30)  # finite "minus infinity" so fully masked rows never produce inf - inf


@triton.jit
def _kv_rows(SLOTS, idx, ok, page_size, stride_p, stride_s, FLAT: tl.constexpr, OFF32: tl.constexpr):
    """Element offsets of the cache rows of the slots ``SLOTS[idx]``: in 32 bits when ``OFF32``
    (every offset in the caches fits, :func:`deft_ws.int32_offsets`), else in 64."""
    slot = tl.load(SLOTS + idx, mask=ok, other=0)
    if not OFF32:
        slot = slot.to(tl.int64)
    if FLAT:  # pages back to back: a slot is a row, no division per key
        return slot * stride_s
    page = slot // page_size
    return page * stride_p + (slot - page * page_size) * stride_s


@triton.jit
def _kv_tile(
    K,
    V,
    SLOTS,
    idx,
    ok,
    h,
    page_size,
    offs_d,
    d_ok,
    stride_kp,
    stride_ks,
    stride_kh,
    stride_vp,
    stride_vs,
    stride_vh,
    FLAT: tl.constexpr,
    OFF32: tl.constexpr,
):
    """K and V of KV head ``h`` at the slots ``SLOTS[idx]`` ([N, D_PAD] each; zero where not ``ok``)."""
    k_row = _kv_rows(SLOTS, idx, ok, page_size, stride_kp, stride_ks, FLAT, OFF32)
    v_row = _kv_rows(SLOTS, idx, ok, page_size, stride_vp, stride_vs, FLAT, OFF32)
    mask = ok[:, None] & d_ok[None, :]
    k = tl.load(K + (k_row + h * stride_kh)[:, None] + offs_d[None, :], mask=mask, other=0.0)
    v = tl.load(V + (v_row + h * stride_vh)[:, None] + offs_d[None, :], mask=mask, other=0.0)
    return k, v


@triton.jit
def _attend(q, k, v, offs_n, lim, m_i, l_i, acc, scale_log2, masked):
    """Online-softmax update of one KV tile for all rows: keys at or past ``lim`` are masked
    when ``masked`` (else every row sees the whole tile)."""
    s = tl.dot(q, tl.trans(k))
    if masked:
        s = tl.where(offs_n[None, :] < lim[:, None], s, float("-inf"))
    return _softmax_step(s, v, m_i, l_i, acc, scale_log2)


@triton.jit
def _softmax_step(s, v, m_i, l_i, acc, scale_log2):
    """Online-softmax update with the scores ``s`` of one KV tile (masked keys at -inf). Row
    maxima are kept scaled, so the scale and the subtraction are one fused multiply-add per score."""
    m_new = tl.maximum(m_i, tl.max(s, axis=1) * scale_log2)
    p = tl.math.exp2(s * scale_log2 - m_new[:, None])
    alpha = tl.math.exp2(m_i - m_new)
    l_new = l_i * alpha + tl.sum(p, axis=1)
    acc_new = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return m_new, l_new, acc_new


@triton.jit(do_not_specialize=["first_item"])  # one compiled kernel wherever a class starts
def partial_kernel(
    Q,
    K,
    V,
    SLOTS,
    ITEMS,
    QPERM,
    QNODE,
    QVIS,
    PO,
    PLSE,
    first_item,
    scale_log2,
    page_size,
    stride_qt,
    stride_qh,
    stride_kp,
    stride_ks,
    stride_kh,
    stride_vp,
    stride_vs,
    stride_vh,
    HQ: tl.constexpr,
    G: tl.constexpr,
    D: tl.constexpr,
    D_PAD: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    NFIELDS: tl.constexpr,
    FLAT: tl.constexpr,
    OFF32: tl.constexpr,
    PREFETCH: tl.constexpr,
    EARLY: tl.constexpr,
):
    if EARLY:  # the merge may launch once every program here has started; it waits for the end
        tl.extra.cuda.gdc_launch_dependents()
    item = ITEMS + (first_item + tl.program_id(0)) * NFIELDS
    h = tl.program_id(1)
    kv_start = tl.load(item + 0)
    kv_len = tl.load(item + 1)
    t0 = tl.load(item + 2)
    node = tl.load(item + 3)
    q_start = tl.load(item + 4)
    q_count = tl.load(item + 5)
    part_base = tl.load(item + 6)

    rows = tl.arange(0, BLOCK_M)
    qi = rows // G
    head = h * G + rows % G
    row_ok = qi < q_count
    qidx = tl.load(QPERM + q_start + qi, mask=row_ok, other=0)
    qnode = tl.load(QNODE + q_start + qi, mask=row_ok, other=-2)
    qvis = tl.load(QVIS + q_start + qi, mask=row_ok, other=0)
    # Keys [0, lim) of this chunk are visible: all for queries below the node, a causal prefix
    # for the node's own queries, none for padding rows. The item's length is the longest lim,
    # so the loop and its first K/V loads need not wait for these loads.
    lim = tl.where(qnode == node, tl.minimum(qvis - t0, kv_len), kv_len)
    lim = tl.where(row_ok, lim, 0)

    offs_d = tl.arange(0, D_PAD)
    d_ok = offs_d < D
    q = tl.load(
        Q + qidx.to(tl.int64)[:, None] * stride_qt + head[:, None] * stride_qh + offs_d[None, :],
        mask=row_ok[:, None] & d_ok[None, :],
        other=0.0,
    )
    m_i = tl.full([BLOCK_M], _NEG, tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D_PAD], tl.float32)
    tile = tl.arange(0, BLOCK_N)
    if PREFETCH:
        # Software pipeline in registers: while tile i is multiplied, tile i+1's K/V loads and
        # tile i+2's slot ids are in flight, so the slot -> K/V chain never stalls a tile.
        ok = tile < kv_len
        k, v = _kv_tile(
            K,
            V,
            SLOTS,
            kv_start + tile,
            ok,
            h,
            page_size,
            offs_d,
            d_ok,
            stride_kp,
            stride_ks,
            stride_kh,
            stride_vp,
            stride_vs,
            stride_vh,
            FLAT,
            OFF32,
        )
        ok1 = tile + BLOCK_N < kv_len
        k_row = _kv_rows(SLOTS, kv_start + BLOCK_N + tile, ok1, page_size, stride_kp, stride_ks, FLAT, OFF32)
        v_row = _kv_rows(SLOTS, kv_start + BLOCK_N + tile, ok1, page_size, stride_vp, stride_vs, FLAT, OFF32)
        for n0 in range(0, kv_len, BLOCK_N):
            ok1 = n0 + BLOCK_N + tile < kv_len
            k_next = tl.load(
                K + (k_row + h * stride_kh)[:, None] + offs_d[None, :], mask=ok1[:, None] & d_ok[None, :], other=0.0
            )
            v_next = tl.load(
                V + (v_row + h * stride_vh)[:, None] + offs_d[None, :], mask=ok1[:, None] & d_ok[None, :], other=0.0
            )
            ok2 = n0 + 2 * BLOCK_N + tile < kv_len
            k_row = _kv_rows(
                SLOTS, kv_start + n0 + 2 * BLOCK_N + tile, ok2, page_size, stride_kp, stride_ks, FLAT, OFF32
            )
            v_row = _kv_rows(
                SLOTS, kv_start + n0 + 2 * BLOCK_N + tile, ok2, page_size, stride_vp, stride_vs, FLAT, OFF32
            )
            m_i, l_i, acc = _attend(q, k, v, n0 + tile, lim, m_i, l_i, acc, scale_log2, True)
            k = k_next
            v = v_next
    else:
        # Tiles that every row sees whole skip the mask: all of them unless the node's own
        # queries see a causal prefix of the chunk.
        whole = tl.min(tl.where(row_ok, lim, kv_len), axis=0)
        for n0 in range(0, kv_len, BLOCK_N):
            ok = n0 + tile < kv_len
            k, v = _kv_tile(
                K,
                V,
                SLOTS,
                kv_start + n0 + tile,
                ok,
                h,
                page_size,
                offs_d,
                d_ok,
                stride_kp,
                stride_ks,
                stride_kh,
                stride_vp,
                stride_vs,
                stride_vh,
                FLAT,
                OFF32,
            )
            m_i, l_i, acc = _attend(q, k, v, n0 + tile, lim, m_i, l_i, acc, scale_log2, n0 + BLOCK_N > whole)

    l_safe = tl.where(l_i > 0, l_i, 1.0)
    lse = tl.where(l_i > 0, m_i + tl.math.log2(l_safe), _NEG)
    prow = (part_base + qi).to(tl.int64)
    tl.store(PLSE + prow * HQ + head, lse, mask=row_ok)
    tl.store(
        PO + (prow * HQ + head)[:, None] * D + offs_d[None, :],
        acc / l_safe[:, None],
        mask=row_ok[:, None] & d_ok[None, :],
    )


@triton.jit
def _first_rows(x, G_M: tl.constexpr, ROWS: tl.constexpr):
    """The first G_M entries of ``x`` [ROWS] (ROWS a multiple of G_M)."""
    x2 = tl.reshape(x, (ROWS // G_M, G_M))
    return tl.sum(tl.where(tl.arange(0, ROWS // G_M)[:, None] == 0, x2, 0.0), axis=0)


@triton.jit
def _first_rows_2d(x, G_M: tl.constexpr, ROWS: tl.constexpr, D_PAD: tl.constexpr):
    """The first G_M rows of ``x`` [ROWS, D_PAD] (ROWS a multiple of G_M)."""
    x3 = tl.reshape(x, (ROWS // G_M, G_M, D_PAD))
    return tl.sum(tl.where(tl.arange(0, ROWS // G_M)[:, None, None] == 0, x3, 0.0), axis=0)


@triton.jit
def _query_heads(h0, rows, G: tl.constexpr, G_M: tl.constexpr):
    """Query head of each merge row when a program takes the KV heads from ``h0`` on: row r is
    query head r % G_M of KV head h0 + r // G_M; and whether it is a real head (r % G_M < G)."""
    return (h0 + rows // G_M) * G + rows % G_M, rows % G_M < G


@triton.jit(do_not_specialize=["own_stride"])  # the row count: one compiled merge for every batch
def merge_kernel(
    PO,
    PLSE,
    OFFSETS,
    ROWS,
    OUT,
    stride_ot,
    stride_oh,
    Q,
    K,
    V,
    SLOTS,
    OWN_START,
    OWN_LEN,
    own_stride,
    scale_log2,
    page_size,
    stride_qt,
    stride_qh,
    stride_kp,
    stride_ks,
    stride_kh,
    stride_vp,
    stride_vs,
    stride_vh,
    HQ: tl.constexpr,
    G: tl.constexpr,
    G_M: tl.constexpr,
    HPP: tl.constexpr,
    D: tl.constexpr,
    D_PAD: tl.constexpr,
    BLOCK_P: tl.constexpr,
    OWN_RANGES: tl.constexpr,
    OWN_ROWS: tl.constexpr,
    BLOCK_K: tl.constexpr,
    FLAT: tl.constexpr,
    OFF32: tl.constexpr,
    EARLY: tl.constexpr,
    OWN_STAGES: tl.constexpr,
):
    # One program per (query, HPP consecutive KV heads), G_M rows per KV head (_query_heads).
    query = tl.program_id(0)
    h0 = tl.program_id(1) * HPP
    R: tl.constexpr = HPP * G_M
    r = tl.arange(0, R)
    head, g_ok = _query_heads(h0, r, G, G_M)
    offs_d = tl.arange(0, D_PAD)
    d_ok = offs_d < D
    first = tl.load(OFFSETS + query)
    last = tl.load(OFFSETS + query + 1)
    # Partial row ids are the plan's, not the partial launch's output: each step's are loaded a
    # step ahead, the first before the own keys and the wait for the partials.
    offs_b = tl.arange(0, BLOCK_P)
    prow_next = tl.load(ROWS + first + offs_b, mask=first + offs_b < last, other=0)
    if OWN_RANGES > 0:
        # The query's own keys, all visible, come first: they do not depend on the partials
        # (with EARLY, they are read while the partial launch finishes). An online softmax of
        # their own on tensor cores, whose tiles have OWN_ROWS rows (at least 16); the partials
        # are merged on R rows apart, so their tiles take no padding registers. The two are
        # joined at the end (a partial with log2-sum-exp L and output O is 2^L keys' worth of
        # weight on O). A step takes BLOCK_K keys of every KV head of the program: column c is
        # key c // HPP of KV head h0 + c % HPP, and a row sees only its own KV head's columns.
        # With OWN_STAGES > 1 Triton pipelines the steps: the next steps' slot ids and K/V tiles
        # are copied into shared memory while this one is multiplied.
        r16 = tl.arange(0, OWN_ROWS)
        head16, real16 = _query_heads(h0, r16, G, G_M)
        q = tl.load(
            Q + query.to(tl.int64) * stride_qt + head16[:, None] * stride_qh + offs_d[None, :],
            mask=((r16 < R) & real16)[:, None] & d_ok[None, :],
            other=0.0,
        )
        ranges = tl.arange(0, OWN_RANGES)
        own_starts = tl.load(OWN_START + ranges * own_stride + query)
        own_lens = tl.load(OWN_LEN + ranges * own_stride + query)
        m2 = tl.full([OWN_ROWS], _NEG, tl.float32)
        l2 = tl.zeros([OWN_ROWS], tl.float32)
        acc2 = tl.zeros([OWN_ROWS, D_PAD], tl.float32)
        cols = tl.arange(0, BLOCK_K * HPP)
        key = cols // HPP
        kv_head = h0 + cols % HPP
        mine = (r16 // G_M)[:, None] == (cols % HPP)[None, :]  # [OWN_ROWS, BLOCK_K * HPP]
        for i in tl.static_range(OWN_RANGES):
            start = tl.sum(tl.where(ranges == i, own_starts, 0), axis=0)
            n = tl.sum(tl.where(ranges == i, own_lens, 0), axis=0)
            for n0 in tl.range(0, n, BLOCK_K, num_stages=OWN_STAGES):
                ok = n0 + key < n
                k, v = _kv_tile(
                    K,
                    V,
                    SLOTS,
                    start + n0 + key,
                    ok,
                    kv_head,
                    page_size,
                    offs_d,
                    d_ok,
                    stride_kp,
                    stride_ks,
                    stride_kh,
                    stride_vp,
                    stride_vs,
                    stride_vh,
                    FLAT,
                    OFF32,
                )
                s = tl.where(mine & ok[None, :], tl.dot(q, tl.trans(k)), float("-inf"))
                m2, l2, acc2 = _softmax_step(s, v, m2, l2, acc2, scale_log2)
        if OWN_ROWS > R:  # the rows of the query heads
            m2 = _first_rows(m2, R, OWN_ROWS)
            l2 = _first_rows(l2, R, OWN_ROWS)
            acc2 = _first_rows_2d(acc2, R, OWN_ROWS, D_PAD)
    if EARLY:  # launched early (programmatic dependent launch): wait for the partials
        tl.extra.cuda.gdc_wait()
    m = tl.full([R], _NEG, tl.float32)
    l = tl.zeros([R], tl.float32)
    acc = tl.zeros([R, D_PAD], tl.float32)
    # BLOCK_P partials per step (WorkConfig.merge_block), in path order: deterministic. Their
    # log2-sum-exps come in one load; the unrolled loop then issues all BLOCK_P output loads
    # before it needs any of them.
    for i in range(first, last, BLOCK_P):
        p_ok = i + offs_b < last
        prow = prow_next.to(tl.int64)
        prow_next = tl.load(ROWS + i + BLOCK_P + offs_b, mask=i + BLOCK_P + offs_b < last, other=0)
        idx = prow[:, None] * HQ + head[None, :]  # [BLOCK_P, R]
        lse = tl.load(PLSE + idx, mask=p_ok[:, None] & g_ok[None, :], other=_NEG)
        m_new = tl.maximum(m, tl.max(lse, axis=0))
        alpha = tl.math.exp2(m - m_new)
        w = tl.math.exp2(lse - m_new[None, :])  # [BLOCK_P, R]
        acc = acc * alpha[:, None]
        for j in tl.static_range(BLOCK_P):
            pick = offs_b == j
            row_j = tl.sum(tl.where(pick, prow, 0), axis=0)
            w_j = tl.sum(tl.where(pick[:, None], w, 0.0), axis=0)  # [R]
            ok_j = g_ok & (r * 0 + i + j < last)
            o = tl.load(
                PO + (row_j * HQ + head)[:, None] * D + offs_d[None, :], mask=ok_j[:, None] & d_ok[None, :], other=0.0
            )
            acc += o * w_j[:, None]
        l = l * alpha + tl.sum(w, axis=0)
        m = m_new
    if OWN_RANGES > 0:
        m_new = tl.maximum(m, m2)
        alpha = tl.math.exp2(m - m_new)
        beta = tl.math.exp2(m2 - m_new)
        acc = acc * alpha[:, None] + acc2 * beta[:, None]
        l = l * alpha + l2 * beta
    out = acc / tl.where(l > 0, l, 1.0)[:, None]
    tl.store(
        OUT + query.to(tl.int64) * stride_ot + head[:, None] * stride_oh + offs_d[None, :],
        out.to(OUT.dtype.element_ty),
        mask=g_ok[:, None] & d_ok[None, :],
    )
