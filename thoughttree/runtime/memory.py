"""Sizing the KV pool and the step buffers from the memory a GPU has free.

A model's steps need device memory besides the KV pool: the shared logits buffer of the decode
buffers' graphs, the graphs' activations, and the eager forwards of larger batches (their float32
logits among them). :func:`plan_memory` sets that workspace aside first and gives the KV pool a
share of what is left, or fails with a message that says what to change, before anything is
allocated: a search never meets an out-of-memory error from a pool or buffer sized too large.
Pure arithmetic on sizes, so it is tested against any GPU's numbers without one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .model_config import ModelConfig

KV_SHARE = 0.5  # of the free memory left after the workspace, when the pool's size is not given
HEADROOM_SHARE = 0.05  # of the free memory, kept for the allocator's fragmentation and libraries
MIN_HEADROOM = 256 << 20
EAGER_ROWS = 4096  # rows of the largest eager forward the workspace is sized for (a prefill's)
GRAPH_ROW_LIMIT = 1024  # the largest bucket a decode-buffer graph is captured for


class NotEnoughMemory(ValueError):
    """The GPU's free memory cannot hold what the runtime was asked for; nothing was allocated."""


@dataclass(frozen=True)
class MemoryPlan:
    """Bytes of one model's runtime on one device: what was free, what its steps need, the pool."""

    free_bytes: int
    workspace_bytes: int  # logits buffer, step activations and headroom
    page_bytes: int  # KV bytes of one page over all layers
    num_pages: int

    @property
    def kv_bytes(self) -> int:
        return self.num_pages * self.page_bytes


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def check_host_pool(pages: int, page_bytes: int, asked: str, total_bytes: int | None = None) -> None:
    """NotEnoughMemory when a KV pool of ``pages`` pages on the CPU is larger than the machine's
    memory (``total_bytes``, by default what the OS reports; nothing is checked where it reports
    nothing)."""
    if total_bytes is None:
        try:
            total_bytes = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return
    if pages * page_bytes > total_bytes:
        raise NotEnoughMemory(
            f"the KV pool asked for ({asked}: {_gib(pages * page_bytes)}) is larger than this machine's memory "
            f"({_gib(total_bytes)}); ask for at most {total_bytes // page_bytes} pages"
        )


def workspace_bytes(
    cfg: ModelConfig,
    itemsize: int,
    graph_max_rows: int,
    free_bytes: int,
    eager_rows: int = EAGER_ROWS,
    num_heads: int | None = None,
    num_kv_heads: int | None = None,
) -> int:
    """Device bytes a model's steps take besides weights and KV pool.

    The engine's one logits buffer ([graph rows, V] in the model's dtype), the activations a
    step of ``graph_max_rows`` rows keeps in its graph pool, the largest eager forward's
    activations and float32 logits (``eager_rows`` rows, of which at most the graph rows want
    logits), and headroom. ``num_heads`` / ``num_kv_heads``: the heads this process keeps (a
    tensor-parallel rank's), all by default.
    """
    hq = cfg.num_heads if num_heads is None else num_heads
    hkv = cfg.num_kv_heads if num_kv_heads is None else num_kv_heads
    graph_rows = max(1, min(graph_max_rows, GRAPH_ROW_LIMIT))
    # One layer's live activations per row: residual and normed hidden, q/k/v, attention output,
    # gate and up projections and their product.
    per_row = itemsize * (
        3 * cfg.hidden_size + (hq + 2 * hkv) * cfg.head_dim + hq * cfg.head_dim + 3 * cfg.intermediate_size
    )
    logits_buffer = graph_rows * cfg.vocab_size * itemsize
    graphs = graph_rows * per_row
    eager = eager_rows * per_row + graph_rows * cfg.vocab_size * 4
    headroom = max(MIN_HEADROOM, int(HEADROOM_SHARE * free_bytes))
    return logits_buffer + graphs + eager + headroom


def plan_memory(
    cfg: ModelConfig,
    *,
    itemsize: int,
    page_size: int,
    free_bytes: int,
    graph_max_rows: int,
    num_pages: int | None = None,
    kv_memory_bytes: int | None = None,
    num_kv_heads: int | None = None,
    num_heads: int | None = None,
    device: str = "the GPU",
) -> MemoryPlan:
    """The KV pool's pages on a device with ``free_bytes`` free (weights already loaded).

    Given ``num_pages`` or ``kv_memory_bytes``, that pool must fit beside the workspace. Else the
    pool takes :data:`KV_SHARE` of what the workspace leaves, or all of it where that share
    would not hold one path of the model's full context (a small GPU, or one that other pools
    fill: a pool too small for a search fails it with ``KVPoolExhausted``, which says so, not
    with an out-of-memory error); the workspace itself must fit. Raises
    :class:`NotEnoughMemory` naming the sizes.
    """
    hkv = cfg.num_kv_heads if num_kv_heads is None else num_kv_heads
    page = 2 * cfg.num_layers * page_size * hkv * cfg.head_dim * itemsize
    work = workspace_bytes(cfg, itemsize, graph_max_rows, free_bytes, num_heads=num_heads, num_kv_heads=hkv)
    room = free_bytes - work
    one_path = -(-cfg.max_context // page_size)
    if num_pages is not None:
        pages, asked = num_pages, f"num_pages={num_pages}"
    elif kv_memory_bytes is not None:
        pages, asked = kv_memory_bytes // page, f"kv_memory_bytes={kv_memory_bytes}"
    else:
        pages, asked = int(KV_SHARE * max(0, room)) // page, ""
        if pages < one_path:  # a small GPU: the whole room rather than too little
            pages = max(0, room) // page
    if asked and pages * page > room:
        raise NotEnoughMemory(
            f"the KV pool asked for ({asked}: {_gib(pages * page)}) does not fit on {device}: {_gib(free_bytes)} free, "
            f"of which the steps' buffers need {_gib(work)}; ask for at most {max(0, room) // page} pages "
            f"(RuntimeConfig(num_pages=...)), free GPU memory, or lower RuntimeConfig.graph_max_rows"
        )
    if pages < 1:
        raise NotEnoughMemory(
            f"{device} has {_gib(free_bytes)} free after the weights; the steps' buffers need {_gib(work)} and a KV "
            f"pool for one path of the full context ({cfg.max_context} tokens) {_gib(one_path * page)}. Free GPU "
            "memory, load the model in a smaller dtype or over several GPUs (tensor_parallel=N), or give "
            "RuntimeConfig(num_pages=...) for a shorter context"
        )
    return MemoryPlan(free_bytes, work, page, pages)
