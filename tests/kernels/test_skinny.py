"""The few-rows linear kernel against ``F.linear`` (interpreter on CPU in float16, bfloat16 on the GPU)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from thoughttree.kernels.skinny import SkinnyConfig, skinny_fits, skinny_linear

DEV = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = [torch.float16] + ([torch.bfloat16] if DEV == "cuda" else [])
SMALL = SkinnyConfig(max_rows=16, min_programs=1, block_n=16, block_k=64)


def _data(rows: int, n: int, k: int, dtype: torch.dtype, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, k, generator=g).to(DEV, dtype)
    w = (torch.randn(n, k, generator=g) / k**0.5).to(DEV, dtype)
    b = torch.randn(n, generator=g).to(DEV, dtype)
    return x, w, b


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,n", [(1, 48), (5, 40), (16, 33)])  # n not a multiple of the band
@pytest.mark.parametrize("bias", [False, True])
def test_matches_linear_in_float32(dtype: torch.dtype, rows: int, n: int, bias: bool) -> None:
    x, w, b = _data(rows, n, 192, dtype)
    assert skinny_fits(x, w, SMALL)
    got = skinny_linear(x, w, b if bias else None, SMALL)
    want = F.linear(x.float(), w.float(), b.float() if bias else None)
    assert got.dtype == dtype and got.shape == (rows, n)
    # One rounding of a float32 sum: within a unit in the last place at the output's scale.
    assert (got.float() - want).abs().max().item() <= 2 * torch.finfo(dtype).eps * max(1.0, want.abs().max().item())


def test_falls_back_outside_its_shapes() -> None:
    x, w, _ = _data(17, 48, 192, torch.float16)
    assert not skinny_fits(x, w, SMALL)  # too many rows
    assert torch.equal(skinny_linear(x, w, None, SMALL), F.linear(x, w))
    x, w, _ = _data(4, 48, 100, torch.float16)
    assert not skinny_fits(x, w, SMALL)  # K not a multiple of the tile depth
    x, w, _ = _data(4, 48, 192, torch.float16)
    assert not skinny_fits(x, w, SkinnyConfig(min_programs=4, block_n=16, block_k=64))  # 3 bands cannot fill a GPU
    assert not skinny_fits(x.float(), w.float(), SMALL)  # tensor-core dtypes only
