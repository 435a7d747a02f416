"""The per-sequence planner: each query's whole path on its own, split (flash decoding), sharing
nothing: the baseline a runtime without tree sharing would run. Vectorised numpy."""

from __future__ import annotations

import numpy as np

from .sizing import chunk_sizes, tile_cost
from .tiles import sequence_tiles, tile_shapes, work_limits
from .topology import concat_ranges
from .tree_plan import TreePlan
from .work_config import WorkConfig
from .workplan import HostWork, WorkPlan, item_rows, layout, upload

SEQUENCE_WAVES = 2.0  # the per-sequence baseline's programs per SM when the config leaves it open


def sequence_host_work(plan: TreePlan, num_q_heads: int, num_kv_heads: int, head_dim: int, cfg: WorkConfig) -> HostWork:
    """Per-sequence split-KV items: each query's whole path on its own, cut into equal splits."""
    group = num_q_heads // num_kv_heads
    tile = tile_shapes(group, head_dim, None, cfg.tiles or sequence_tiles(head_dim))[0]
    offsets, flat = plan.query_views
    lengths = offsets[1:] - offsets[:-1]
    nq = plan.num_queries
    bn = tile.block_n
    cost = float(tile_cost(np.array(tile.block_m)))
    waves = SEQUENCE_WAVES if cfg.waves is None else cfg.waves
    target = float(lengths.sum()) * cost * num_kv_heads / (waves * work_limits(cfg.num_sms, plan.device)[0])
    chunk = chunk_sizes(np.full(nq, cost), np.full(nq, max(bn, cfg.min_chunk or bn)), lengths, target, np.full(nq, bn))
    nsplits = -(-lengths // chunk)
    q = np.arange(nq).repeat(nsplits)
    t0 = concat_ranges(0, nsplits) * chunk[q]
    items = item_rows(len(q), offsets[q] + t0, np.minimum(chunk[q], lengths[q] - t0), t0, -1, q, 1)
    ident = np.arange(nq)
    return layout(
        nq,
        flat,
        items,
        np.zeros(len(q), dtype=np.int64),
        [tile],
        ident,
        plan.query_nodes,
        plan.query_visible,
    )


def sequence_work(plan: TreePlan, num_q_heads: int, num_kv_heads: int, head_dim: int, cfg: WorkConfig) -> WorkPlan:
    """:func:`sequence_host_work`, uploaded to the plan's device with its workspaces."""
    host = sequence_host_work(plan, num_q_heads, num_kv_heads, head_dim, cfg)
    return upload(host, plan.device, num_q_heads, head_dim, cfg)
