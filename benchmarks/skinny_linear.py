"""Decode-step projections: the skinny kernel against cuBLAS (``F.linear``), side by side.

For each Llama-3-8B projection (qkv, o, gate_up, down, lm_head) and a few row counts, the time of
one projection when every layer's weight is distinct (a CUDA graph over enough weight copies that
nothing stays in L2), the bandwidth it reaches over the weight bytes, and the ratio.

    PYTHONPATH=. python3 benchmarks/skinny_linear.py [--sweep]

``--sweep`` also times a few tilings of the skinny kernel.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Callable

import torch
import torch.nn.functional as F
from rich.console import Console
from rich.table import Table

from thoughttree.kernels.skinny import SkinnyConfig, skinny_fits, skinny_linear

SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336), "lm_head": (128256, 4096)}
ROWS = (1, 8, 16, 32, 64)
SWEEP = (
    SkinnyConfig(max_rows=64),
    SkinnyConfig(max_rows=64, block_k=128, num_stages=6),
    SkinnyConfig(max_rows=64, block_k=512, num_stages=3),
    SkinnyConfig(max_rows=64, block_n=32, num_stages=4),
    SkinnyConfig(max_rows=64, block_n=32, block_k=128, num_stages=5, num_warps=4),
    SkinnyConfig(max_rows=64, num_warps=2, num_stages=5),
)


def graph_time(fn: Callable[[torch.Tensor], torch.Tensor], weights: list[torch.Tensor], reps: int = 5) -> float:
    """Seconds per call of ``fn`` over each weight once, replayed from a CUDA graph."""
    for w in weights:
        fn(w)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for w in weights:
            fn(w)
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1000 / reps / len(weights)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sweep", action="store_true", help="also time a few tilings of the skinny kernel")
    args = ap.parse_args()
    console = Console(width=200)
    console.print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    console.print("command: python " + " ".join(shlex.quote(a) for a in sys.argv))
    configs = (SkinnyConfig(),) + (SWEEP if args.sweep else ())
    table = Table(title="projection of T rows, bf16, weights not in L2 (µs; TB/s over the weight bytes)", title_justify="left")
    for col in ["projection", "N×K", "T", "cuBLAS µs", "cuBLAS TB/s"] + [f"skinny[{i}] µs" for i in range(len(configs))] + ["best × cuBLAS"]:
        table.add_column(col, justify="right")
    torch.manual_seed(0)
    for name, (n, k) in SHAPES.items():
        copies = max(2, int(1.5e9 // (n * k * 2)))
        weights = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5 for _ in range(copies)]
        for t in ROWS:
            x = torch.randn(t, k, device="cuda", dtype=torch.bfloat16)
            base = graph_time(lambda w: F.linear(x, w), weights)
            cells, best = [], base
            for cfg in configs:
                if not skinny_fits(x, weights[0], cfg):
                    cells.append("–")
                    continue
                err = (skinny_linear(x, weights[0], None, cfg).float() - F.linear(x.float(), weights[0].float())).abs().max().item()
                if err > 0.05:
                    raise SystemExit(f"skinny {cfg} differs from F.linear by {err} on {name} T={t}")
                s = graph_time(lambda w: skinny_linear(x, w, None, cfg), weights)
                best = min(best, s)
                cells.append(f"{s * 1e6:.1f} ({n * k * 2 / s / 1e12:.2f})")
            table.add_row(name, f"{n}×{k}", str(t), f"{base * 1e6:.1f}", f"{n * k * 2 / base / 1e12:.2f}", *cells, f"{base / best:.2f}×")
        table.add_section()
        del weights
        torch.cuda.empty_cache()
    console.print(table)
    for i, cfg in enumerate(configs):
        console.print(f"skinny[{i}]: {cfg}")


if __name__ == "__main__":
    main()
