"""Train the bundled Game of 24 model (a small Llama) from the solver-generated examples.

    PYTHONPATH=. python training/game24/train.py --out thoughttree/models/game24 --steps 5000

The model directory gets ``training.json`` (the held-out split: its description and the indices
of the validation and test puzzles; the training data's SHA-256, seed, steps, device), which
the benchmark table and the ``game24`` summary read to label their results.

``--time-budget-s`` instead of ``--steps`` times steps 150-200 (after every batch width has
been seen once, so the first calls of each shape do not distort the estimate) and then fixes
the step count that fits the budget (printed as ``steps chosen: N``); the learning-rate
schedule up to that point is the warm-up, which does not depend on N, so ``--steps N``
reproduces such a run.
The loss is taken on completion tokens (and the end-of-sequence token) only.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

sys.path.insert(0, str(Path(__file__).resolve().parent))
from game24_tokenizer import build_tokenizer, save_tokenizer  # noqa: E402

from thoughttree.tasks.game24.dataset import DataConfig, Example, data_sha256, generate_examples  # noqa: E402
from thoughttree.tasks.game24.split import RANGES, SPLIT_DESCRIPTION  # noqa: E402

MAX_POSITIONS = 256  # the context of the trained model and of its tokenizer
IGNORE = -100
KIND_IDS = {"propose": 0, "value": 1, "io": 2, "cot": 3}
CALIBRATE = (150, 200)  # steps between which --time-budget-s measures the step time


# (layers, width, MLP width, query heads, key/value heads) of each model the recipe trains.
SIZES = {
    "model": (8, 256, 768, 4, 2),  # the bundled model: ~6.3M parameters
    "draft": (2, 128, 384, 2, 1),  # its draft model for speculative decoding: ~0.42M parameters
}


def model_config(tokenizer: PreTrainedTokenizerFast, max_positions: int, size: str = "model") -> LlamaConfig:
    """A Llama of ``SIZES[size]`` with heads of 64 and this tokenizer."""
    layers, width, mlp, heads, kv_heads = SIZES[size]
    return LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=width, intermediate_size=mlp, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=64,
        max_position_embeddings=max_positions, rope_theta=10000.0, rms_norm_eps=1e-5,
        tie_word_embeddings=False, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)


def encode(tokenizer: PreTrainedTokenizerFast, examples: list[Example],
           max_len: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Token ids ``[N, L]`` (right-padded), per-position targets ``[N, L]`` (IGNORE except on
    completion + eos, already shifted: target[t] is the token after position t), lengths ``[N]``."""
    prompts = tokenizer([e.prompt for e in examples], add_special_tokens=True)["input_ids"]
    completions = tokenizer([e.completion for e in examples], add_special_tokens=False)["input_ids"]
    ids = np.full((len(examples), max_len), tokenizer.pad_token_id, dtype=np.int64)
    targets = np.full((len(examples), max_len), IGNORE, dtype=np.int64)
    lengths = np.empty(len(examples), dtype=np.int64)
    for row, (p, c) in enumerate(zip(prompts, completions)):
        seq = p + c + [tokenizer.eos_token_id]
        if len(seq) > max_len:
            raise ValueError(f"example {row} has {len(seq)} tokens, more than --max-len {max_len}")
        ids[row, :len(seq)] = seq
        targets[row, len(p) - 1:len(seq) - 1] = seq[len(p):]
        lengths[row] = len(seq)
    return torch.from_numpy(ids), torch.from_numpy(targets), torch.from_numpy(lengths)


def epoch_batches(lengths: torch.Tensor, batch_size: int, generator: torch.Generator) -> list[torch.Tensor]:
    """Shuffled batches of similar length (sorted within chunks of 32 batches) to cut padding."""
    order = torch.randperm(len(lengths), generator=generator)
    chunk = batch_size * 32
    batches = []
    for start in range(0, len(order), chunk):
        part = order[start:start + chunk]
        part = part[torch.argsort(lengths[part], stable=True)]
        batches += [part[i:i + batch_size] for i in range(0, len(part) - batch_size + 1, batch_size)]
    return [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]


