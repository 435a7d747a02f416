"""Whole searches on the GPU: where a search's time goes, against the floor of its model work.

A synthetic task on a randomly initialised Llama-family model of a chosen shape (the weights do
not change the work done): the root is ``--prompt`` random tokens; a node's children are
``--thought``-token samples of its path; values come from the model. Searches:

- ``bfs``: Tree of Thoughts' BFS (breadth 5, 5 samples per node, depth 3); every child is
  scored by 3 sampled answers of ``--answer`` tokens to a ``--suffix``-token value prompt that
  continues its path (``ValuePrompt(fork=True)``);
- ``mcts``: MCTS (24 iterations, 4 leaves per round, 3 samples per leaf, depth 4); every child
  is scored by the label probabilities after its path and the value prompt (``LabelProbs``,
  one ``lm.tree_logits`` call per round);
- ``beam``: beam search over thoughts (width 8, 4 samples per hypothesis, 4 steps), scored by
  log-probability (no evaluation calls).

    python benchmarks/search_time.py [--shape llama3-8b] [--searches bfs,mcts,beam]

Each search runs twice with the same seed (the same work): the first compiles kernels and
captures graphs (``cold s``); the second is the one timed in the other columns (its graph
captures, of buckets its first run captured before its buffers last grew, are counted). Columns: rounds;
forward steps of the expansions / the evaluations; tokens prefilled and generated; wall time,
its expansion and evaluation halves (``RoundStats``) and the rest (the strategy and the tree's
bookkeeping); the floor of the model work; wall ÷ floor; ms per forward step. Floor = the larger
of (every weight read once per forward step and each step's unique KV once, at the copy
bandwidth) and (the matmul and attention FLOPs at the bf16 matmul rate), both measured in the
same run. ``--profile`` runs each search a third time under the torch profiler and prints its
busiest host operations and GPU kernels.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
from rich.console import Console
from rich.table import Table

from thoughttree import LM, Sampling, search
from thoughttree.search.results import SearchResult
from thoughttree.strategies import BFS, MCTS, Beam
from thoughttree.tasks import LabelProbs, Task, TaskConfig, ValuePrompt

from profile_step import random_lm
from tree_decode import SHAPES, step_bytes
from tree_timing import roofs

LABELS = {"t3": 1.0, "t4": 0.5, "t5": 0.0}  # value labels: words of the benchmark model's tokenizer


@dataclass(frozen=True)
class SyntheticConfig(TaskConfig):
    prompt: int = 2048
    suffix: int = 24
    answer: int = 8
    sampling: Sampling = field(default_factory=lambda: Sampling(max_tokens=48, temperature=1.0, ignore_eos=True))
    dedupe: bool = False


class Synthetic(Task):
    """Random-token prompt and value prompts: the model work of a search, not its content."""

    def __init__(self, config: SyntheticConfig, evaluator: str) -> None:
        self.config, self.kind = config, evaluator
        self.suffix = [6 + i % 4 for i in range(config.suffix)]
        self.suffix_text = " ".join(f"t{t}" for t in self.suffix)  # one token per word

    def prompt(self, problem: Any) -> Sequence[int]:
        return [1] + [(17 * i + 5 + problem) % 256 for i in range(self.config.prompt - 1)]

    def evaluator(self) -> Any:
        if self.kind == "value":
            answers = Sampling(max_tokens=self.config.answer, temperature=1.0, ignore_eos=True)
            return ValuePrompt(prompt=lambda problem, node: self.suffix_text, labels=LABELS, samples=3,
                               sampling=answers, fork=True)
        return LabelProbs(prompt=lambda problem, node: node.path_tokens() + self.suffix, labels=LABELS)


SEARCHES = {
    "bfs": (lambda: BFS(breadth=5, samples=5, depth=3), "value"),
    "mcts": (lambda: MCTS(iterations=24, leaves_per_round=4, samples=3, max_depth=4), "label_probs"),
    "beam": (lambda: Beam(width=8, samples=4, max_steps=4), "value"),
}


TINY = dict(layers=2, hidden=128, heads=4, kv_heads=2, intermediate=256, vocab=512)  # a quick check on the CPU


def floor_seconds(result: SearchResult, lm: LM, shape: dict[str, int], copy: float, matmul: float) -> float:
    """The larger of the model work's bytes at the copy bandwidth and its FLOPs at the matmul rate."""
    s = result.statistics
    d = shape["hidden"] // shape["heads"]
    w = lm.model.w
    layer_params = sum(t.numel() for k, t in w.items() if t.dim() == 2 and k.startswith("layers."))
    head_params = w["lm_head"].numel() if "lm_head" in w else w["embed"].numel()
    weight_bytes, kv_token_bytes = step_bytes(lm)
    byte_time = (s.forward_steps * weight_bytes + s.unique_tokens * kv_token_bytes) / copy
    flops = (2 * layer_params * (s.prefill_tokens + s.generated_tokens) + 2 * head_params * s.generated_tokens
             + 4 * shape["layers"] * shape["heads"] * d * s.attended_tokens)
    return max(byte_time, flops / matmul)


def run(lm: LM, name: str, cfg: SyntheticConfig) -> SearchResult:
    make, evaluator = SEARCHES[name]
    task = Synthetic(cfg, evaluator)
    assert lm.encode(task.suffix_text, add_bos=False) == task.suffix, "the value prompt's words must be single tokens"
    result = search(task, make(), lm, problem=0, seed=0)
    result.tree.release_kv()
    return result


