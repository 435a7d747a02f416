"""``thoughttree bench``: time batched tree decoding, one prompt and many branches, on any model.

The command-line counterpart of ``benchmarks/tree_decode.py`` (BENCHMARKS.md, decode step),
for a model directory of one's own.
"""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING

from rich import box
from rich.console import Console
from rich.table import Table

from ..config import Sampling
from ..view.live import format_stat
from ..runtime.ranks import is_main_process
from ..tree import ThoughtTree, TreeError
from .common import CliError, at_least
from .model import add_model_arguments, is_remote, load_model

if TYPE_CHECKING:
    from ..runtime import LM
    from .common import Subparsers


def _synced_time(lm: LM) -> float:
    """Wall time after the device's queued work is done."""
    if lm.device.type == "cuda":
        import torch

        torch.cuda.synchronize(lm.device)
    return time.perf_counter()


def add_bench(sub: Subparsers) -> None:
    p = sub.add_parser("bench", help="time batched tree decoding: one prompt, many branches")
    add_model_arguments(p)
    p.add_argument(
        "--prompt-tokens",
        type=at_least(1),
        help="shared prompt length (default 2048, or what fits the model's context with --tokens)",
    )
    p.add_argument("--branches", type=at_least(1), default=64, help="children sampled together (default 64)")
    p.add_argument("--tokens", type=at_least(1), default=64, help="tokens generated per branch (default 64)")
    p.add_argument("--repeat", type=at_least(1), default=3, help="timed repetitions (default 3)")
    p.set_defaults(run=run_bench)


def run_bench(args: argparse.Namespace) -> int:
    if is_remote(args.model):
        raise CliError("bench times the local runtime; time a server with benchmarks/serve.py")
    lm = load_model(
        args.model,
        args.device,
        args.dtype,
        args.attention,
        args.tensor_parallel,
        args.collective_timeout,
        num_pages=args.kv_pages,
        speculative=args.speculative,
    )
    if args.tokens >= lm.max_context:
        raise CliError(f"--tokens {args.tokens} leaves no room for a prompt in the model's context of {lm.max_context}")
    if args.prompt_tokens is None:
        args.prompt_tokens = min(2048, lm.max_context - args.tokens)
    if args.prompt_tokens + args.tokens > lm.max_context:
        raise CliError(
            f"--prompt-tokens {args.prompt_tokens} + --tokens {args.tokens} exceed the model's context "
            f"of {lm.max_context}"
        )
    vocab = lm.config.vocab_size
    prompt = [(7 * i + 3) % vocab for i in range(args.prompt_tokens)]
    sampling = Sampling(max_tokens=args.tokens, temperature=1.0, ignore_eos=True)
    table = Table(
        title=f"tree decoding, {args.branches} branches × {args.tokens} tokens on a "
        f"{args.prompt_tokens}-token prompt, {lm.device}",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    for col in ("run", "seconds", "tokens/s", "forward steps", "ms/step", "KV reuse"):
        table.add_column(col, justify="right")
    for rep in range(args.repeat + 1):  # the first run warms up kernels and caches
        try:
            tree = ThoughtTree(lm, prompt=prompt, seed=rep)
        except TreeError as exc:
            raise CliError(str(exc)) from exc
        tree.materialize()
        before = (lm.stats.forward_steps, lm.stats.attended_tokens, lm.stats.unique_tokens)
        t0 = _synced_time(lm)
        tree.expand([tree.root], n=args.branches, sampling=sampling)
        seconds = _synced_time(lm) - t0
        steps = lm.stats.forward_steps - before[0]
        reuse = (lm.stats.attended_tokens - before[1]) / max(1, lm.stats.unique_tokens - before[2])
        tree.prune(tree.root)
        if rep:
            table.add_row(
                str(rep),
                f"{seconds:.3f}",
                format_stat(args.branches * args.tokens / seconds),
                str(steps),
                f"{1000 * seconds / steps:.2f}",
                f"{reuse:.1f}×",
            )
    if is_main_process():
        Console().print(table)
    return 0
