"""How the DeFT planner sizes each tile class's launch.

A small launch-time model of a rough H200, built on how many programs of each tile class one SM
holds (:mod:`tiles`), by which :mod:`tree_work` chooses each class's chunk size, folds launches
too small to fill a round into narrower ones, and gives a wide launch its share of the SMs
beside narrower ones. Only which choice is faster matters to the model; docs/perf-log/ has the
measurements behind its constants.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from .tiles import TileConfig, padded_head_dim, programs_per_sm

# A rough H200 for the launch-time model of the work sizing (only which chunking is faster matters).
BANDWIDTH = 4.2e3  # bytes per ns: the copy rate
SM_TENSOR = 2.6e3  # FLOP per ns the attention tiles of one SM sustain (half its bf16 peak)
STREAM_NS = 8.0  # ns per key for a lone program to stream one KV head's K and V
START_NS = 1000.0  # a program's start-up: its item, query and slot-id loads before the first tile
# Memory-bound launches (a full round's K and V at the copy rate outlast its tensor-core work)
# take longer than the model says (16-row leaves of three trees, each launch timed alone); their
# estimates are scaled by this fitted factor to order a call's launches.
MEMORY_BOUND_SLOWDOWN = 1.8
# ns per key (one KV head's K and V) a narrow launch's programs take on an SM of their own while
# a wide launch runs beside them; fitted to prompt-and-leaves trees (docs/perf-log/).
FREE_SM_KEY_NS = 9.3
# The share of an SM a narrow launch gets in the slot beside each program of a wide one (fitted
# on the same trees).
NEXT_TO_WIDE = 0.065
# No split where the narrow launches' SM-time is more than this share of the wide one's: there
# they are long leaves whose K and V reads set the call's time, and SMs taken from the wide
# launch only lengthen it (measured on 64 leaves of 1000 keys beside an 8k prompt).
NARROW_SHARE = 0.5


@dataclass(frozen=True, eq=False)
class LaunchModel:
    """Per tile class [K]: the launch-time model of :func:`round_chunks`, built once per layout.

    sms: the device's SMs; slots: resident programs on all of them; key_ns: ns per key
    one of them takes alone (its tensor-core work on its share of the SM, or its stream of K and
    V, whichever is slower); sm_key_ns: the same for a program with an SM to itself (tensor-core
    work only); full_key_ns: ns per key in a full round (a whole round's K and V at the copy
    rate, if slower); copy_ns: ns per key of one head's K and V at the copy rate; partial_ns: ns
    per item for its partials' write and the merge's read; order_scale: MEMORY_BOUND_SLOWDOWN for
    memory-bound classes, else 1; classes: 0..K-1.
    """

    sms: int
    slots: np.ndarray
    key_ns: np.ndarray
    sm_key_ns: np.ndarray
    full_key_ns: np.ndarray
    copy_ns: float
    partial_ns: np.ndarray
    order_scale: np.ndarray
    classes: np.ndarray


@functools.cache
def class_model(shapes: tuple[TileConfig, ...], head_dim: int, limits: tuple[int, int, int]) -> LaunchModel:
    """The launch-time model of each tile class of ``shapes`` on a device of ``limits``."""
    sms, smem, regs = limits
    d = padded_head_dim(head_dim)
    per_sm = np.array([programs_per_sm(t, head_dim, smem, regs) for t in shapes])
    block_m = np.array([t.block_m for t in shapes])
    slots = sms * per_sm
    sm_key_ns = block_m * d * 4 / SM_TENSOR
    key_ns = np.maximum(STREAM_NS, sm_key_ns * per_sm)
    copy_ns = 4 * head_dim / BANDWIDTH  # 2-byte elements
    out = LaunchModel(
        sms=sms,
        slots=slots,
        key_ns=key_ns,
        sm_key_ns=sm_key_ns,
        full_key_ns=np.maximum(key_ns, slots * copy_ns),
        copy_ns=copy_ns,
        partial_ns=block_m * head_dim * 8 / BANDWIDTH,
        order_scale=np.where(slots * copy_ns > key_ns, MEMORY_BOUND_SLOWDOWN, 1.0),
        classes=np.arange(len(shapes)),
    )
    for a in (out.slots, out.key_ns, out.sm_key_ns, out.full_key_ns, out.partial_ns, out.order_scale, out.classes):
        a.flags.writeable = False
    return out


@functools.cache
def _round_scales(rounds: tuple[int, ...]) -> np.ndarray:
    """Read-only [len(rounds) + 1, 1]: the work of one item under each sizing of
    :func:`round_chunks`, in units of a class's work per resident program: half a round (2),
    then at most r rounds (1 / r)."""
    out = np.array([2.0] + [1.0 / r for r in rounds])[:, None]
    out.flags.writeable = False
    return out


def round_chunks(
    cls: np.ndarray, work: np.ndarray, lengths: np.ndarray, blocks: np.ndarray, chunk_args: tuple,
    model: LaunchModel, num_kv_heads: int, rounds: tuple[int, ...],
) -> tuple[np.ndarray, np.ndarray]:
    """Keys per chunk for each node, chosen per tile class so that its launch ends soonest.

    Each class is its own launch of about equal items on ``slots[c]`` resident programs, so it
    takes ceil(items / slots) rounds: with chunks sized for two programs per SM, 320 128-row
    items on 132 SMs take three rounds where 128 longer ones take one. For each class this sizes
    chunks for half a round and for at most r rounds, r in ``rounds`` (chunk counts rounded
    down), and keeps the sizing whose launch the model says ends first: a round lasts as long
    as one item's keys take one program, or as the round's K and V take the memory, whichever
    is longer, plus a start-up; a last round smaller than a full one puts fewer programs on each
    SM, and each gets a larger share of its tensor cores; partials cost their writes and the
    merge's reads. Ties go to fewer, longer items. Half a round is one program per SM for the
    64-row class (two per SM): half the partials for the merge, which measured faster on a long
    prompt's decode queries than a whole round (docs/perf-log/).

    cls, work, lengths, blocks: [N] per shared node: tile class, cost (keys x blocks x cost per
    key), keys, query blocks; chunk_args: (cost per key, fewest keys, tile keys) for
    :func:`chunk_sizes`; model: from :func:`class_model`.
    Returns ([N] keys per chunk, [K] the model's time of each class's launch in ns, memory-bound
    classes scaled by MEMORY_BOUND_SLOWDOWN).
    """
    slots = model.slots
    by_class = _scaled_eye(len(slots), num_kv_heads)[cls]  # [N, K]: a node's class, times the KV heads
    cost, fewest, align = chunk_args
    targets = (work @ by_class / slots) * _round_scales(rounds)  # [R + 1, K]
    chunks = chunk_sizes(cost, fewest, lengths, targets[:, cls], align, np.floor)  # [R + 1, N]
    items = (np.ceil(lengths / chunks) * blocks) @ by_class  # [R + 1, K]
    per_item = (lengths * blocks) @ by_class / np.maximum(items, 1)  # keys per item
    full, rest = np.divmod(items, slots)
    # The last round's programs per SM (fewer than a full round's), and so the share of an SM's
    # tensor cores each one gets.
    rest_key_ns = np.maximum(STREAM_NS, model.sm_key_ns * np.ceil(rest / model.sms))
    # A round of p programs: per_item keys at max(ns per key alone, p programs' K and V at the
    # copy rate) each, plus a start-up.
    span = (
        full * (per_item * model.full_key_ns + START_NS)
        + (rest > 0) * (per_item * np.maximum(rest_key_ns, rest * model.copy_ns) + START_NS)
        + items * model.partial_ns
    )
    best = span.argmin(axis=0)  # the first minimum: the fewest items
    return chunks[best[cls], np.arange(len(cls))], span[best, model.classes] * model.order_scale


def wide_split(
    cls: np.ndarray, keys: np.ndarray, items: np.ndarray, model: LaunchModel, num_kv_heads: int, forced: int | None,
) -> tuple[int, int] | None:
    """(class, SMs to size it for) where a call's wide launch should leave SMs to the launches
    beside it; None where it should not.

    A wide class is one whose programs each need an SM to themselves (the 128-row tiles). Sized
    for every SM, it leaves the narrow launches beside it (long leaves' 16-row programs) only the
    one slot next to each of its programs, where they run slowly. Where it fits one round and the
    others fit the GPU at once, it is sized for p SMs so that both end together: its SM-time A
    over p SMs against theirs, B, over the sms - p SMs it leaves free plus NEXT_TO_WIDE of an SM
    beside each of its programs: A / p = B / (sms - p + NEXT_TO_WIDE * p). SM-time is keys times
    ``sm_key_ns`` (for narrow classes at least FREE_SM_KEY_NS). Not where B is more than
    NARROW_SHARE of A. The split's wide launch goes first (measured on prompt-and-leaves trees,
    docs/perf-log/).
    ``forced`` sizes the wide class for that many SMs wherever other launches share the call.

    cls, keys, items: [N] per shared node: tile class, keys times query blocks, items per KV head.
    """
    present = np.bincount(cls, minlength=len(model.slots)) > 0
    wide = present & (model.slots == model.sms)
    if forced == 0 or wide.sum() != 1 or present.sum() < 2:
        return None
    w = int(wide.argmax())
    if forced is not None:
        return w, forced
    programs = np.bincount(cls, weights=items, minlength=len(model.slots)) * num_kv_heads
    if (programs > model.slots).any():
        return None
    sm_ns = np.bincount(cls, weights=keys, minlength=len(model.slots)) * np.maximum(model.sm_key_ns, FREE_SM_KEY_NS)
    a, b = sm_ns[w], sm_ns.sum() - sm_ns[w]
    if b > a * NARROW_SHARE:
        return None
    sms = int(model.sms * a / (b + a * (1.0 - NEXT_TO_WIDE)))
    return (w, sms) if sms < programs[w] else None


@functools.cache
def _scaled_eye(k: int, scale: float) -> np.ndarray:
    """A read-only [k, k] identity times ``scale`` (rows picked by class give one-hot rows)."""
    out = np.eye(k) * scale
    out.flags.writeable = False
    return out


def fewer_launches(
    cls: np.ndarray, queries: np.ndarray, lengths: np.ndarray, per_block: np.ndarray, fewest: np.ndarray,
    slots: np.ndarray,
    num_kv_heads: int,
) -> np.ndarray:
    """Tile class per node, after folding each launch that could not fill one round of its
    programs, even cut into its shortest chunks, into the next narrower launch, when its nodes
    read in the narrower tiles (more blocks of fewer rows) add no more keys than that launch
    reads already.

    Such a launch is latency-bound: it costs more on its own than the narrower tiles' extra
    reads of its nodes (as a short prompt's few query rows in 16-row tiles next to its long
    leaves measured).
    cls, queries, lengths: [N] per node; per_block, fewest, slots: [K] per class.
    """
    present = np.bincount(cls, minlength=len(slots)) > 0
    if present.sum() < 2:
        return cls
    for c in range(len(slots) - 1, 0, -1):
        narrower = present[:c].nonzero()[0]
        if not present[c] or not len(narrower):
            continue
        mine, into = cls == c, narrower[-1]
        items = (-(-lengths[mine] // fewest[c]) * -(-queries[mine] // per_block[c])).sum() * num_kv_heads
        reads = lengths * -(-queries // per_block[into])  # keys each node's blocks read in the narrower tiles
        if items < slots[c] and reads[mine].sum() <= reads[cls == into].sum():
            cls = np.where(mine, into, cls)
            present[c] = False
    return cls


def chunk_sizes(
    cost_per_token: np.ndarray, min_chunk: np.ndarray, lengths: np.ndarray, target: float | np.ndarray,
    align: np.ndarray,
    rounding=np.ceil,
) -> np.ndarray:
    """Tokens per chunk so every item costs about ``target`` (at most, with ``rounding=np.floor``
    for the chunk count: at least); whole nodes when they are cheap. Arrays broadcast."""
    want = np.maximum(np.ceil(target / cost_per_token), min_chunk)
    nchunks = np.maximum(1, rounding(lengths / want))
    size = np.ceil(np.ceil(lengths / nchunks) / align) * align  # equal chunks, tile-aligned
    return np.maximum(size, align).astype(np.int64)


def tile_cost(block_m: np.ndarray) -> np.ndarray:
    """Cost per key of a tile of ``block_m`` rows, in units of a key's K and V read: the read
    plus tensor-core work that grows with the rows."""
    return 1.0 + block_m / 64.0
