"""End-to-end tree decoding on the GPU: thoughttree against per-sequence decoding and transformers.

One prompt, ``branches`` children sampled together for ``tokens`` tokens each, on a randomly
initialised Llama-family model of a chosen shape (weights do not change the work done). Backends:

- thoughttree with DeFT tree attention (the shared prompt's KV read once per step), decode steps
  replayed as CUDA graphs, and the same with eager steps (``cuda_graphs=False``);
- thoughttree with per-sequence split-KV attention (same runtime and graphs, no sharing in
  attention), prefilled with DeFT like the first so that only decoding differs;
- transformers ``generate`` on the prompt repeated ``branches`` times (batched, its own KV cache).

    python benchmarks/tree_decode.py [--shape llama3-8b | --layers 16 --hidden 2048 ...]
    torchrun --nproc-per-node 2 benchmarks/tree_decode.py --tensor-parallel 2 --shape llama3-8b

Prints a table per workload: prefill and decode seconds, ms per step, the floor per step and
step / floor, with the floor defined once for every benchmark (:mod:`floor`): the larger of the
byte floor (weights plus each unique KV token read once, at the copy bandwidth) and the FLOP
floor (the step's matmul and attention FLOPs at the bf16 matmul rate), both rates measured in the
same run; which of the two bounds the row and both floors, the GPU time of one step (a replay of
its graph timed with CUDA events) and the host time per step (step minus GPU time), decode
tokens/s and speed-ups against transformers.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

import torch
import transformers
from rich.console import Console
from rich.table import Table
from tokenizers import Tokenizer, models, pre_tokenizers

from thoughttree import LM, RuntimeConfig, Sampling, ThoughtTree

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from floor import measure_roofs  # noqa: E402

SHAPES = {
    "default": dict(layers=16, hidden=2048, heads=32, kv_heads=8, intermediate=8192, vocab=32000),
    "llama3-8b": dict(layers=32, hidden=4096, heads=32, kv_heads=8, intermediate=14336, vocab=128256),
}
WORKLOADS = ((2048, 8, 64), (4096, 32, 128), (4096, 64, 64), (16384, 16, 64), (16384, 64, 64), (16384, 256, 32))


def build_model(dir: Path, args: argparse.Namespace) -> None:
    cfg = transformers.LlamaConfig(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
        max_position_embeddings=32768, rope_theta=500000.0, bos_token_id=1, eos_token_id=2,
    )
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(dir)
    del model
    torch.cuda.empty_cache()
    vocab = {f"t{i}": i for i in range(256)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="t1", eos_token="t2").save_pretrained(dir)


def step_bytes(lm: LM) -> tuple[int, int]:
    """(bytes of the weights a decode step reads: all but the embedding, of which it reads only
    its tokens' rows; bytes of one token's KV over all layers), of this process's shard."""
    w, cfg = lm.model.w, lm.model.cfg
    weights = sum(t.numel() * t.element_size() for k, t in w.items() if k != "embed")
    return weights, 2 * cfg.num_layers * lm.model.num_kv_heads * cfg.head_dim * w["embed"].element_size()


def sync_time() -> float:
    torch.cuda.synchronize()
    return time.perf_counter()


def copy_bandwidth() -> float:
    """Bytes per second of a device-to-device copy (read + write): the copy roof of :mod:`floor`."""
    rates = measure_roofs(torch.device("cuda"))
    assert rates is not None
    return rates.copy_bytes_per_s


def step_gpu_seconds(lm: LM, replays: int = 10) -> float:
    """GPU time of one decode step: the last step's graph replayed back to back under CUDA events."""
    arena = lm.engine.arena
    if arena is None or arena.last_graph is None:
        return float("nan")
    graph = arena.last_graph  # not the largest bucket's: rows past the last step's are stale there
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    graph.replay()
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / replays / 1000


def ours(lm: LM, backend: str, graphs: bool, prompt: list[int], branches: int, tokens: int) -> tuple[float, float, float]:
    """Prefill with DeFT (causal tree attention), then decode with ``backend``: (prefill, decode, GPU per step)."""
    sampling = Sampling(max_tokens=tokens, temperature=1.0, ignore_eos=True)
    tree = ThoughtTree(lm, prompt=prompt, seed=0)
    lm.engine.attention = "deft"
    if lm.engine.runtime.cuda_graphs != graphs:
        lm.engine.runtime = dataclasses.replace(lm.engine.runtime, cuda_graphs=graphs)
        lm.engine.arena = None
    t0 = sync_time()
    tree.materialize()
    t1 = sync_time()
    lm.engine.attention = backend
    tree.expand([tree.root], n=branches, sampling=sampling)
    t2 = sync_time()
    gpu = step_gpu_seconds(lm) if graphs else float("nan")
    tree.prune(tree.root)
    return t1 - t0, t2 - t1, gpu


