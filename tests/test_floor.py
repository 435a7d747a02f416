"""The one floor definition the benchmarks print beside their rows (benchmarks/floor.py)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _floor_module():
    spec = importlib.util.spec_from_file_location("benchmark_floor", BENCHMARKS / "floor.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("benchmark_floor", module)  # dataclasses look their module up while building
    spec.loader.exec_module(module)
    return module


def test_the_floor_is_the_larger_of_the_byte_and_the_flop_floor() -> None:
    roofs = _floor_module().Roofs(copy_bytes_per_s=3e12, matmul_flops_per_s=800e12)
    assert roofs.floor_s(3e9, 8e11) == pytest.approx(1e-3) and roofs.bound(3e9, 8e11) == "bytes"
    assert roofs.floor_s(3e9, 1.6e12) == pytest.approx(2e-3) and roofs.bound(3e9, 1.6e12) == "FLOPs"
    assert roofs.byte_floor_s(3e9) == pytest.approx(1e-3) and roofs.flop_floor_s(1.6e12) == pytest.approx(2e-3)
    assert roofs.describe() == "roofs measured now: copy 3.00 TB/s (read + write), bf16 matmul 800 TFLOP/s"
    assert _floor_module().measure_roofs(torch.device("cpu")) is None


@pytest.mark.parametrize("script", ["tree_attention.py", "tree_decode.py", "tree_timing.py"])
def test_the_benchmarks_take_their_floor_from_the_shared_module(script: str) -> None:
    text = (BENCHMARKS / script).read_text()
    assert "from floor import measure_roofs" in text
    assert not re.search(r"max\([^)]*/ *rates\[0\]", text)  # no floor worked out by hand
