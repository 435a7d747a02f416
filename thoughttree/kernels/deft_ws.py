"""DeFT's partial kernel for the 64- and 128-row tiles, warp-specialised for Hopper (Gluon).

Same work items, inputs and partial outputs as :func:`deft_kernels.partial_kernel` (bitwise equal
on a Hopper GPU), organised as FlashAttention-3 organises a tile. Each program (work item, KV head)
is split into warpgroups with their own jobs and registers:

- a producer warpgroup gathers the item's K and V rows by slot id with ``cp.async`` into a ring
  of shared-memory stages, loading each tile's slot ids one tile ahead, and signals
  a stage full through an mbarrier the copies themselves arrive on;
- one or two consumer warpgroups of 64 query rows each multiply on the tensor cores. A consumer
  issues tile j's scores and tile j-1's P·V as two asynchronous warpgroup MMAs and waits for
  the scores alone before tile j's softmax (``ptxas`` then moves the wait for P·V up to the
  softmax's start, as the new P takes P·V's operand registers; keeping it after the softmax
  was slower, docs/perf-log/). Two consumers take turns issuing (an mbarrier each way), so one
  exponentiates while the other multiplies.

Triton's ``tl.dot`` waits for each MMA as it is issued, and its pipeline issues the K/V copies
from the same warps that do the softmax: with 128 rows this tile keeps the tensor cores busier
than the Triton tile does (BENCHMARKS.md, tree attention). Hopper only (``warpgroup_mma``);
head dim 128; float16 or bfloat16. Written against Triton 3.6-3.9 (one call renamed between them).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared, mbarrier, warpgroup_mma, warpgroup_mma_wait,
)
from triton.language.extra.cuda import gdc_launch_dependents

if TYPE_CHECKING:
    import torch

_NEG = gl.constexpr(-1.0e30)  # as deft_kernels._NEG: a finite "minus infinity"
# ``cp.async`` into shared memory: async_copy_global_to_shared in Triton 3.6, async_load from 3.7.
_async_load = getattr(async_copy, "async_load", None) or async_copy.async_copy_global_to_shared

HEAD_DIM = 128
BLOCK_N = 64  # keys per tile; 128-key tiles measured slower (docs/perf-log/)
PRODUCER_WARPS = 4  # one warp could not issue the gathers fast enough


@dataclass(frozen=True)
class Tile:
    """How one tile class runs here: ``consumers`` warpgroups of 64 query rows, a K/V ring of
    ``stages``, and registers per thread: the kernel's cap, each consumer's when there are two
    (one consumer takes what the producer leaves), the producer's."""

    consumers: int
    stages: int
    max_regs: int
    consumer_regs: int
    producer_regs: int


# By tile class rows. 128 rows: 12 warps at 128 registers (consumers 160, producer 64, no
# spills) leave room on the SM for a 16-row program of another class launched beside it, which
# measured at least as fast as 168 (consumers at 224) on nearly every workload; four stages beat
# 3 and 5. 64 rows: one consumer (192 registers) and three stages, 114,748 bytes of shared
# memory, so two programs share an SM as the Triton tile's do (docs/perf-log/).
TILES = MappingProxyType({128: Tile(2, 4, 128, 160, 64), 64: Tile(1, 3, 128, 192, 64)})


def int32_offsets(*caches: torch.Tensor) -> bool:
    """Whether every element of these tensors lies less than 2**31 elements past its first:
    cache offsets then fit in 32-bit arithmetic, which takes fewer instructions per key."""
    return all(sum((n - 1) * s for n, s in zip(x.shape, x.stride())) < 2**31 for x in caches)


def fits(k_cache: torch.Tensor, v_cache: torch.Tensor) -> bool:
    """Whether this kernel takes these caches ([num_pages, page_size, H_kv, D]): head dim 128,
    every K/V row 16-byte aligned, as its 16-byte ``cp.async`` copies need (Triton proves that
    from addresses and strides divisible by 16), and :func:`int32_offsets`, as the producer
    computes its gather offsets in 32 bits only (a cache of more than 4 GiB per layer's K or V
    takes the Triton tile)."""
    return (
        k_cache.shape[-1] == HEAD_DIM
        and int32_offsets(k_cache, v_cache)
        and all(x.data_ptr() % 16 == 0 and all(s % 16 == 0 for s in x.stride()[:3]) for x in (k_cache, v_cache))
    )


@gluon.jit
def _await_turn(turn, W: gl.constexpr, phase, NC: gl.constexpr):
    """With two consumers, wait until the other has issued its MMAs of this turn (a no-op with one)."""
    if NC == 2:
        mbarrier.wait(turn.index(W), phase)


