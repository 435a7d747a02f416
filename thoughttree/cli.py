"""The ``thoughttree`` command.

Each subcommand is a pair of functions in :mod:`thoughttree.commands`: ``add_<name>(subparsers)``
registers its parser and sets ``run=`` to ``run_<name>(args) -> int``. A new subcommand is one
more pair and one more entry in ``COMMANDS``. A run function reports a user's mistake by raising
``CliError`` (or ``RunError``, ``RunFileError``); ``main`` prints it as one line on stderr and exits with status 2.
A tensor-parallel peer that dies or stops answering (``RankFailure``) is reported the same way,
with status 1. Output piped into a reader that stops early (``| head``) ends the command quietly
with status 1, as rich does for what it prints and as Python's documentation on SIGPIPE advises.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import TYPE_CHECKING, Callable, Sequence

from . import __version__
from .commands.common import USAGE_ERROR, CliError
from .commands.code import add_apps, add_check_program, add_humaneval
from .commands.bench import add_bench
from .commands.game24 import add_demo, add_game24
from .commands.runs import add_export, add_show, add_stats
from .commands.serve import add_serve
from .commands.warmup import add_warmup
from .runtime.ranks import RankFailure
from .search.interrupts import EXIT_CODES
from .search.run_output import RunError, unlock_run_files
from .tree.serialize import RunFileError

if TYPE_CHECKING:
    from .commands.common import Subparsers

RANK_FAILED = 1
PIPE_CLOSED = 1

COMMANDS: tuple[Callable[[Subparsers], None], ...] = (
    add_demo, add_game24, add_apps, add_humaneval, add_check_program, add_bench, add_show, add_stats, add_export,
    add_warmup, add_serve,
)


def build_parser(commands: Sequence[Callable[[Subparsers], None]] = COMMANDS) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="thoughttree", description="LLM reasoning search on a shared-prefix KV runtime"
    )
    parser.add_argument("--version", action="version", version=f"thoughttree {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in commands:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status: 0 when everything worked, 1 when a search
    or a peer failed or the output's reader went away, 2 for a usage or input error, 130 or 143
    when SIGINT or SIGTERM stopped it."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return USAGE_ERROR
    try:
        return int(args.run(args))
    except (CliError, RunError, RunFileError) as exc:
        print(f"thoughttree {args.command}: error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    except RankFailure as exc:
        print(f"thoughttree {args.command}: error: {exc}", file=sys.stderr)
        _exit_if_distributed(RANK_FAILED)
        return RANK_FAILED
    except KeyboardInterrupt:  # outside a run (which saves and reports itself): loading, say
        print(f"thoughttree {args.command}: interrupted", file=sys.stderr)
        return EXIT_CODES[signal.SIGINT]
    except BrokenPipeError:
        # The reader of stdout is gone: what is left to print goes nowhere, including the flush
        # at exit, which would otherwise print a traceback of its own.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return PIPE_CLOSED
    finally:
        unlock_run_files()  # a command's run files are its own only while it runs


def _exit_if_distributed(status: int) -> None:
    """Under a launch whose process group is broken, end the process here with ``status``:
    tearing the group down at interpreter exit while a peer hangs can abort the process (gloo
    ends it with SIGABRT), which would hide the status. Run files are written by then."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