def hf(model, prompt: list[int], branches: int, tokens: int) -> tuple[float, float, float]:
    ids = torch.tensor([prompt] * branches, device="cuda")
    kw = dict(do_sample=True, pad_token_id=0, eos_token_id=None, attention_mask=torch.ones_like(ids))
    t0 = sync_time()
    model.generate(ids, max_new_tokens=1, min_new_tokens=1, **kw)
    t1 = sync_time()
    model.generate(ids, max_new_tokens=tokens, min_new_tokens=tokens, **kw)
    t2 = sync_time()
    return t1 - t0, (t2 - t1) - (t1 - t0), float("nan")  # decode = full run minus its prefill


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", choices=sorted(SHAPES), default="default")
    for name in ("layers", "hidden", "heads", "kv-heads", "intermediate", "vocab"):
        p.add_argument(f"--{name}", type=int, help="override one dimension of --shape")
    p.add_argument("--workloads", default="", help="prompt:branches:tokens,... (default: the six standard rows)")
    p.add_argument("--no-transformers", action="store_true", help="skip transformers generate")
    p.add_argument("--tensor-parallel", type=int, default=1, metavar="N",
                   help="split the model over N GPUs (run under torchrun --nproc-per-node N); "
                        "reports step time against one GPU and the floor (see tree_decode_tp.py)")
    args = p.parse_args()
    for key, value in SHAPES[args.shape].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    workloads = [tuple(int(x) for x in w.split(":")) for w in args.workloads.split(",")] if args.workloads else WORKLOADS
    if args.tensor_parallel > 1:
        from tree_decode_tp import run

        return run(args, workloads, build_model)
    console = Console(width=200)
    console.print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, transformers {transformers.__version__}")
    console.print("command: python " + " ".join(shlex.quote(a) for a in sys.argv))
    rates = measure_roofs(torch.device("cuda"))
    assert rates is not None
    console.print(rates.describe())
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(dir=shm) as tmp:
        build_model(Path(tmp), args)
        lm = LM.from_pretrained(tmp, device="cuda", dtype="bfloat16", runtime=RuntimeConfig(kv_memory_bytes=24 << 30))
        model = None
        if not args.no_transformers:
            model = transformers.AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.bfloat16).cuda().eval()
    # Every weight is read once per step; of the embedding only the rows of the step's tokens.
    weight_bytes, kv_token_bytes = step_bytes(lm)
    matmul_params = sum(t.numel() for k, t in lm.model.w.items() if t.dim() == 2 and k != "embed")
    table = Table(title=f"tree decoding, Llama shape {args.shape}: L={args.layers} hidden={args.hidden} "
                  f"heads={args.heads}/{args.kv_heads} inter={args.intermediate} vocab={args.vocab}, bf16, random weights",
                  title_justify="left")
    for col in ("prompt", "branches×tokens", "backend", "prefill s", "decode s", "ms/step", "floor ms", "step/floor",
                "bound by", "byte floor ms", "FLOP floor ms", "GPU ms/step", "host ms/step", "decode tok/s",
                "vs transformers"):
        table.add_column(col, justify="right")
    backends = (("thoughttree deft", "deft", True), ("thoughttree deft, eager steps", "deft", False),
                ("thoughttree per_sequence", "per_sequence", True))
    for prompt_len, branches, tokens in workloads:
        prompt = [1] + [(17 * i + 5) % args.vocab for i in range(prompt_len - 1)]
        unique = prompt_len + branches * (tokens + 1) / 2  # mean unique KV tokens per step
        nbytes = weight_bytes + unique * kv_token_bytes
        seen = prompt_len + (tokens + 1) / 2  # mean keys a query attends to per step
        flops = branches * (2 * matmul_params + 4 * args.layers * args.heads * (args.hidden // args.heads) * seen)
        floor = rates.floor_s(nbytes, flops)
        rows = {}
        for name, backend, graphs in backends:
            ours(lm, backend, graphs, prompt, branches, tokens)  # compiles kernels, captures graphs
            rows[name] = ours(lm, backend, graphs, prompt, branches, tokens)
        rows["transformers generate"] = (float("nan"),) * 3
        if model is not None:
            try:
                hf(model, prompt[:256], 2, 2)
                rows["transformers generate"] = hf(model, prompt, branches, tokens)
            except torch.OutOfMemoryError:
                torch.cuda.empty_cache()
        base = rows["transformers generate"][1]
        for name, (pre, dec, gpu) in rows.items():
            if dec != dec:
                note = "out of memory" if model else "not run"
                table.add_row(str(prompt_len), f"{branches}×{tokens}", name, note, *[""] * 11)
                continue
            step = dec / tokens
            host = f"{1000 * (step - gpu):.2f}" if gpu == gpu else "–"
            table.add_row(
                str(prompt_len), f"{branches}×{tokens}", name, f"{pre:.3f}", f"{dec:.3f}", f"{1000 * step:.2f}",
                f"{1000 * floor:.2f}", f"{step / floor:.2f}×", rates.bound(nbytes, flops),
                f"{1000 * rates.byte_floor_s(nbytes):.2f}", f"{1000 * rates.flop_floor_s(flops):.2f}",
                f"{1000 * gpu:.2f}" if gpu == gpu else "–", host,
                f"{branches * tokens / dec:,.0f}", f"{base / dec:.2f}×" if base == base else "–",
            )
        table.add_section()
    console.print(table)
    console.print(f"graphs held: {lm.stats.graphs}, their memory with the step buffers: {lm.stats.graph_bytes / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