@gluon.jit
def _pass_turn(turn, W: gl.constexpr, NC: gl.constexpr):
    """With two consumers, let the other issue its next MMAs (a no-op with one)."""
    if NC == 2:
        mbarrier.arrive(turn.index(1 - W), count=1)


@gluon.jit
def _consumer(Q, QPERM, QNODE, QVIS, PO, PLSE, kbuf, vbuf, full, empty, turn,
              q_start, q_count, node, t0, kv_len, h, part_base, scale_log2, stride_qt, stride_qh, n_tiles,
              W: gl.constexpr, HQ: gl.constexpr, G: gl.constexpr, D: gl.constexpr, BLOCK_N: gl.constexpr,
              STAGES: gl.constexpr, NC: gl.constexpr):
    """Warpgroup ``W``'s 64 rows (rows = queries x G heads) over every tile of the item."""
    S_L: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16])
    O_L: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, D, 16])
    P_A: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=O_L, k_width=2)
    LD: gl.constexpr = gl.BlockedLayout([1, 8], [32 // (D // 8), D // 8], [4, 1], [1, 0])
    SW: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    dtype: gl.constexpr = Q.dtype.element_ty

    lrow = W * 64 + gl.arange(0, 64, layout=gl.SliceLayout(1, LD))
    lq = lrow // G
    lok = lq < q_count
    qidx = gl.load(QPERM + q_start + lq, mask=lok, other=0)
    dl = gl.arange(0, D, layout=gl.SliceLayout(0, LD))
    q = gl.load(Q + qidx.to(gl.int64)[:, None] * stride_qt + (h * G + lrow % G)[:, None] * stride_qh + dl[None, :],
                mask=lok[:, None], other=0.0)
    q_smem = gl.allocate_shared_memory(dtype, [64, D], SW, q)

    rows = W * 64 + gl.arange(0, 64, layout=gl.SliceLayout(1, S_L))
    qi = rows // G
    row_ok = qi < q_count
    qnode = gl.load(QNODE + q_start + qi, mask=row_ok, other=-2)
    qvis = gl.load(QVIS + q_start + qi, mask=row_ok, other=0)
    # Keys [0, lim) of the chunk are visible, as in deft_kernels.partial_kernel.
    lim = gl.where(qnode == node, gl.minimum(qvis - t0, kv_len), kv_len)
    lim = gl.where(row_ok, lim, 0)
    # With two consumers, tiles that every row sees whole skip the mask, as in
    # deft_kernels.partial_kernel: all but a ragged last one, unless a row is one of the node's
    # own queries (a causal prefix): 64 fewer instructions per warp and tile. The one-consumer
    # tile keeps the mask, as skipping it measured slower on some small calls (docs/perf-log/).
    whole = gl.min(gl.where(row_ok, lim, kv_len), axis=0)
    cols = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, S_L))
    m_i = gl.full([64], _NEG, gl.float32, gl.SliceLayout(1, S_L))
    l_i = gl.zeros([64], gl.float32, gl.SliceLayout(1, S_L))
    acc = gl.zeros([64, D], gl.float32, O_L)
    s_zero = gl.zeros([64, BLOCK_N], gl.float32, S_L)
    fence_async_shared()  # the query tile's store, before the tensor cores read it

    # Tile 0: its scores alone. Turn j of warpgroup W waits for the other's turn j - 1 + W.
    _await_turn(turn, W, W ^ 1, NC)
    mbarrier.wait(full.index(0), 0)
    fence_async_shared()
    s_tok = warpgroup_mma(q_smem, kbuf.index(0).permute((1, 0)), s_zero, use_acc=False, is_async=True)
    _pass_turn(turn, W, NC)
    s = warpgroup_mma_wait(0, deps=[s_tok])
    s = gl.where(cols[None, :] < lim[:, None], s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, axis=1) * scale_log2)
    p = gl.exp2(s * scale_log2 - m_new[:, None])
    l_i = l_i * gl.exp2(m_i - m_new) + gl.sum(p, axis=1)
    m_i = m_new
    p_a = gl.convert_layout(p.to(dtype), P_A)

    for j in range(1, n_tiles):
        st = j % STAGES
        prev = (j - 1) % STAGES
        _await_turn(turn, W, (j & 1) ^ W ^ 1, NC)
        mbarrier.wait(full.index(st), (j // STAGES) & 1)
        fence_async_shared()
        s_tok = warpgroup_mma(q_smem, kbuf.index(st).permute((1, 0)), s_zero, use_acc=False, is_async=True)
        o_tok = warpgroup_mma(p_a, vbuf.index(prev), acc, is_async=True)
        _pass_turn(turn, W, NC)
        s = warpgroup_mma_wait(1, deps=[s_tok])  # the scores; P·V of tile j-1 still runs
        if NC == 1 or (j + 1) * BLOCK_N > whole:
            s = gl.where((j * BLOCK_N + cols)[None, :] < lim[:, None], s, float("-inf"))
        m_new = gl.maximum(m_i, gl.max(s, axis=1) * scale_log2)
        p = gl.exp2(s * scale_log2 - m_new[:, None])
        alpha = gl.exp2(m_i - m_new)
        l_i = l_i * alpha + gl.sum(p, axis=1)
        m_i = m_new
        acc = warpgroup_mma_wait(0, deps=[o_tok])
        mbarrier.arrive(empty.index(prev), count=1)
        acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, O_L))[:, None]
        p_a = gl.convert_layout(p.to(dtype), P_A)

    last = (n_tiles - 1) % STAGES
    _await_turn(turn, W, (n_tiles & 1) ^ W ^ 1, NC)
    o_tok = warpgroup_mma(p_a, vbuf.index(last), acc, is_async=True)
    _pass_turn(turn, W, NC)
    acc = warpgroup_mma_wait(0, deps=[o_tok])
    mbarrier.arrive(empty.index(last), count=1)

    l_safe = gl.where(l_i > 0, l_i, 1.0)
    lse = gl.where(l_i > 0, m_i + gl.log2(l_safe), _NEG)
    gl.store(PLSE + (part_base + qi).to(gl.int64) * HQ + h * G + rows % G, lse, mask=row_ok)
    orow = W * 64 + gl.arange(0, 64, layout=gl.SliceLayout(1, O_L))
    oq = orow // G
    od = gl.arange(0, D, layout=gl.SliceLayout(0, O_L))
    out = acc / gl.convert_layout(l_safe, gl.SliceLayout(1, O_L))[:, None]
    gl.store(PO + ((part_base + oq).to(gl.int64) * HQ + h * G + orow % G)[:, None] * D + od[None, :], out,
             mask=(oq < q_count)[:, None])


