"""A programming problem as the code tasks see it: statement, public tests for the search, hidden tests for the score.

A test is ``(input, expected)`` as :func:`thoughttree.sandbox.run_tests` takes it: standard input
and output text, or (with ``fn_name``) the argument list and the return value. Public tests are
what a search may run candidates against; hidden tests are used only for the final score and
never overlap the public ones.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

Test = tuple[Any, Any]


@dataclass(frozen=True)
class CodeProblem:
    """One problem. ``key`` names it in run files (an APPS problem id, a HumanEval task id)."""

    key: str
    statement: str
    public: tuple[Test, ...]
    hidden: tuple[Test, ...]
    fn_name: str | None = None
    starter_code: str = ""
    difficulty: str = ""
    solutions: tuple[str, ...] = ()
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.hidden:
            raise ValueError(f"problem {self.key}: no hidden tests to score a program on")


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


# An argument's repr found on its own: no word character, digit, point or minus sign just before,
# no word character or point just after.
_BOUNDED = r"(?<![\w.\-]){}(?![\w.])"


def _lines(text: str) -> str:
    """Non-empty lines, each whitespace-normalised, framed by newlines (for whole-line matching)."""
    return "\n" + "\n".join(_squash(line) for line in text.splitlines() if line.strip()) + "\n"


def split_public(
    tests: list[Test], statement: str, *, fn_name: str | None, max_public: int = 3
) -> tuple[tuple[Test, ...], tuple[Test, ...]]:
    """(public, hidden): the tests whose input appears in the statement are public, the rest hidden.

    Competitive-programming statements show a few example tests, and APPS's test lists usually
    contain them; a search may use those, as a programmer would. A test counts as shown when its
    whitespace-normalised standard input (or, call-based, every argument's ``repr``) occurs in the
    whitespace-normalised statement (standard input as whole lines: "QA" does not match a line
    "QAQ"; an argument not inside a longer word or number: ``1`` is not found in "10" or "-1").
    At most ``max_public`` are taken, and at least one test always stays hidden; when no test is
    found in the statement, the first test is public.
    """
    if len(tests) < 2:
        raise ValueError(f"a problem needs at least 2 tests to split into public and hidden ones, got {len(tests)}")
    text = _squash(statement)
    lines = _lines(statement)

    def shown(test: Test) -> bool:
        if fn_name is None:
            needle = _lines(str(test[0]))
            return needle != "\n" and needle in lines
        args = test[0] if isinstance(test[0], list) else [test[0]]
        return bool(args) and all(re.search(_BOUNDED.format(re.escape(_squash(repr(a)))), text) for a in args)

    chosen = [i for i, t in enumerate(tests) if shown(t)][: min(max_public, len(tests) - 1)] or [0]
    public = tuple(tests[i] for i in chosen)
    hidden = tuple(t for i, t in enumerate(tests) if i not in chosen)
    return public, hidden
