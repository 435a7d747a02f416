"""``thoughttree warmup``: compile the kernels of the searches a user will run, once per machine."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from .common import CliError, at_least
from .model import add_model_arguments, check_device, load_model

if TYPE_CHECKING:
    from .common import Subparsers

BRANCHES = (1, 4, 16, 64, 256)  # the default batch sizes warmed (torch is not imported to parse)


def _counts(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected branch counts like 1,4,16, got {text!r}") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"branch counts must be integers >= 1, got {text!r}")
    return counts


def add_warmup(sub: Subparsers) -> None:
    p = sub.add_parser("warmup", help="compile the GPU kernels for a model and batch sizes into the persistent cache")
    add_model_arguments(p)
    p.add_argument(
        "--branches",
        type=_counts,
        default=BRANCHES,
        metavar="N,N,...",
        help=f"children decoded together, one warm-up per count (default {','.join(str(n) for n in BRANCHES)})",
    )
    p.add_argument("--prompt-tokens", type=at_least(1), help="prompt length (default 2048, or what fits the context)")
    p.add_argument("--tokens", type=at_least(1), default=4, help="tokens generated per branch (default 4)")
    p.set_defaults(run=run_warmup)


def run_warmup(args: argparse.Namespace) -> int:
    from ..kernels.cache import CACHE_ENV, use_persistent_cache

    check_device(args.device)
    cache = use_persistent_cache()
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    if device.startswith("cpu") and not interpreted and args.attention in ("auto", "reference"):
        print("warmup: nothing to compile on the CPU (its steps run PyTorch, not Triton kernels); nothing done")
        return 0
    lm = load_model(
        args.model,
        device,
        args.dtype,
        args.attention,
        args.tensor_parallel,
        args.collective_timeout,
        num_pages=args.kv_pages,
    )
    from ..runtime.warmup import warm_up

    prompt = args.prompt_tokens if args.prompt_tokens is not None else min(2048, lm.max_context - args.tokens)
    try:
        report = warm_up(lm, prompt_tokens=prompt, branches=args.branches, tokens=args.tokens)
    except ValueError as exc:
        raise CliError(str(exc)) from exc
    for shape in report.shapes:
        print(
            f"warmup: {shape.branches} branches on a {report.prompt_tokens}-token prompt: {shape.seconds:.2f} s, "
            f"{shape.forward_steps} steps, {shape.graph_captures} graphs captured"
        )
    if report.compiles:
        print(
            f"warmup: kernels compiled for {report.device} ({report.attention} attention) are kept in {cache} "
            f"({CACHE_ENV}); later processes load them from there"
        )
    else:
        print(
            f"warmup: {report.device} with {report.attention} attention compiles no Triton kernels (the CPU runs "
            "PyTorch or the Triton interpreter); nothing kept"
        )
    return 0
