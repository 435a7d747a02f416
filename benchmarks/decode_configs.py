"""Decode runs under several attention work configs, side by side: the shipped one against others.

Whole decode runs through the public API (``ThoughtTree.expand``, CUDA-graph steps) on a random
bf16 model built on the GPU. A workload is ``prompt:branches:tokens`` (branches of the prompt)
or ``prompt:parents:parent_tokens:samples:tokens`` (a search step: the prompt's ``parents``
children of ``parent_tokens`` tokens are decoded first, then timed: ``samples`` branches of each).
In the first form the prompt may be a path of nodes, ``64+4032:32:64``: a root of 64 tokens,
a child of 4032 under it, and 32 branches of that child (a search expanding a deep node).
Each config is the engine's shipped decode config with some fields replaced; configs alternate
``--rounds`` times, each time on fresh buffers and graphs after an untimed run that captures
them (medians).

    python benchmarks/decode_configs.py --set tails --configs "fold_tail=128"
    python benchmarks/decode_configs.py --set children --configs "fold_launches=False"
    python benchmarks/decode_configs.py --set paths --configs "chains=False"

Per cell: ms per step over the timed run (host included) / GPU ms of its last step (a replay of
its graph) / ratio of ms per step to the shipped config's.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import shlex
import statistics
import sys

import torch
from rich.console import Console
from rich.table import Table

from thoughttree import LM, Sampling, ThoughtTree
from thoughttree.kernels import WorkConfig

from profile_step import random_lm
from tree_decode import SHAPES, copy_bandwidth, step_gpu_seconds, sync_time

SETS = {
    # Long branches: tails read by the merge or as partial items (fold_tail).
    "tails": ((1024, 8, 512), (2048, 8, 512), (4096, 32, 512), (16384, 16, 512), (4096, 64, 256), (16384, 64, 256),
              (1024, 8, 1024), (4096, 32, 1024), (16384, 16, 1024)),
    # Search steps: samples of several children of a prompt (fold_launches).
    "children": ((1024, 5, 64, 8, 64), (2048, 8, 128, 4, 128), (4096, 16, 64, 4, 64), (1024, 32, 32, 2, 64),
                 (4096, 8, 96, 4, 96), (4096, 4, 256, 16, 128), (2048, 5, 200, 8, 256)),
    # Branches of a deep node: the prompt cut into a path of nodes (chains), some of them shorter
    # than small_node (thoughts split where siblings share a few tokens).
    "paths": (((4096,), 32, 64), ((64, 4032), 32, 64), ((4096, 64), 32, 64), ((4096, 64), 64, 64), ((64, 4032), 64, 64),
              ((2048, 48, 48), 5, 48), ((2048, 48, 48, 48), 25, 48), ((16384, 64), 16, 64),
              ((64, 3, 4029), 32, 64), ((2048, 3, 45, 3, 45, 3, 45), 25, 48), ((16384, 3, 61), 16, 64)),
}
Workload = tuple  # (prompt or path of node lengths, branches, tokens) or (prompt, parents, parent_tokens, samples, tokens)


def parse_workload(text: str) -> Workload:
    head, *rest = text.split(":")
    path = tuple(int(x) for x in head.split("+"))
    if len(path) > 1 and len(rest) != 2:
        raise SystemExit(f"a path of nodes takes prompt:branches:tokens, got {text!r}")
    return (path if len(path) > 1 else path[0], *(int(x) for x in rest))


def path_of(workload: Workload) -> tuple[int, ...]:
    """The node lengths of the workload's prompt path (one node unless given as a path)."""
    return workload[0] if isinstance(workload[0], tuple) else (workload[0],)


def parse_config(text: str, shipped: WorkConfig) -> WorkConfig:
    """``field=value, ...`` (Python keyword arguments with literal values) over the shipped config."""
    call = ast.parse(f"config({text})", mode="eval").body
    assert isinstance(call, ast.Call) and not call.args, f"expected field=value pairs, got {text!r}"
    return dataclasses.replace(shipped, **{kw.arg: ast.literal_eval(kw.value) for kw in call.keywords})


def run(lm: LM, prompt: list[int], workload: Workload) -> tuple[float, float]:
    """(ms per step of the timed expansion, GPU ms of its last step)."""
    path = path_of(workload)
    tree = ThoughtTree(lm, prompt=prompt[: path[0]], seed=0)
    node, at = tree.root, path[0]
    for length in path[1:]:
        node = tree.add_child(node, prompt[at : at + length], "")
        at += length
    tree.materialize()
    if len(workload) == 5:
        _, parents, parent_tokens, samples, tokens = workload
        nodes = tree.expand([tree.root], n=parents, sampling=Sampling(max_tokens=parent_tokens, temperature=1.0, ignore_eos=True))[0]
    else:
        _, samples, tokens = workload
        nodes = [node]
    t0 = sync_time()
    tree.expand(nodes, n=samples, sampling=Sampling(max_tokens=tokens, temperature=1.0, ignore_eos=True))
    step = (sync_time() - t0) / tokens * 1e3
    gpu = step_gpu_seconds(lm) * 1e3
    tree.prune(tree.root)
    return step, gpu


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", choices=sorted(SHAPES), default="llama3-8b")
    p.add_argument("--set", choices=sorted(SETS), default="tails", help="the workloads to run")
    p.add_argument("--workloads", default="", help="colon-separated workloads, comma-separated (replaces --set)")
    p.add_argument("--configs", nargs="+", default=[], help="each 'field=value,...' over the shipped decode config")
    p.add_argument("--rounds", type=int, default=2, help="times each config runs, alternated with the others (medians)")
    args = p.parse_args()
    workloads = [parse_workload(w) for w in args.workloads.split(",")] if args.workloads else SETS[args.set]
    console = Console(width=170)
    console.print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    console.print("command: python " + " ".join(shlex.quote(a) for a in sys.argv))
    console.print(f"copy bandwidth measured: {copy_bandwidth() / 1e12:.2f} TB/s")
    shape = SHAPES[args.shape]
    lm = random_lm(shape)
    shipped = lm.engine.decode_work_config
    configs = [("shipped", shipped)] + [(text, parse_config(text, shipped)) for text in args.configs]
    table = Table(title=f"{args.shape}, decode runs: ms per step (median of {args.rounds}) / GPU ms of the last step / "
                  "ratio to shipped", title_justify="left")
    table.add_column("workload", justify="left")
    for name, _ in configs:
        table.add_column(name, justify="right")
    for workload in workloads:
        prompt = [1] + [(17 * i + 5) % shape["vocab"] for i in range(sum(path_of(workload)) - 1)]
        times: list[list[tuple[float, float]]] = [[] for _ in configs]
        for _ in range(args.rounds):
            for i, (_, cfg) in enumerate(configs):
                lm.engine.decode_work_config = cfg
                lm.engine.arena = None  # buffers and graphs of this config's own work
                run(lm, prompt, workload)  # captures the graphs (and compiles, the first time)
                times[i].append(run(lm, prompt, workload))
        steps = [statistics.median(s for s, _ in t) for t in times]
        gpus = [statistics.median(g for _, g in t) for t in times]
        label = (f"{workload[0]}, {workload[1]} × {workload[2]} children, {workload[3]} × {workload[4]} each"
                 if len(workload) == 5 else f"{'+'.join(map(str, path_of(workload)))}, {workload[1]} × {workload[2]}")
        table.add_row(label, *(f"{s:.3f} / {g:.3f} / {s / steps[0]:.3f}" for s, g in zip(steps, gpus)))
    console.print(table)


if __name__ == "__main__":
    main()
