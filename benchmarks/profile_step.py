"""Where one decode step's GPU time goes: kernels of a graphed step grouped by name.

Builds a random bf16 model of a chosen shape directly on the GPU (no checkpoint on disk), decodes
``branches`` children of one prompt, then profiles ten replays of the last step's CUDA graph and
prints each kernel group's time per step next to the step's floor.

    python benchmarks/profile_step.py --shape llama3-8b --prompt 2048 --branches 8
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys

import torch
import transformers
from rich.console import Console
from rich.table import Table
from tokenizers import Tokenizer, models, pre_tokenizers

from thoughttree import LM, RuntimeConfig, Sampling, ThoughtTree
from thoughttree.kernels import TileConfig, WorkConfig
from thoughttree.runtime.model import Transformer
from thoughttree.runtime.model_config import ModelConfig

from tree_decode import SHAPES, copy_bandwidth, step_bytes, step_gpu_seconds
from tree_timing import changed_fields, config_label


def random_lm(shape: dict[str, int], device: str = "cuda", kv_bytes: int = 24 << 30) -> LM:
    d = shape["hidden"] // shape["heads"]
    cfg = ModelConfig.from_dict(dict(
        architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=shape["vocab"], hidden_size=shape["hidden"],
        intermediate_size=shape["intermediate"], num_hidden_layers=shape["layers"], num_attention_heads=shape["heads"],
        num_key_value_heads=shape["kv_heads"], head_dim=d, max_position_embeddings=32768, rope_theta=500000.0,
        rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
    ))
    g = torch.Generator(device=device).manual_seed(0)

    def rand(*size: int) -> torch.Tensor:
        return (torch.randn(*size, generator=g, device=device) * 0.02).to(torch.bfloat16)

    h, i, kv = shape["hidden"], shape["intermediate"], shape["kv_heads"] * d
    w = {"embed": rand(shape["vocab"], h), "lm_head": rand(shape["vocab"], h), "norm": torch.ones(h, dtype=torch.bfloat16, device=device)}
    for layer in range(shape["layers"]):
        p = f"layers.{layer}."
        w[p + "ln1"] = torch.ones(h, dtype=torch.bfloat16, device=device)
        w[p + "ln2"] = torch.ones(h, dtype=torch.bfloat16, device=device)
        w[p + "qkv"], w[p + "o"] = rand(h + 2 * kv, h), rand(h, h)
        w[p + "gate_up"], w[p + "down"] = rand(2 * i, h), rand(h, i)
    vocab = {f"t{k}": k for k in range(256)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="t1", eos_token="t2")
    return LM(Transformer(cfg, w, torch.device(device)), tokenizer, RuntimeConfig(kv_memory_bytes=kv_bytes))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", choices=sorted(SHAPES), default="llama3-8b")
    p.add_argument("--prompt", type=int, default=2048)
    p.add_argument("--branches", type=int, default=8)
    p.add_argument("--attention", default="deft")
    p.add_argument("--sweep", action="store_true", help="also time the step under other decode work sizings")
    p.add_argument("--blas", choices=("cublas", "cublaslt"), help="torch's preferred BLAS library for the projections (default: torch's)")
    p.add_argument("--few-rows", type=int, help="row cap of the few-row projection kernel (0: cuBLAS for all; default: the model's)")
    args = p.parse_args()
    if args.blas:
        torch.backends.cuda.preferred_blas_library(args.blas)
    console = Console(width=160)
    console.print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    console.print("command: python " + " ".join(shlex.quote(a) for a in sys.argv))
    shape = SHAPES[args.shape]
    lm = random_lm(shape)
    lm.engine.attention = args.attention
    if args.few_rows is not None:
        lm.model.few_rows = args.few_rows
    tree = ThoughtTree(lm, prompt=[1] + [(17 * i + 5) % shape["vocab"] for i in range(args.prompt - 1)], seed=0)
    for _ in range(2):
        tree.expand([tree.root], n=args.branches, sampling=Sampling(max_tokens=16, ignore_eos=True))
    arena = lm.engine.arena
    graph = arena.last_graph
    steps = 10
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            graph.replay()
        torch.cuda.synchronize()
    groups: dict[str, tuple[float, int]] = {}
    for e in prof.key_averages():
        t = e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
        if t <= 0:
            continue
        name = e.key[:70]
        total, count = groups.get(name, (0.0, 0))
        groups[name] = (total + t, count + e.count)
    total = sum(t for t, _ in groups.values()) / steps
    weights, kv_token = step_bytes(lm)
    floor = (weights + (args.prompt + args.branches * 17) * kv_token) / copy_bandwidth() * 1e6
    table = Table(title=f"{args.shape}, prompt {args.prompt} x {args.branches} branches, {args.attention}: "
                  f"GPU {total:.0f} µs per step, floor {floor:.0f} µs", title_justify="left")
    for col in ("kernel", "µs per step", "launches per step", "share"):
        table.add_column(col, justify="right" if col != "kernel" else "left")
    for name, (t, n) in sorted(groups.items(), key=lambda kv: -kv[1][0])[:25]:
        table.add_row(name, f"{t / steps:.0f}", f"{n / steps:.0f}", f"{t / steps / total:.1%}")
    console.print(table)
    if args.sweep:
        sweep(lm, tree, args.branches, console)


def step_us(lm: LM, tree: ThoughtTree, branches: int) -> float:
    tree.expand([tree.root], n=branches, sampling=Sampling(max_tokens=8, ignore_eos=True))
    return step_gpu_seconds(lm, replays=20) * 1e6


SWEEP = (
    WorkConfig(),
    WorkConfig(wide_tiles=(256, 8192)),
    WorkConfig(max_block_m=64),
    WorkConfig(max_block_m=16),
    WorkConfig(min_chunk=64),
    WorkConfig(max_block_m=16, min_chunk=32),
    WorkConfig(waves=2.0),
    WorkConfig(waves=4.0, min_chunk=64),
    WorkConfig(early_merge=False),
    # The 64-row class's tile (block_m, block_n, warps, stages), the other two as shipped.
    *(WorkConfig(tiles=(TileConfig(16, 32, 4, 5), TileConfig(*t), TileConfig(128, 64, 8, 5))) for t in ((64, 64, 4, 3), (64, 64, 4, 4), (64, 128, 4, 3), (64, 32, 4, 5), (64, 64, 8, 4))),
)


def sweep(lm: LM, tree: ThoughtTree, branches: int, console: Console) -> None:
    """GPU time of one graphed step under several decode work sizings (same tree, same model),
    each the engine's decode config with the sweep entry's fields."""
    table = Table(title="decode work sizing: GPU µs per step", title_justify="left")
    for col in ("work config (over the engine's decode config)", "µs per step"):
        table.add_column(col, justify="right")
    shipped = lm.engine.decode_work_config
    for cfg in SWEEP:
        lm.engine.decode_work_config = dataclasses.replace(shipped, **changed_fields(cfg))
        lm.engine.arena = None
        step_us(lm, tree, branches)
        table.add_row(config_label(cfg), f"{step_us(lm, tree, branches):.0f}")
    lm.engine.decode_work_config = shipped
    console.print(table)


if __name__ == "__main__":
    main()
