"""Few-row projections: the Triton kernel against cuBLAS, alone and in graphed decode steps.

Part one times each projection of a model shape at a few row counts, as a decode step runs them:
a CUDA graph of calls on distinct copies of the weight (more than L2 holds), so every call reads
its weight from memory. Part two times graphed decode steps of a random model of that shape
with the few-row kernel on and off, alternated in rounds (GPU time per step, medians);
``--epilogues`` adds steps with the kernel but without its epilogues (``silu_mul``,
``rope_store`` and ``add_rms_norm`` launched between the projections), ``--norm-epilogue``
steps with every epilogue but the residual add and RMSNorm (``add_rms_norm`` launched),
``--plain-launches`` steps whose projections are all launched plainly (none behind the kernel
before it).

    python benchmarks/few_rows.py --shape llama3-8b
    python benchmarks/few_rows.py --rows "" --steps 2048x8,16384x16,4096x32 --epilogues --norm-epilogue
    python benchmarks/few_rows.py --rows "" --steps 2048x8,16384x16,4096x32 --plain-launches
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys

import torch
import torch.nn.functional as F
import triton
from rich.console import Console
from rich.table import Table

from thoughttree import Sampling, ThoughtTree
from thoughttree.kernels import linear as few_rows
from thoughttree.kernels.reference import linear_reference

from profile_step import random_lm, step_us
from tree_decode import SHAPES, copy_bandwidth, step_bytes

L2_DEFEAT_BYTES = 1 << 30  # weight copies per graph: at least this much in all


def projections(shape: dict[str, int]) -> dict[str, tuple[int, int]]:
    """name -> (N, K) of each projection of a Llama-family layer, and the LM head."""
    h, d = shape["hidden"], shape["hidden"] // shape["heads"]
    return {
        "q/k/v": (h + 2 * shape["kv_heads"] * d, h),
        "attention output": (h, h),
        "gate/up": (2 * shape["intermediate"], h),
        "down": (h, shape["intermediate"]),
        "LM head": (shape["vocab"], h),
    }


def graph_us(call, weights: list[torch.Tensor], replays: int = 20) -> float:
    """µs per call of ``call(w)`` over ``weights``, replayed from one CUDA graph (fastest of 3)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call(weights[0])
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for w in weights:
            call(w)
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(3):
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) * 1e3 / replays / len(weights))
    return best


