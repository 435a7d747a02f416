"""Decode runs with long branches: each tail read by its query's merge against tail items.

A decode run reads each branch's tail (the tokens it has sampled so far) either in its query's
merge program, while the partial launch runs (``WorkConfig.fold_tail``: tails that may grow to at
most that many tokens), or as partial items of their own beside the shared prompt's. This times
whole runs of one prompt and ``branches`` branches of ``tokens`` tokens each under several
``fold_tail`` values, on a random bf16 model built on the GPU, the configs alternated ``--rounds``
times (medians), through the public API (``ThoughtTree.expand``, CUDA-graph steps).

    python benchmarks/decode_tails.py --shape llama3-8b --fold-tail 512,128,1024 --rounds 2

The first value is the one each ratio is taken against. Per run: ms per step (wall time of the
expansion over its tokens, host included) and the GPU time of its last step (a replay of the
last graph, tails at their longest).
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import statistics
import sys

import torch
from rich.console import Console
from rich.table import Table

from thoughttree import LM, Sampling, ThoughtTree

from profile_step import random_lm
from tree_decode import SHAPES, copy_bandwidth, step_gpu_seconds, sync_time

WORKLOADS = ((1024, 8, 512), (2048, 8, 512), (4096, 32, 512), (16384, 16, 512), (4096, 64, 256), (16384, 64, 256),
             (1024, 8, 1024), (4096, 32, 1024), (16384, 16, 1024))


def run(lm: LM, prompt: list[int], branches: int, tokens: int) -> tuple[float, float]:
    """(ms per step over the run, GPU ms of its last step)."""
    tree = ThoughtTree(lm, prompt=prompt, seed=0)
    tree.materialize()
    t0 = sync_time()
    tree.expand([tree.root], n=branches, sampling=Sampling(max_tokens=tokens, temperature=1.0, ignore_eos=True))
    step = (sync_time() - t0) / tokens * 1e3
    gpu = step_gpu_seconds(lm) * 1e3
    tree.prune(tree.root)
    return step, gpu


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", choices=sorted(SHAPES), default="llama3-8b")
    p.add_argument("--workloads", default="", help="prompt:branches:tokens,... (default: nine runs of 256-1024 tokens)")
    p.add_argument("--fold-tail", default="512,128,1024", help="comma-separated fold_tail values; the first is the baseline")
    p.add_argument("--rounds", type=int, default=2, help="times each config runs, alternated with the others (medians)")
    args = p.parse_args()
    workloads = [tuple(int(x) for x in w.split(":")) for w in args.workloads.split(",")] if args.workloads else WORKLOADS
    folds = [int(x) for x in args.fold_tail.split(",")]
    console = Console(width=160)
    console.print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    console.print("command: python " + " ".join(shlex.quote(a) for a in sys.argv))
    console.print(f"copy bandwidth measured: {copy_bandwidth() / 1e12:.2f} TB/s")
    shape = SHAPES[args.shape]
    lm = random_lm(shape)
    shipped = lm.engine.decode_work_config
    configs = [dataclasses.replace(shipped, fold_tail=f) for f in folds]
    table = Table(title=f"{args.shape}, decode runs by fold_tail: ms per step (median of {args.rounds}) / "
                  "GPU ms of the last step / ratio of ms per step to the first column", title_justify="left")
    table.add_column("prompt × branches × tokens", justify="left")
    for f in folds:
        table.add_column(f"fold_tail={f}" + (" (shipped)" if f == shipped.fold_tail else ""), justify="right")
    for prompt_len, branches, tokens in workloads:
        prompt = [1] + [(17 * i + 5) % shape["vocab"] for i in range(prompt_len - 1)]
        times: list[list[tuple[float, float]]] = [[] for _ in configs]
        for r in range(args.rounds):
            for i, cfg in enumerate(configs):
                lm.engine.decode_work_config = cfg
                lm.engine.arena = None  # fresh buffers and graphs for each config
                if r == 0:
                    run(lm, prompt, branches, tokens)  # compiles kernels, captures graphs
                times[i].append(run(lm, prompt, branches, tokens))
        steps = [statistics.median(s for s, _ in t) for t in times]
        gpus = [statistics.median(g for _, g in t) for t in times]
        table.add_row(f"{prompt_len} × {branches} × {tokens}",
                      *(f"{s:.3f} / {g:.3f} / {s / steps[0]:.3f}" for s, g in zip(steps, gpus)))
    console.print(table)


if __name__ == "__main__":
    main()
