"""The tile shapes a DeFT layout can take, and how many programs of each one SM holds.

A tile class is a shape of the partial kernel's tile: query rows (query rows x G heads), keys,
warps and pipeline stages. How many programs of a shape an SM holds at once follows from the
shared memory and registers the compiled kernels take (:data:`TILE_NEEDS`, measured) or, for
other shapes, an estimate; :mod:`sizing` builds its launch-time model on these counts.
"""

from __future__ import annotations

import functools
from types import MappingProxyType

import numpy as np
import torch


def padded_head_dim(head_dim: int) -> int:
    """The head dimension a tile holds: the next power of two, at least 16."""
    return max(16, 1 << (head_dim - 1).bit_length())


def tile_shapes(
    group: int, head_dim: int, max_block_m: int | None = None, tiles: tuple | None = None
) -> list[tuple[int, int, int, int]]:
    """(block_m, block_n, num_warps, num_stages) per tile class, smallest rows first."""
    d = padded_head_dim(head_dim)
    # Five stages: each K/V tile's address comes from a slot-id load, and Triton's sm_90 pipeline
    # overlaps that chain with the tile's math only from five stages on. 32-key tiles for the
    # 16-row class, whose items are mostly short nodes and tails: faster than three stages and
    # 64-key tiles on every workload of the kernel benchmark (docs/perf-log/).
    if d <= 128:
        shapes = [(16, 32, 4, 5), (64, 64, 4, 5), (128, 64, 8, 5)]
    else:
        shapes = [(16, 32, 4, 3), (64, 32, 4, 3)]
    shapes = sorted(tiles) if tiles else shapes
    shapes = [s for s in shapes if s[0] >= group and (max_block_m is None or s[0] <= max_block_m)]
    if not shapes:
        raise ValueError(
            f"no tile fits a GQA group of {group} query heads per KV head with head_dim {head_dim} "
            f"and max_block_m {max_block_m}; groups up to 64 are supported"
        )
    return shapes


SM_LIMITS = (233472, 65536)  # shared memory bytes and registers per SM of an H100 / H200: planning off the GPU
# Shared memory bytes and registers per thread the partial kernel takes with each default tile
# (block_m, block_n, warps, stages) at head_dim 128: Triton 3.6's build for sm_90. (On Hopper
# the 64- and 128-row classes run deft_ws's kernels instead, which fit as many programs per SM:
# 114,748 bytes and 8 warps, 163,928 bytes and 12 warps, of 128 registers.)
TILE_NEEDS = MappingProxyType(
    {(16, 32, 4, 5): (38144, 96), (64, 64, 4, 5): (115200, 194), (128, 64, 8, 5): (131584, 175)}
)


@functools.cache
def _device_limits(index: int) -> tuple[int, int, int]:
    """(SMs, shared memory bytes per SM, registers per SM) of CUDA device ``index``."""
    props = torch.cuda.get_device_properties(index)
    smem = getattr(props, "shared_memory_per_multiprocessor", SM_LIMITS[0])
    return props.multi_processor_count, smem, getattr(props, "regs_per_multiprocessor", SM_LIMITS[1])


@functools.cache
def shape_arrays(
    group: int, head_dim: int, max_block_m: int | None, tiles: tuple | None
) -> tuple[list, np.ndarray, np.ndarray]:
    """:func:`tile_shapes` with its block_m and block_n columns as arrays, built once per layout."""
    shapes = tile_shapes(group, head_dim, max_block_m, tiles)
    bm_of, bn_of = np.array([s[0] for s in shapes]), np.array([s[1] for s in shapes])
    bm_of.flags.writeable = bn_of.flags.writeable = False
    return shapes, bm_of, bn_of


def sequence_tiles(head_dim: int) -> tuple[tuple[int, int, int, int], ...] | None:
    """Per-sequence items are whole paths, long and one query each: 64-key tiles at three stages
    measured fastest for them (the 32-key, five-stage tiles the DeFT planner gives short leaves
    and tails were slower on long paths)."""
    return ((16, 64, 4, 3), (64, 64, 4, 3)) if head_dim <= 128 else None


def work_limits(num_sms: int | None, device: torch.device) -> tuple[int, int, int]:
    """(SMs, shared memory bytes per SM, registers per SM) to size work for on ``device``;
    ``num_sms`` (a config's) replaces its SM count."""
    if device.type == "cuda":
        sms, smem, regs = _device_limits(torch.cuda.current_device() if device.index is None else device.index)
    else:
        sms, (smem, regs) = 4, SM_LIMITS
    return (sms if num_sms is None else num_sms), smem, regs


def programs_per_sm(
    shape: tuple[int, int, int, int],
    head_dim: int,
    smem_per_sm: int,
    regs_per_sm: int,
    needs: tuple[int, int] | None = None,
) -> int:
    """How many programs of a tile shape (block_m, block_n, warps, stages) one SM holds at once.

    From the shared memory bytes and registers per thread a program takes (``needs``; default:
    measured for the default tiles, :data:`TILE_NEEDS`, else estimated from a K and a V tile of
    2-byte elements per stage and the query tile, the accumulator and score tile in registers,
    plus 96 per thread for the rest). The driver keeps 1 KiB of shared memory per program;
    registers go by 8 per thread.
    """
    block_m, block_n, warps, stages = shape
    d = padded_head_dim(head_dim)
    if needs is None:
        needs = (
            TILE_NEEDS[shape]
            if d == 128 and shape in TILE_NEEDS
            else (
                stages * block_n * d * 4 + block_m * d * 2,
                min(255, block_m * (d + block_n) // (32 * warps) + 96),
            )
        )
    smem, regs = needs
    by_smem = smem_per_sm // (smem + 1024)
    by_regs = regs_per_sm // (-(-regs // 8) * 8 * 32 * warps)
    return max(1, min(by_smem, by_regs, 64 // warps))