def alone(shape: dict[str, int], rows: list[int], max_rows: int, bandwidth: float, console: Console) -> None:
    table = Table(title="each projection alone: µs per call (share of the copy rate)", title_justify="left")
    for col in ("projection", "N × K", "rows", "cuBLAS", "few-row kernel", "tiling", "few-row ÷ cuBLAS", "max error (kernel / cuBLAS)"):
        table.add_column(col, justify="left" if col in ("projection", "tiling") else "right")
    for name, (n, k) in projections(shape).items():
        tile = few_rows.tiling(n)
        size = n * k * 2
        g = torch.Generator(device="cuda").manual_seed(n)
        weights = [(torch.randn(n, k, device="cuda", generator=g) * 0.02).to(torch.bfloat16)
                   for _ in range(max(2, min(32, -(-L2_DEFEAT_BYTES // size))))]
        floor = size / bandwidth * 1e6
        for r in rows:
            x = torch.randn(r, k, device="cuda", generator=g).to(torch.bfloat16)
            ref = linear_reference(x.float(), weights[0].float())
            cublas = graph_us(lambda w: F.linear(x, w), weights)
            cells = [name, f"{n} × {k}", str(r), f"{cublas:.2f} ({floor / cublas:.0%})"]
            if tile is None or r > max_rows:
                cells += ["–", "cuBLAS", "–", "–"]
            else:
                ours = graph_us(lambda w: few_rows.few_rows_linear(x, w, None, tile), weights)
                err = (few_rows.few_rows_linear(x, weights[0], None, tile).float() - ref).abs().max().item()
                err_cublas = (F.linear(x, weights[0]).float() - ref).abs().max().item()
                cells += [f"{ours:.2f} ({floor / ours:.0%})", f"{tile.block_n}×{tile.block_k}, {tile.stages} stages{', swapped' if tile.swap else ''}",
                          f"{ours / cublas:.3f}", f"{err:.2g} / {err_cublas:.2g}"]
            table.add_row(*cells)
        del weights
        torch.cuda.empty_cache()
    console.print(table)


def in_steps(shape: dict[str, int], workloads: list[tuple[int, int]], caps: list[int], epilogues: bool, norm_epilogue: bool,
             plain_launches: bool, rounds: int, bandwidth: float, console: Console) -> None:
    lm = random_lm(shape)
    weights, kv_token = step_bytes(lm)
    # (column, row cap, epilogues, norm epilogue, dependent launches): cuBLAS first, the ratios are to it.
    variants = [("cuBLAS", 0, True, True, True)] + [(f"few-row kernel to {cap} rows", cap, True, True, True) for cap in caps]
    if norm_epilogue:
        variants.append((f"to {max(caps)} rows, norms launched", max(caps), True, False, True))
    if epilogues:
        variants.append((f"to {max(caps)} rows, no epilogues", max(caps), False, True, True))
    if plain_launches:
        variants.append((f"to {max(caps)} rows, plain launches", max(caps), True, True, False))
    table = Table(title=f"graphed decode steps, GPU µs per step (median of {rounds} alternated rounds)", title_justify="left")
    table.add_column("prompt × branches", justify="right")
    for name, *_ in variants:
        table.add_column(name, justify="right")
    table.add_column("byte floor", justify="right")
    table.add_column("step ÷ floor (" + " / ".join(name for name, *_ in variants) + ")", justify="right")
    for prompt, branches in workloads:
        tree = ThoughtTree(lm, prompt=[1] + [(17 * i + 5) % shape["vocab"] for i in range(prompt - 1)], seed=0)
        tree.expand([tree.root], n=branches, sampling=Sampling(max_tokens=4, ignore_eos=True))
        times: list[list[float]] = [[] for _ in variants]
        for _ in range(rounds):
            for (_, cap, fold, norm, dependent), cell in zip(variants, times):
                lm.model.few_rows, lm.model.epilogues, lm.model.norm_epilogue = cap, fold, norm
                lm.model.dependent_launches = dependent
                lm.engine.arena = None  # capture the steps again with this setting
                cell.append(step_us(lm, tree, branches))
        med = [statistics.median(t) for t in times]
        floor = (weights + (prompt + branches * 8) * kv_token) / bandwidth * 1e6
        table.add_row(f"{prompt} × {branches}", f"{med[0]:.0f}", *(f"{m:.0f} ({m / med[0]:.3f})" for m in med[1:]), f"{floor:.0f}",
                      " / ".join(f"{m / floor:.2f}×" for m in med))
        del tree
    lm.model.few_rows, lm.model.epilogues, lm.model.norm_epilogue, lm.model.dependent_launches = few_rows.MAX_ROWS, True, True, True
    console.print(table)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", choices=sorted(SHAPES), default="llama3-8b")
    p.add_argument("--rows", default="1,8,16,32,64", help="row counts of the projections alone ('' skips them)")
    p.add_argument("--steps", default="2048x8,16384x16,4096x32,4096x64", help="prompt x branches of the decode steps ('' skips them)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-rows", default=str(few_rows.MAX_ROWS), help="row caps of the few-row kernel to try (comma-separated; the largest also caps part one)")
    p.add_argument("--epilogues", action="store_true", help="also time steps at the largest cap without the projections' epilogues")
    p.add_argument("--norm-epilogue", action="store_true", help="also time steps at the largest cap with add_rms_norm launched between the projections")
    p.add_argument("--plain-launches", action="store_true", help="also time steps at the largest cap with no projection launched behind the kernel before it")
    args = p.parse_args()
    console = Console(width=180)
    console.print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    console.print("command: python " + " ".join(shlex.quote(a) for a in sys.argv))
    bandwidth = copy_bandwidth()
    console.print(f"copy bandwidth {bandwidth / 1e12:.2f} TB/s")
    shape = SHAPES[args.shape]
    caps = [int(c) for c in args.max_rows.split(",")]
    if args.rows:
        alone(shape, [int(r) for r in args.rows.split(",")], max(caps), bandwidth, console)
    if args.steps:
        workloads = [tuple(int(v) for v in w.split("x")) for w in args.steps.split(",")]
        in_steps(shape, workloads, caps, args.epilogues, args.norm_epilogue, args.plain_launches, args.rounds, bandwidth, console)


if __name__ == "__main__":
    main()
