"""Tree decoding with the model split over the GPUs of one host, against one GPU and the floor.

Run by ``benchmarks/tree_decode.py --tensor-parallel N`` under ``torchrun --nproc-per-node N``.
For each workload (one prompt, ``branches`` children decoded together) it reports the decode
step time with N-way tensor parallelism, the step time of the whole model on one GPU (rank 0
alone, the others idle), and the floor of a tensor-parallel step: the bytes one GPU must read per
step (its weight shard, and its KV heads of the prompt read once plus every branch's own tokens)
at the measured copy bandwidth, plus the measured time of the step's collectives (two
all-reduces of [branches, hidden] per layer and one gather of the vocabulary-sliced logits).
"""

from __future__ import annotations

import argparse
import gc
import os
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist
from rich.console import Console
from rich.table import Table

from thoughttree import LM, RuntimeConfig, Sampling, ThoughtTree
from thoughttree.runtime.parallel import init_distributed, local_device

from tree_decode import step_bytes

Build = Callable[[Path, argparse.Namespace], None]


def _sync() -> float:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter()


def decode_step_ms(lm: LM, prompt: list[int], branches: int, tokens: int) -> float:
    """Milliseconds per decode step of ``branches`` children (after a warm-up run of the same shape)."""
    sampling = Sampling(max_tokens=tokens, temperature=1.0, ignore_eos=True)
    best = float("inf")
    for _ in range(2):
        tree = ThoughtTree(lm, prompt=prompt, seed=0)
        tree.materialize()
        t0 = _sync()
        tree.expand([tree.root], n=branches, sampling=sampling)
        best = min(best, (_sync() - t0) / tokens)
        tree.prune(tree.root)
    return 1000 * best


def copy_bandwidth(device: torch.device, nbytes: int) -> float:
    """Bytes per second of a device-to-device copy (read plus write counted)."""
    src = torch.empty(nbytes // 2, dtype=torch.bfloat16, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    t0 = _sync()
    for _ in range(10):
        dst.copy_(src)
    return 2 * nbytes * 10 / (_sync() - t0)


def collectives_ms(lm: LM, branches: int, repeats: int = 50) -> float:
    """One decode step's collectives: 2 all-reduces per layer and the logits gather, in milliseconds."""
    model = lm.model
    x = torch.randn(branches, model.cfg.hidden_size, device=lm.device, dtype=model.dtype)
    logits = torch.randn(branches, model.w["lm_head"].shape[0], device=lm.device, dtype=model.dtype)
    for _ in range(3):
        model.reduce(x), model.gather(logits)
    t0 = _sync()
    for _ in range(repeats):
        for _ in range(2 * model.cfg.num_layers):
            model.reduce(x)
        model.gather(logits)
    return 1000 * (_sync() - t0) / repeats


def bytes_per_step(lm: LM, prompt: int, branches: int, tokens: int) -> int:
    """Weights this rank reads per decode step (all but the embedding) and its KV read at mid-decode."""
    weights, per_token = step_bytes(lm)
    return weights + per_token * (prompt + branches * tokens // 2)


def run(args: argparse.Namespace, workloads: tuple[tuple[int, int, int], ...], build: Build) -> None:
    size = args.tensor_parallel
    device = local_device(torch.device("cuda" if torch.cuda.is_available() else "cpu"))
    init_distributed(device)
    rank = dist.get_rank()
    gpu = device.type == "cuda"  # the CPU (Gloo) path is for trying the script on tiny shapes
    runtime = RuntimeConfig(kv_memory_bytes=(16 << 30) if gpu else (128 << 20))
    with tempfile.TemporaryDirectory(dir=os.environ.get("TP_BENCH_DIR")) as tmp:
        path = [tmp]
        dist.broadcast_object_list(path, src=0)  # one host: rank 0 writes the checkpoint for all
        if rank == 0:
            build(Path(path[0]), args)
        dist.barrier()
        lm = LM.from_pretrained(path[0], device=device, dtype="bfloat16", runtime=runtime, tensor_parallel=size)
        single = LM.from_pretrained(path[0], device=device, dtype="bfloat16", runtime=runtime) if rank == 0 else None
        dist.barrier()
    bandwidth = copy_bandwidth(device, (2 << 30) if gpu else (64 << 20))
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    table = Table(title=f"tree decoding, tensor parallel over {size} × {name}, "
                  f"L={args.layers} hidden={args.hidden} heads={args.heads}/{args.kv_heads}, bf16, "
                  f"copy bandwidth {bandwidth / 1e9:,.0f} GB/s per GPU", title_justify="left")
    for col in ("prompt", "branches×tokens", "1 GPU ms/step", f"TP{size} ms/step", "speed-up",
                "floor ms/step", "of which collectives", "TP / floor"):
        table.add_column(col, justify="right")
    for prompt_len, branches, tokens in workloads:
        prompt = [1] + [(17 * i + 5) % args.vocab for i in range(prompt_len - 1)]
        tp_ms = decode_step_ms(lm, prompt, branches, tokens)
        comm = collectives_ms(lm, branches)
        floor = 1000 * bytes_per_step(lm, prompt_len, branches, tokens) / bandwidth + comm
        one = decode_step_ms(single, prompt, branches, tokens) if single is not None else 0.0
        dist.barrier()  # the others wait while rank 0 runs the whole model alone
        if rank == 0:
            table.add_row(str(prompt_len), f"{branches}×{tokens}", f"{one:.2f}", f"{tp_ms:.2f}",
                          f"{one / tp_ms:.2f}×", f"{floor:.2f}", f"{comm:.2f}", f"{tp_ms / floor:.2f}×")
    if rank == 0:
        Console(width=180).print(table)
    # The decode graphs hold captured NCCL calls: free them on every rank before the group goes.
    del lm, single
    gc.collect()
    if gpu:
        torch.cuda.synchronize()
    dist.barrier()
    dist.destroy_process_group()