def learning_rate(step: int, steps: int, peak: float, warmup: int) -> float:
    """Linear warm-up, then cosine decay to a tenth of the peak."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, steps - warmup))
    return peak * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress)))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="model directory to write")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--size", choices=sorted(SIZES), default="model",
                        help="model: the bundled model; draft: its small draft model (same tokenizer and data)")
    parser.add_argument("--steps", type=int, default=None, help="optimizer steps (or --time-budget-s)")
    parser.add_argument("--time-budget-s", type=float, default=None,
                        help="choose --steps so that training takes about this long")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--lr", type=float, default=1.5e-3)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--max-len", type=int, default=192)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--log-every", type=int, default=100)
    parser.add_argument("--summary", type=Path, default=None, help="write a JSON training summary here")
    args = parser.parse_args(argv)
    if (args.steps is None) == (args.time_budget_s is None):
        parser.error("give exactly one of --steps and --time-budget-s")
    if args.time_budget_s is not None and args.warmup < CALIBRATE[1]:
        parser.error(f"--time-budget-s fixes the step count at step {CALIBRATE[1]}, "
                     f"so --warmup must be >= {CALIBRATE[1]}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    started = time.time()
    examples = generate_examples(DataConfig(seed=args.seed))
    counts = Counter(e.kind for e in examples)
    sha = data_sha256(examples)
    print(f"data: {len(examples)} examples {dict(counts)} in {time.time() - started:.1f}s", flush=True)
    print(f"data sha256: {sha}", flush=True)

    tokenizer = build_tokenizer(model_max_length=MAX_POSITIONS)  # the model's context, not the training length
    ids, targets, lengths = encode(tokenizer, examples, args.max_len)
    kinds = torch.tensor([KIND_IDS[e.kind] for e in examples])
    ids, targets, kinds = ids.to(device), targets.to(device), kinds.to(device)
    print(f"tokens: {int(lengths.sum())} (longest {int(lengths.max())})", flush=True)

    config = model_config(tokenizer, max_positions=MAX_POSITIONS, size=args.size)
    model = LlamaForCausalLM(config).to(device)
    params = sum(p.numel() for p in model.parameters())
    print(f"model: {params} parameters", flush=True)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "embed" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "embed" not in n)]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=args.lr, betas=(0.9, 0.95), fused=device.type == "cuda")
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")
    generator = torch.Generator().manual_seed(args.seed)
    steps = args.steps if args.steps is not None else 10**9
    batches: list[torch.Tensor] = []
    step, epoch, train_started, tick = 0, 0, time.time(), None
    sums, seen = torch.zeros(4, device=device), torch.zeros(4, device=device)
    log: list[dict[str, float]] = []
    model.train()
    while step < steps:
        if not batches:
            batches, epoch = epoch_batches(lengths, args.batch_size, generator), epoch + 1
        index = batches.pop()
        width = int(lengths[index].max())
        index = index.to(device)
        x, y, k = ids[index, :width], targets[index, :width], kinds[index]
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, steps, args.lr, args.warmup)
        with autocast:
            logits = model(input_ids=x).logits
        token_loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), ignore_index=IGNORE,
                                     reduction="none").view_as(y)
        mask = (y != IGNORE).float()
        loss = (token_loss * mask).sum() / mask.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        per_example = (token_loss * mask).sum(1) / mask.sum(1)
        sums.index_add_(0, k, per_example.detach())
        seen.index_add_(0, k, torch.ones_like(per_example))
        step += 1
        if args.time_budget_s is not None and step in CALIBRATE:
            if device.type == "cuda":
                torch.cuda.synchronize()
            if step == CALIBRATE[0]:
                tick = time.time()
            else:
                per_step = (time.time() - tick) / (CALIBRATE[1] - CALIBRATE[0])
                elapsed = time.time() - train_started
                steps = max(step + 100, int((args.time_budget_s - elapsed) / per_step + step) // 100 * 100)
                print(f"steps chosen: {steps} ({per_step * 1000:.1f} ms/step)", flush=True)
        if step % args.log_every == 0 or step == steps:
            means, counted = (sums / seen.clamp(min=1)).tolist(), seen.tolist()
            entry = {"step": step, "epoch": epoch, "lr": learning_rate(step - 1, steps, args.lr, args.warmup),
                     "seconds": round(time.time() - train_started, 1),
                     **{f"loss_{kind}": round(means[i], 4) for kind, i in KIND_IDS.items() if counted[i]}}
            log.append(entry)
            print(json.dumps(entry), flush=True)
            sums.zero_()
            seen.zero_()
    train_seconds = time.time() - train_started
    print(f"trained {steps} steps in {train_seconds:.1f}s on {device}"
          f" ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'})", flush=True)

    args.out.mkdir(parents=True, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(args.out)
    save_tokenizer(tokenizer, args.out)
    held_out = {r.name: list(r.indices) for r in RANGES.values()}
    summary = {"split": SPLIT_DESCRIPTION, "held_out": held_out, "data_sha256": sha, "size": args.size,
               "seed": args.seed, "steps": steps,
               "batch_size": args.batch_size, "lr": args.lr,
               "warmup": args.warmup, "weight_decay": args.weight_decay, "parameters": params,
               "examples": dict(counts), "epochs": epoch, "train_seconds": round(train_seconds, 1),
               "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
               "torch": torch.__version__, "log": log}
    print("summary: " + json.dumps(summary), flush=True)
    if args.summary is not None:
        args.summary.write_text(json.dumps(summary, indent=2) + "\n")
    keys = ("split", "held_out", "data_sha256", "size", "seed", "steps", "device", "train_seconds")
    training = {key: summary[key] for key in keys}
    (args.out / "training.json").write_text(json.dumps(training, indent=2) + "\n")


if __name__ == "__main__":
    main()
