"""DeFT tree attention: the launches of :mod:`deft_kernels` over a plan's work, and the entry points.

A call runs the partial kernel once per tile class of its work (one program per work item and KV
head), then the merge, one program per query and KV head (or group of KV heads where a call has
many queries: see :func:`merge_heads`); the merge starts while the last partial launch finishes
where the GPU allows it (``WorkConfig.early_merge``). Work items and workspaces come from
:mod:`plan.tree_work` (or :mod:`plan.sequence_work`) and are cached on the plan, so a call
allocates only its output. On Hopper GPUs the 64- and 128-row tile classes run :mod:`deft_ws`'s
warp-specialised version of the partial kernel instead.
"""

from __future__ import annotations

import functools
import math

import torch
import triton

from . import deft_ws
from .deft_kernels import merge_kernel, partial_kernel
from .device import dependent_launch
from .plan.sequence_work import sequence_work
from .plan.tree_plan import TreePlan
from .plan.tree_work import tree_work
from .plan.work_config import WorkConfig
from .plan.workplan import ITEM_FIELDS, OWN_RANGES, TileClass, WorkPlan


def _check_inputs(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, plan: TreePlan) -> None:
    plan.check_inputs(q, k_cache, v_cache)
    if q.dtype not in (torch.float16, torch.bfloat16) or k_cache.dtype != q.dtype or v_cache.dtype != q.dtype:
        raise ValueError(
            f"q, k_cache, v_cache must all be float16 or all bfloat16; got {q.dtype}, {k_cache.dtype}, {v_cache.dtype} "
            "(use backend='reference' for float32)"
        )
    if not (q.device == k_cache.device == v_cache.device):
        raise ValueError(f"q, k_cache and v_cache must be on one device; got {q.device}, {k_cache.device}, "
                         f"{v_cache.device}")
    if q.stride(-1) != 1 or k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
        raise ValueError("the head dimension of q, k_cache and v_cache must be contiguous (stride 1)")
    if q.shape[2] < 16:
        raise ValueError(f"head_dim must be at least 16 for tensor-core tiles, got {q.shape[2]}")