@gluon.jit
def _producer(K, V, SLOTS, kbuf, vbuf, full, empty, kv_start, kv_len, h, page_size,
              stride_kp, stride_ks, stride_kh, stride_vp, stride_vs, stride_vh, n_tiles,
              D: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, FLAT: gl.constexpr, PW: gl.constexpr):
    """Gather each tile's K and V rows into the ring; keys past ``kv_len`` are zero-filled."""
    L: gl.constexpr = gl.BlockedLayout([1, 8], [32 // (D // 8), D // 8], [PW, 1], [1, 0])
    offs_n = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, L))
    offs_d = gl.arange(0, D, layout=gl.SliceLayout(0, L))
    ok = offs_n < kv_len
    slot = gl.load(SLOTS + kv_start + offs_n, mask=ok, other=0)
    for j in range(n_tiles):
        st = j % STAGES
        nxt = (j + 1) * BLOCK_N + offs_n
        ok_next = nxt < kv_len
        slot_next = gl.load(SLOTS + kv_start + nxt, mask=ok_next, other=0)  # one tile ahead
        # Offsets in 32 bits (fits() checks): in 64 the producer warps took 237 instructions per
        # tile instead of 184, and the consumers' warps share their issue slots.
        if FLAT:  # pages back to back: a slot is a row
            k_row = slot * stride_ks + h * stride_kh
            v_row = slot * stride_vs + h * stride_vh
        else:
            page = slot // page_size
            off = slot - page * page_size
            k_row = page * stride_kp + off * stride_ks + h * stride_kh
            v_row = page * stride_vp + off * stride_vs + h * stride_vh
        mbarrier.wait(empty.index(st), ((j // STAGES) & 1) ^ 1)
        _async_load(kbuf.index(st), K + k_row[:, None] + offs_d[None, :], mask=ok[:, None])
        _async_load(vbuf.index(st), V + v_row[:, None] + offs_d[None, :], mask=ok[:, None])
        async_copy.mbarrier_arrive(full.index(st), increment_count=False)  # each thread, once its copies land
        slot = slot_next
        ok = ok_next


@gluon.jit
def _partition(args, ROLE: gl.constexpr, HQ: gl.constexpr, G: gl.constexpr, D: gl.constexpr, BLOCK_N: gl.constexpr,
               STAGES: gl.constexpr, FLAT: gl.constexpr, PW: gl.constexpr, NC: gl.constexpr):
    # Every partition gets the same arguments: ROLE 0 .. NC - 1 are the consumers, NC the producer.
    (Q, K, V, SLOTS, QPERM, QNODE, QVIS, PO, PLSE, kbuf, vbuf, full, empty, turn,
     kv_start, q_start, q_count, node, t0, kv_len, h, part_base, scale_log2, page_size,
     stride_qt, stride_qh, stride_kp, stride_ks, stride_kh, stride_vp, stride_vs, stride_vh, n_tiles) = args
    if ROLE == NC:
        _producer(K, V, SLOTS, kbuf, vbuf, full, empty, kv_start, kv_len, h, page_size,
                  stride_kp, stride_ks, stride_kh, stride_vp, stride_vs, stride_vh, n_tiles, D, BLOCK_N, STAGES, FLAT,
                  PW)
    else:
        _consumer(Q, QPERM, QNODE, QVIS, PO, PLSE, kbuf, vbuf, full, empty, turn,
                  q_start, q_count, node, t0, kv_len, h, part_base, scale_log2, stride_qt, stride_qh, n_tiles,
                  ROLE, HQ, G, D, BLOCK_N, STAGES, NC)


@gluon.jit(do_not_specialize=["first_item"])
def ws_partial_kernel(
    Q, K, V, SLOTS, ITEMS, QPERM, QNODE, QVIS, PO, PLSE,
    first_item, scale_log2, page_size,
    stride_qt, stride_qh, stride_kp, stride_ks, stride_kh, stride_vp, stride_vs, stride_vh,
    HQ: gl.constexpr, G: gl.constexpr, D: gl.constexpr, BLOCK_N: gl.constexpr, NFIELDS: gl.constexpr,
    FLAT: gl.constexpr, STAGES: gl.constexpr, PW: gl.constexpr, C_REGS: gl.constexpr, P_REGS: gl.constexpr,
    EARLY: gl.constexpr, NC: gl.constexpr,
):
    """One program per (work item, KV head) of a tile class of 64 * NC rows (NC consumers);
    arguments as deft_kernels.partial_kernel."""
    if EARLY:  # the merge may launch once every program here has started
        gdc_launch_dependents()
    item = ITEMS + (first_item + gl.program_id(0)) * NFIELDS
    h = gl.program_id(1)
    kv_start = gl.load(item + 0)
    kv_len = gl.load(item + 1)
    t0 = gl.load(item + 2)
    node = gl.load(item + 3)
    q_start = gl.load(item + 4)
    q_count = gl.load(item + 5)
    part_base = gl.load(item + 6)
    # Every partition runs the same number of tiles, over the keys any row sees: the item's
    # length (workplan's items), so the producer's first copies wait for no query's loads.
    n_tiles = gl.maximum((kv_len + BLOCK_N - 1) // BLOCK_N, 1)

    dtype: gl.constexpr = Q.dtype.element_ty
    SW: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    kbuf = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D], SW)
    vbuf = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D], SW)
    full = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(full.index(i), count=32 * PW)  # every producer thread's copies
        mbarrier.init(empty.index(i), count=NC)  # every consumer done with the stage
    if NC == 2:
        turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        mbarrier.init(turn.index(0), count=1)
        mbarrier.init(turn.index(1), count=1)
    else:
        # No turns to take. An mbarrier initialised and never used would be dead to the shared
        # memory allocator, which then lays the query tile over it: undefined behaviour that
        # gave wrong partials. The consumer never reads this argument.
        turn = empty
    args = (Q, K, V, SLOTS, QPERM, QNODE, QVIS, PO, PLSE, kbuf, vbuf, full, empty, turn,
            kv_start, q_start, q_count, node, t0, kv_len, h, part_base, scale_log2, page_size,
            stride_qt, stride_qh, stride_kp, stride_ks, stride_kh, stride_vp, stride_vs, stride_vh, n_tiles)
    if NC == 2:
        gl.warp_specialize([
            (_partition, (args, 0, HQ, G, D, BLOCK_N, STAGES, FLAT, PW, NC)),
            (_partition, (args, 1, HQ, G, D, BLOCK_N, STAGES, FLAT, PW, NC)),
            (_partition, (args, 2, HQ, G, D, BLOCK_N, STAGES, FLAT, PW, NC)),
        ], [4, PW], [C_REGS, P_REGS])
    else:
        gl.warp_specialize([
            (_partition, (args, 0, HQ, G, D, BLOCK_N, STAGES, FLAT, PW, NC)),
            (_partition, (args, 1, HQ, G, D, BLOCK_N, STAGES, FLAT, PW, NC)),
        ], [PW], [P_REGS])
