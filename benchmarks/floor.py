"""The one floor every benchmark prints beside its rows, and the two roofs it is made of.

floor = max(bytes read / copy bandwidth, FLOPs / bf16 matmul rate), both rates measured in the
same run on the same GPU (:func:`measure_roofs`): the copy bandwidth counts the bytes a
device-to-device copy reads and writes, the matmul rate is that of a large square bf16 product.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

COPY_BYTES = 1 << 30  # bytes copied per timing of the copy roof
MATMUL_N = 8192  # side of the square bf16 product timed for the matmul roof


@dataclass(frozen=True)
class Roofs:
    """Rates measured on one GPU in one run."""

    copy_bytes_per_s: float  # read + write
    matmul_flops_per_s: float  # bf16

    def floor_s(self, nbytes: float, flops: float) -> float:
        """Seconds no implementation can beat: the larger of reading ``nbytes`` and doing ``flops``."""
        return max(self.byte_floor_s(nbytes), self.flop_floor_s(flops))

    def byte_floor_s(self, nbytes: float) -> float:
        return nbytes / self.copy_bytes_per_s

    def flop_floor_s(self, flops: float) -> float:
        return flops / self.matmul_flops_per_s

    def bound(self, nbytes: float, flops: float) -> str:
        """Which of the two sets the floor: "bytes" or "FLOPs"."""
        return "FLOPs" if self.flop_floor_s(flops) > self.byte_floor_s(nbytes) else "bytes"

    def describe(self) -> str:
        return (
            f"roofs measured now: copy {self.copy_bytes_per_s / 1e12:.2f} TB/s (read + write), "
            f"bf16 matmul {self.matmul_flops_per_s / 1e12:.0f} TFLOP/s"
        )


def _best_seconds(fn: Callable[[], object], reps: int = 10) -> float:
    fn()
    out = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) * 1e-3)
    return min(out)


def measure_roofs(device: torch.device) -> Roofs | None:
    """Both roofs of ``device``, best of ten timings each; None on the CPU (no floor there)."""
    if device.type != "cuda":
        return None
    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    copy = 2 * src.numel() / _best_seconds(lambda: dst.copy_(src))
    a = torch.randn(MATMUL_N, MATMUL_N, device=device, dtype=torch.bfloat16)
    b = torch.randn(MATMUL_N, MATMUL_N, device=device, dtype=torch.bfloat16)
    mm = 2 * MATMUL_N**3 / _best_seconds(lambda: a @ b)
    return Roofs(copy, mm)