@functools.cache
def _hopper(device: torch.device) -> bool:
    """Whether ``device`` runs Hopper's warpgroup MMAs (compute capability 9.x), which
    :mod:`deft_ws` is written for."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] == 9


MERGE_PROGRAMS = 512  # the merge programs a call keeps at least when it groups KV heads
MERGE_HEADS = 4  # the most KV heads a merge program takes unasked
MERGE_TILE = 16 * 128  # the most elements of one partial's rows a grouped program holds unasked
# Most pipeline stages of the merge's own-key loop: a call takes one per step of its longest own
# range, up to this many. Three measured faster than none or two on decode tails of 128 keys
# (docs/perf-log/).
OWN_STAGES = 3


def merge_heads(asked: int | None, num_queries: int, num_kv_heads: int, rows_per_head: int, head_dim: int) -> int:
    """KV heads each merge program takes: ``asked`` (WorkConfig.merge_heads), else the most, up
    to MERGE_HEADS, that leave MERGE_PROGRAMS programs and keep a partial's rows (``rows_per_head``
    padded query heads of ``head_dim`` padded elements per KV head) within MERGE_TILE; at most
    the largest power of two that divides the model's KV heads.

    A merge program waits on a chain of dependent loads (its own keys' slots, their K and V,
    then its partials), so with many programs a call takes several rounds of that latency. One
    program over several KV heads reads their rows in the same loads. With Llama-3-8B heads (4
    query heads of 128 per KV head) and many queries, 4 KV heads per program measured faster
    than one and 8 no faster than 4; with few queries grouping was sometimes much slower
    (docs/perf-log/). Larger rows per program than measured there (more query heads per KV head,
    wider heads) group fewer KV heads, so a program never holds more partial rows in flight than
    that.
    """
    most = num_kv_heads & -num_kv_heads
    if asked is not None:
        return min(asked, most)
    cap = min(MERGE_HEADS, most, max(1, MERGE_TILE // (rows_per_head * head_dim)))
    heads = 1
    while heads < cap and num_queries * num_kv_heads // (2 * heads) >= MERGE_PROGRAMS:
        heads *= 2
    return heads


@functools.cache
def _side_stream(device: torch.device) -> torch.cuda.Stream:
    """A second stream per device for partial launches of another tile class."""
    return torch.cuda.Stream(device)


def _launch_partials(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, work: WorkPlan, tc: TileClass, scale: float,
    page_size: int, group: int, d: int, d_pad: int, flat: bool, off32: bool, early: bool = False,
) -> object:
    """One partial launch: the items of tile class ``tc``, every KV head, on the current stream;
    ``flat``: pages back to back; ``off32``: cache offsets fit in 32 bits; ``early``: the merge
    after it is launched early (see :class:`WorkConfig`).

    Returns the compiled kernel (its metadata holds the shared memory and registers it takes).
    """
    h_q, h_kv = q.shape[1], k_cache.shape[2]
    args = (
        q, k_cache, v_cache, work.slots, work.items, work.q_perm, work.q_node, work.q_vis,
        work.partial_o, work.partial_lse,
        tc.first_item, scale * 1.4426950408889634, page_size,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
    )
    tile = tc.tile
    ws = deft_ws.TILES.get(tile.block_m) if work.warp_specialized and _hopper(q.device) else None
    if ws is not None and deft_ws.fits(k_cache, v_cache):
        return deft_ws.ws_partial_kernel[(tc.num_items, h_kv)](
            *args, HQ=h_q, G=group, D=d, BLOCK_N=deft_ws.BLOCK_N, NFIELDS=ITEM_FIELDS, FLAT=flat,
            STAGES=ws.stages, PW=deft_ws.PRODUCER_WARPS, C_REGS=ws.consumer_regs, P_REGS=ws.producer_regs,
            EARLY=early, NC=ws.consumers, num_warps=4, maxnreg=ws.max_regs,
        )
    return partial_kernel[(tc.num_items, h_kv)](
        *args, HQ=h_q, G=group, D=d, D_PAD=d_pad, BLOCK_M=tile.block_m, BLOCK_N=tile.block_n,
        NFIELDS=ITEM_FIELDS, FLAT=flat, OFF32=off32, PREFETCH=tile.num_stages == 1, EARLY=early,
        num_warps=tile.num_warps, num_stages=tile.num_stages,
    )


def run_work(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, work: WorkPlan, sm_scale: float | None = None,
    merge: bool = True,
) -> torch.Tensor:
    """Launch the partial kernels over ``work``, then the merge (``merge=False`` stops before it, for timing).

    The tile classes launch in the plan's order (the longest launch first): the first on the
    current stream, the others, when ``work.side_by_side``, on a second stream beside it.

    Shapes as :func:`deft_tree_attention`; the merge runs one program per row of q, so q may
    have padding rows past the work's queries (their merge lists are empty: output zero).
    """
    num_q, h_q, d = q.shape
    h_kv = k_cache.shape[2]
    group = h_q // h_kv
    d_pad = max(16, triton.next_power_of_2(d))
    own = work.own_start is not None
    g_m = triton.next_power_of_2(group)
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(d)
    out = torch.empty_like(q)
    if num_q == 0:
        return out
    page_size = k_cache.shape[1]
    flat = k_cache.stride(0) == page_size * k_cache.stride(1) and v_cache.stride(0) == page_size * v_cache.stride(1)
    off32 = deft_ws.int32_offsets(k_cache, v_cache)
    main = torch.cuda.current_stream(q.device) if q.is_cuda else None
    side = _side_stream(q.device) if main is not None and work.side_by_side and len(work.classes) > 1 else None
    # The merge launches early only right behind one partial launch on its own stream: with
    # nothing before it but the step's other kernels, it would read keys they still write.
    early = merge and work.early_merge and side is None and bool(work.classes) and dependent_launch(q.device)
    if side is not None and main is not None:  # a side stream only on CUDA, where main is the current one
        side.wait_stream(main)  # the side stream starts after the step's inputs are written
    # Streams are switched with set_stream: the torch.cuda.stream context asks CUDA for the
    # device count twice per entry, a host cost paid per layer of an eager forward.
    try:
        for i, tc in enumerate(work.classes):
            if side is not None and i == 1:
                torch.cuda.set_stream(side)
            _launch_partials(q, k_cache, v_cache, work, tc, scale, page_size, group, d, d_pad, flat, off32, early)
    finally:
        if side is not None and main is not None:
            torch.cuda.set_stream(main)
    if side is not None and main is not None:
        main.wait_stream(side)  # the merge reads every class's partials
    if not merge:
        return out
    hpp = merge_heads(work.merge_heads, num_q, h_kv, g_m, d_pad)
    block_k = max(1, work.own_block // hpp)
    stages = min(OWN_STAGES, max(1, -(-work.own_longest // block_k)))
    merge_kernel[(num_q, h_kv // hpp)](
        work.partial_o, work.partial_lse, work.merge_offsets, work.merge_rows, out,
        out.stride(0), out.stride(1),
        q, k_cache, v_cache, work.slots, work.own_start if own else work.slots, work.own_len if own else work.slots,
        work.own_stride, scale * 1.4426950408889634, page_size,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        HQ=h_q, G=group, G_M=g_m, HPP=hpp, D=d, D_PAD=d_pad, BLOCK_P=work.merge_block,
        OWN_RANGES=OWN_RANGES if own else 0, OWN_ROWS=max(16, hpp * g_m), BLOCK_K=block_k, FLAT=flat, OFF32=off32,
        EARLY=early, OWN_STAGES=stages, num_warps=4, **({"launch_pdl": True} if early else {}),
    )
    return out


def deft_work(plan: TreePlan, num_q_heads: int, num_kv_heads: int, head_dim: int,
              config: WorkConfig | None = None) -> WorkPlan:
    """The plan's DeFT work items and workspaces for this head layout, built once and cached."""
    cfg = config or WorkConfig()
    key = ("deft", num_q_heads, num_kv_heads, head_dim, cfg)
    if key not in plan.backend_data:
        plan.backend_data[key] = tree_work(plan, num_q_heads, num_kv_heads, head_dim, cfg)
    return plan.backend_data[key]


