"""The tile shapes a DeFT layout can take, and how many programs of each one SM holds.

A tile class is a shape of the partial kernel's tile: query rows (query rows x G heads), keys,
warps and pipeline stages. How many programs of a shape an SM holds at once follows from the
shared memory and registers the compiled kernels take (:data:`TILE_NEEDS`, measured) or, for
other shapes, an estimate; :mod:`sizing` builds its launch-time model on these counts.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
import torch


@dataclass(frozen=True, order=True)
class TileConfig:
    """One tile class of the partial kernel: ``block_m`` rows (query rows x G heads), ``block_n``
    keys per step, and the launch's ``num_warps`` and ``num_stages`` (its pipeline depth; 1: the
    kernel prefetches the next tile in registers instead). Ordered as its fields are listed, so
    sorted tiles come smallest rows first."""

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int


def padded_head_dim(head_dim: int) -> int:
    """The head dimension a tile holds: the next power of two, at least 16."""
    return max(16, 1 << (head_dim - 1).bit_length())


def tile_shapes(
    group: int, head_dim: int, max_block_m: int | None = None, tiles: tuple[TileConfig, ...] | None = None
) -> list[TileConfig]:
    """The tile of each class, smallest rows first: ``tiles`` when given, else the defaults for
    ``head_dim``; those of at least ``group`` and at most ``max_block_m`` rows."""
    d = padded_head_dim(head_dim)
    # Five stages: each K/V tile's address comes from a slot-id load, and Triton's sm_90 pipeline
    # overlaps that chain with the tile's math only from five stages on. 32-key tiles for the
    # 16-row class, whose items are mostly short nodes and tails: faster than three stages and
    # 64-key tiles on every workload of the kernel benchmark (docs/perf-log/).
    if d <= 128:
        defaults = [TileConfig(16, 32, 4, 5), TileConfig(64, 64, 4, 5), TileConfig(128, 64, 8, 5)]
    else:
        defaults = [TileConfig(16, 32, 4, 3), TileConfig(64, 32, 4, 3)]
    shapes = [
        t
        for t in (sorted(tiles) if tiles else defaults)
        if t.block_m >= group and (max_block_m is None or t.block_m <= max_block_m)
    ]
    if not shapes:
        raise ValueError(
            f"no tile fits a GQA group of {group} query heads per KV head with head_dim {head_dim} "
            f"and max_block_m {max_block_m}; groups up to 64 are supported"
        )
    return shapes


SM_LIMITS = (233472, 65536)  # shared memory bytes and registers per SM of an H100 / H200: planning off the GPU
# Shared memory bytes and registers per thread the partial kernel takes with each default tile
# at head_dim 128: Triton 3.6's build for sm_90. (On Hopper
# the 64- and 128-row classes run deft_ws's kernels instead, which fit as many programs per SM:
# 114,748 bytes and 8 warps, 163,928 bytes and 12 warps, of 128 registers.)
TILE_NEEDS = MappingProxyType(
    {
        TileConfig(16, 32, 4, 5): (38144, 96),
        TileConfig(64, 64, 4, 5): (115200, 194),
        TileConfig(128, 64, 8, 5): (131584, 175),
    }
)


@functools.cache
def _device_limits(index: int) -> tuple[int, int, int]:
    """(SMs, shared memory bytes per SM, registers per SM) of CUDA device ``index``."""
    props = torch.cuda.get_device_properties(index)
    smem = getattr(props, "shared_memory_per_multiprocessor", SM_LIMITS[0])
    return props.multi_processor_count, smem, getattr(props, "regs_per_multiprocessor", SM_LIMITS[1])


@functools.cache
def shape_arrays(
    group: int, head_dim: int, max_block_m: int | None, tiles: tuple[TileConfig, ...] | None
) -> tuple[list[TileConfig], np.ndarray, np.ndarray]:
    """:func:`tile_shapes` with its block_m and block_n columns as arrays, built once per layout."""
    shapes = tile_shapes(group, head_dim, max_block_m, tiles)
    bm_of, bn_of = np.array([t.block_m for t in shapes]), np.array([t.block_n for t in shapes])
    bm_of.flags.writeable = bn_of.flags.writeable = False
    return shapes, bm_of, bn_of


def sequence_tiles(head_dim: int) -> tuple[TileConfig, ...] | None:
    """Per-sequence items are whole paths, long and one query each: 64-key tiles at three stages
    measured fastest for them (the 32-key, five-stage tiles the DeFT planner gives short leaves
    and tails were slower on long paths)."""
    return (TileConfig(16, 64, 4, 3), TileConfig(64, 64, 4, 3)) if head_dim <= 128 else None


def work_limits(num_sms: int | None, device: torch.device) -> tuple[int, int, int]:
    """(SMs, shared memory bytes per SM, registers per SM) to size work for on ``device``;
    ``num_sms`` (a config's) replaces its SM count."""
    if device.type == "cuda":
        sms, smem, regs = _device_limits(torch.cuda.current_device() if device.index is None else device.index)
    else:
        sms, (smem, regs) = 4, SM_LIMITS
    return (sms if num_sms is None else num_sms), smem, regs


def programs_per_sm(
    tile: TileConfig, head_dim: int, smem_per_sm: int, regs_per_sm: int, needs: tuple[int, int] | None = None
) -> int:
    """How many programs of ``tile`` one SM holds at once.

    From the shared memory bytes and registers per thread a program takes (``needs``; default:
    measured for the default tiles, :data:`TILE_NEEDS`, else estimated from a K and a V tile of
    2-byte elements per stage and the query tile, the accumulator and score tile in registers,
    plus 96 per thread for the rest). The driver keeps 1 KiB of shared memory per program;
    registers go by 8 per thread.
    """
    d = padded_head_dim(head_dim)
    if needs is not None:
        smem, regs = needs
    elif d == 128 and tile in TILE_NEEDS:
        smem, regs = TILE_NEEDS[tile]
    else:
        smem = tile.num_stages * tile.block_n * d * 4 + tile.block_m * d * 2
        regs = min(255, tile.block_m * (d + tile.block_n) // (32 * tile.num_warps) + 96)
    by_smem = smem_per_sm // (smem + 1024)
    by_regs = regs_per_sm // (-(-regs // 8) * 8 * 32 * tile.num_warps)
    return max(1, min(by_smem, by_regs, 64 // tile.num_warps))
