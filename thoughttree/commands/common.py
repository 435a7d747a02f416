"""What every subcommand shares: the user-error type and argument parsers."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

if TYPE_CHECKING:
    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]

USAGE_ERROR = 2


class CliError(Exception):
    """A mistake in the command line or its input, told to the user in one line."""


def positive_seconds(text: str) -> float:
    """An argparse type: a number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0 seconds, got {text}")
    return value


def at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``low``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value

    return parse


def method_options(args: argparse.Namespace, applies: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """The options of ``applies`` given on the command line (not None), by name; CliError for one
    that ``args.method`` does not use (``applies`` maps each option to the methods that do)."""
    given = {name: getattr(args, name) for name in applies if getattr(args, name) is not None}
    for name in given:
        if args.method not in applies[name]:
            raise CliError(f"--{name.replace('_', '-')} does not apply to --method {args.method} (it is for "
                           f"{', '.join(applies[name])}); leave it out")
    return given