def per_sequence_work(
    plan: TreePlan, num_q_heads: int, num_kv_heads: int, head_dim: int, config: WorkConfig | None = None
) -> WorkPlan:
    """The plan's per-sequence (flash-decoding) work items and workspaces, built once and cached."""
    cfg = config or WorkConfig()
    key = ("per_sequence", num_q_heads, num_kv_heads, head_dim, cfg)
    if key not in plan.backend_data:
        plan.backend_data[key] = sequence_work(plan, num_q_heads, num_kv_heads, head_dim, cfg)
    return plan.backend_data[key]


def deft_tree_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    plan: TreePlan,
    *,
    sm_scale: float | None = None,
    config: WorkConfig | None = None,
) -> torch.Tensor:
    """Tree attention with DeFT's KV-guided grouping and flattened, balanced KV chunks.

    Args:
        q: [num_queries, H_q, D] float16 or bfloat16.
        k_cache, v_cache: [num_pages, page_size, H_kv, D], same dtype; H_q = G * H_kv.
        plan: from :func:`plan_tree_attention`; its work items are built on first use per head
            layout and reused by later calls (every layer of a step).
        sm_scale: softmax scale, default 1/sqrt(D).
        config: work sizing (tests use it to force many small chunks).
    Returns:
        [num_queries, H_q, D] in q's dtype.
    """
    _check_inputs(q, k_cache, v_cache, plan)
    work = deft_work(plan, q.shape[1], k_cache.shape[2], q.shape[2], config)
    return run_work(q, k_cache, v_cache, work, sm_scale)


def per_sequence_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    plan: TreePlan,
    *,
    sm_scale: float | None = None,
    config: WorkConfig | None = None,
) -> torch.Tensor:
    """Split-KV decoding of each query over its own path (flash decoding), sharing nothing.

    The baseline a runtime without tree sharing would use: every query reads its whole path's
    KV itself, G query heads packed per KV head. Shapes as :func:`deft_tree_attention`.
    """
    _check_inputs(q, k_cache, v_cache, plan)
    work = per_sequence_work(plan, q.shape[1], k_cache.shape[2], q.shape[2], config)
    return run_work(q, k_cache, v_cache, work, sm_scale)
