"""``--data-parallel`` and ``--tensor-parallel``: how a command joins a torchrun launch.

torch.distributed is imported only when one of the flags asks for it, so plain runs and
``--help`` start fast.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ..config import RuntimeConfig
from ..runtime.ranks import ParallelError
from .common import CliError, at_least, positive_seconds

if TYPE_CHECKING:
    from ..search.data_parallel import Layout


def add_tensor_parallel(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tensor-parallel", type=at_least(1), default=1, metavar="N",
                   help="split the model over N processes (launch with torchrun --nproc-per-node N)")
    default = RuntimeConfig.collective_timeout_s
    p.add_argument("--collective-timeout", type=positive_seconds, default=default, metavar="SECONDS",
                   help="under a torchrun launch, how long a rank waits for the others (forming the group, "
                        f"and in each collective) before it stops with an error (default {default:g})")


def add_data_parallel(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-parallel", action="store_true",
                   help="split the problems over the ranks (or tensor-parallel groups) of a torchrun launch; "
                        "rank 0 writes the merged run file")


def join_launch(args: argparse.Namespace) -> Layout | None:
    """The data-parallel layout of a distributed run (--data-parallel or --tensor-parallel > 1), else None."""
    if not args.data_parallel and args.tensor_parallel == 1:
        return None
    import torch

    from ..search.data_parallel import join_data_parallel

    requested = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    try:
        layout = join_data_parallel(args.tensor_parallel, requested, timeout_s=args.collective_timeout)
    except ParallelError as exc:
        raise CliError(str(exc)) from exc
    if not args.data_parallel and layout.groups > 1:
        raise CliError(f"--tensor-parallel {args.tensor_parallel} does not match the world of {layout.world} ranks; "
                       f"launch with torchrun --nproc-per-node {args.tensor_parallel}, or add --data-parallel "
                       f"to split the problems over {layout.groups} groups")
    if args.output is None and args.resume is None:
        raise CliError("a launch over several ranks needs --output: each group saves its part beside it as it goes, "
                       "and rank 0 merges the parts into it")
    return layout
