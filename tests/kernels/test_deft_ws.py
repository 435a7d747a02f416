"""The warp-specialised Hopper tile without a GPU: which caches it takes, and that it builds for
sm_90 with the resources the planner assumes (its results are checked on the GPU, in
test_deft_gpu.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from thoughttree.kernels import deft_ws
from thoughttree.kernels.deft import _hopper
from thoughttree.kernels.plan.tiles import SM_LIMITS, TILE_NEEDS, TileConfig, programs_per_sm


def test_fits_needs_head_dim_128_and_16_byte_rows() -> None:
    k = torch.zeros(6, 16, 8, 128, dtype=torch.bfloat16)
    assert deft_ws.fits(k, k)
    assert not deft_ws.fits(k[..., :64].contiguous(), k[..., :64].contiguous())  # head dim 64
    shifted = torch.zeros(k.numel() + 4, dtype=k.dtype)[4:].view(k.shape)  # 8 bytes off alignment
    assert not deft_ws.fits(shifted, k) and not deft_ws.fits(k, shifted)
    wide = torch.zeros(6, 16, 8, 136, dtype=k.dtype)[..., :128]  # rows 272 bytes apart
    assert not deft_ws.fits(wide, wide)
    # Offsets past 2**31 elements: the producer's 32-bit arithmetic cannot reach them.
    edge = 2**31 // (16 * 8 * 128)
    big = torch.empty(edge + 1, 16, 8, 128, dtype=k.dtype, device="meta")
    assert deft_ws.int32_offsets(big[:edge]) and not deft_ws.int32_offsets(big)
    assert not deft_ws.fits(big, big) and not deft_ws.fits(k, big)
    assert not _hopper(torch.device("cpu"))


@pytest.fixture(scope="module")
def builds() -> list[dict]:
    """Every build of ws_build.py, compiled in a process without the Triton interpreter."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    script = Path(__file__).with_name("ws_build.py")
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]


def test_kernel_builds_for_hopper_within_the_planned_residency(builds: list[dict]) -> None:
    assert len(builds) == 2 * len(deft_ws.TILES)
    smem, regs = SM_LIMITS
    for b in builds:
        tile = deft_ws.TILES[b["rows"]]
        assert b["warps"] == 4 * (tile.consumers + 1), b  # the consumers and the producer warpgroup
        assert b["dependents"] == b["early"], b
        # A full and an empty barrier per stage, and two for the consumers' turns when there are
        # two: a barrier initialised but never used is dead space to the shared-memory allocator,
        # which may lay a buffer over it (undefined behaviour; wrong results on an H200).
        assert b["barriers"] == 2 * tile.stages + (2 if tile.consumers == 2 else 0), b
        assert b["stack"] in (0, None), f"registers spill: {b}"
        # As many programs per SM as the planner's table gives the Triton tile of the class.
        triton_tile = next(s for s in TILE_NEEDS if s.block_m == b["rows"])
        ws_tile = TileConfig(b["rows"], deft_ws.BLOCK_N, b["warps"], tile.stages)
        got = programs_per_sm(ws_tile, 128, smem, regs, (b["shared"], tile.max_regs))
        assert got == programs_per_sm(triton_tile, 128, smem, regs), b