def profile(lm: LM, name: str, cfg: SyntheticConfig, console: Console) -> None:
    cuda = lm.device.type == "cuda"
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    with torch.profiler.profile(activities=activities) as prof:
        run(lm, name, cfg)
        if cuda:
            torch.cuda.synchronize()
    events = prof.key_averages()
    console.print(f"[bold]{name}[/]: busiest host operations (self CPU time)")
    console.print(events.table(sort_by="self_cpu_time_total", row_limit=20, max_name_column_width=60))
    if cuda:
        console.print(f"[bold]{name}[/]: busiest GPU kernels")
        sort = "self_device_time_total" if hasattr(events[0], "self_device_time_total") else "self_cuda_time_total"
        console.print(events.table(sort_by=sort, row_limit=15, max_name_column_width=60))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", choices=sorted(SHAPES | {"tiny": TINY}),
                   help="the model's shape (default: llama3-8b on cuda, tiny on cpu)")
    for dim in SHAPES["default"]:
        p.add_argument(f"--{dim.replace('_', '-')}", type=int, help="override one dimension of --shape")
    p.add_argument("--searches", default="bfs,mcts,beam", help="comma-separated: " + ", ".join(SEARCHES))
    p.add_argument("--prompt", type=int, default=2048, help="tokens of the root prompt")
    p.add_argument("--thought", type=int, default=48, help="tokens of each sampled thought")
    p.add_argument("--suffix", type=int, default=24, help="tokens of the value prompt")
    p.add_argument("--answer", type=int, default=8, help="tokens of each sampled value answer (bfs)")
    p.add_argument("--device", default="cuda", help="cpu runs a quick check (tiny shape by default, no floor)")
    p.add_argument("--profile", action="store_true", help="print where each search's host and GPU time goes")
    p.add_argument("--few-rows", type=int, help="row cap of the few-row projection kernel (0: cuBLAS for all; default: the model's)")
    args = p.parse_args()
    names = [n for n in args.searches.split(",") if n]
    for n in names:
        if n not in SEARCHES:
            p.error(f"unknown search {n!r}; choose from {', '.join(SEARCHES)}")
    console = Console(width=200)
    cuda = args.device == "cuda"
    console.print(f"device: {torch.cuda.get_device_name() if cuda else 'cpu'}, torch {torch.__version__}")
    console.print("command: python " + " ".join(shlex.quote(a) for a in sys.argv))
    args.shape = args.shape or ("llama3-8b" if cuda else "tiny")
    shape = {k: getattr(args, k) or v for k, v in (SHAPES | {"tiny": TINY})[args.shape].items()}
    measured = roofs(torch.device(args.device))
    if measured:
        console.print(f"copy bandwidth {measured[0] / 1e12:.2f} TB/s, bf16 matmul {measured[1] / 1e12:.0f} TFLOP/s")
    lm = random_lm(shape, args.device, kv_bytes=(24 << 30) if cuda else (256 << 20))
    if args.few_rows is not None:
        lm.model.few_rows = args.few_rows
    thought = Sampling(max_tokens=args.thought, temperature=1.0, ignore_eos=True)
    cfg = SyntheticConfig(prompt=args.prompt, suffix=args.suffix, answer=args.answer, sampling=thought)
    dims = ", ".join(f"{k} {v}" for k, v in shape.items())
    table = Table(title=f"whole searches, Llama shape {args.shape} ({dims}), random weights: prompt {args.prompt}, "
                  f"thoughts of {args.thought} tokens, value prompt {args.suffix} tokens", title_justify="left")
    for col in ("search", "rounds", "forward steps (expand / evaluate)", "prefill tokens", "generated tokens", "cold s",
                "wall s", "expand s", "evaluate s", "rest s", "captures", "floor s", "wall / floor", "ms / forward"):
        table.add_column(col, justify="right")
    for name in names:
        t0 = time.perf_counter()
        run(lm, name, cfg)
        cold = time.perf_counter() - t0
        captured = lm.stats.graph_captures
        result = run(lm, name, cfg)
        captured = lm.stats.graph_captures - captured
        s = result.statistics
        expand = sum(r.expand_seconds for r in s.per_round)
        evaluate = sum(r.evaluate_seconds for r in s.per_round)
        steps = (sum(r.expand.forward_steps for r in s.per_round), sum(r.evaluate.forward_steps for r in s.per_round))
        floor = floor_seconds(result, lm, shape, *measured) if measured else float("nan")
        table.add_row(name, str(s.rounds), f"{steps[0]} / {steps[1]}", f"{s.prefill_tokens:,}", f"{s.generated_tokens:,}",
                      f"{cold:.2f}", f"{s.wall_time:.2f}", f"{expand:.2f}", f"{evaluate:.2f}",
                      f"{s.wall_time - expand - evaluate:.2f}", str(captured), f"{floor:.2f}", f"{s.wall_time / floor:.2f}×",
                      f"{1000 * s.wall_time / s.forward_steps:.2f}")
        if args.profile:
            profile(lm, name, cfg, console)
    console.print(table)
    lm.check_integrity()


if __name__ == "__main__":
    main()
