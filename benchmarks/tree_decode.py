"""End-to-end tree decoding on the GPU: thoughttree against per-sequence decoding and transformers.

One prompt, ``branches`` children sampled together for ``tokens`` tokens each, on a randomly
initialised Llama-family model of a chosen shape (weights do not change the work done). Backends:

- thoughttree with DeFT tree attention (the shared prompt's KV read once per step),
- thoughttree with per-sequence split-KV attention (same runtime, no sharing in attention),
  prefilled with DeFT like the first so that only decoding differs,
- transformers ``generate`` on the prompt repeated ``branches`` times (batched, its own KV cache).

    python benchmarks/tree_decode.py [--layers 16 --hidden 2048 --heads 32 --kv-heads 8]
    torchrun --nproc-per-node 2 benchmarks/tree_decode.py --tensor-parallel 2 [shape options]

Prints a table: prefill and decode seconds, decode tokens/s, and speed-ups against transformers.
"""

from __future__ import annotations

import argparse
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

WORKLOADS = ((2048, 16, 64), (8192, 64, 64), (16384, 64, 64), (16384, 256, 32))


def build_model(dir: Path, args: argparse.Namespace) -> None:
    cfg = transformers.LlamaConfig(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.hidden * 4,
        num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
        max_position_embeddings=32768, rope_theta=500000.0, bos_token_id=1, eos_token_id=2,
    )
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(dir)
    vocab = {f"t{i}": i for i in range(256)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="t1", eos_token="t2").save_pretrained(dir)


def sync_time() -> float:
    torch.cuda.synchronize()
    return time.perf_counter()


def ours(lm: LM, backend: str, prompt: list[int], branches: int, tokens: int) -> tuple[float, float]:
    """Prefill with DeFT (causal tree attention), then decode with ``backend``."""
    sampling = Sampling(max_tokens=tokens, temperature=1.0, ignore_eos=True)
    tree = ThoughtTree(lm, prompt=prompt, seed=0)
    lm.engine.attention = "deft"
    t0 = sync_time()
    tree.materialize()
    t1 = sync_time()
    lm.engine.attention = backend
    tree.expand([tree.root], n=branches, sampling=sampling)
    t2 = sync_time()
    tree.prune(tree.root)
    return t1 - t0, t2 - t1


def hf(model, prompt: list[int], branches: int, tokens: int) -> tuple[float, float]:
    ids = torch.tensor([prompt] * branches, device="cuda")
    kw = dict(do_sample=True, pad_token_id=0, eos_token_id=None, attention_mask=torch.ones_like(ids))
    t0 = sync_time()
    model.generate(ids, max_new_tokens=1, min_new_tokens=1, **kw)
    t1 = sync_time()
    model.generate(ids, max_new_tokens=tokens, min_new_tokens=tokens, **kw)
    t2 = sync_time()
    return t1 - t0, (t2 - t1) - (t1 - t0)  # decode = full run minus its prefill


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--tensor-parallel", type=int, default=1, metavar="N",
                   help="split the model over N GPUs (run under torchrun --nproc-per-node N); "
                        "reports step time against one GPU and the floor (see tree_decode_tp.py)")
    args = p.parse_args()
    if args.tensor_parallel > 1:
        from tree_decode_tp import run

        return run(args, WORKLOADS, build_model)
    console = Console(width=160)
    dev = torch.cuda.get_device_name()
    console.print(f"device: {dev}, torch {torch.__version__}, transformers {transformers.__version__}")
    console.print("command: python " + " ".join(shlex.quote(a) for a in sys.argv))
    with tempfile.TemporaryDirectory() as tmp:
        build_model(Path(tmp), args)
        lm = LM.from_pretrained(tmp, device="cuda", dtype="bfloat16", runtime=RuntimeConfig(kv_memory_bytes=16 << 30))
        model = transformers.AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.bfloat16).cuda().eval()
    table = Table(title=f"tree decoding, Llama shape L={args.layers} hidden={args.hidden} "
                  f"heads={args.heads}/{args.kv_heads}, bf16, random weights", title_justify="left")
    for col in ("prompt", "branches×tokens", "backend", "prefill s", "decode s", "ms/step", "decode tok/s",
                "vs transformers"):
        table.add_column(col, justify="right")
    for prompt_len, branches, tokens in WORKLOADS:
        prompt = [1] + [(17 * i + 5) % args.vocab for i in range(prompt_len - 1)]
        rows = {}
        for name in ("deft", "per_sequence"):
            ours(lm, name, prompt, branches, tokens)  # compiles the kernels' tile classes of this shape
            rows[f"thoughttree {name}"] = ours(lm, name, prompt, branches, tokens)
        try:
            hf(model, prompt[:256], 2, 2)
            rows["transformers generate"] = hf(model, prompt, branches, tokens)
        except torch.OutOfMemoryError:
            torch.cuda.empty_cache()
            rows["transformers generate"] = (float("nan"), float("nan"))
        base = rows["transformers generate"][1]
        for name, (pre, dec) in rows.items():
            if dec != dec:  # NaN: transformers ran out of memory
                table.add_row(str(prompt_len), f"{branches}×{tokens}", name, "out of memory", "", "", "", "")
                continue
            speedup = f"{base / dec:.2f}×" if base == base else "–"
            table.add_row(str(prompt_len), f"{branches}×{tokens}", name, f"{pre:.3f}", f"{dec:.3f}",
                          f"{1000 * dec / tokens:.1f}", f"{branches * tokens / dec:,.0f}", speedup)
        table.add_section()
    console.print(table)


if __name__ == "__main__":
    main()
