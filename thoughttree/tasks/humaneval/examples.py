"""Public tests for HumanEval: the examples written in each prompt's docstring.

A HumanEval prompt shows its function on a few inputs, in several styles: doctest lines
(``>>> f(1, 2)`` then ``3`` on the next line) or prose (``f(1, 2) == 3``, ``f(1, 2) ➞ 3``,
``f(1, 2) -> 3``, ``f(1, 2) should return 3``). Those examples are what a programmer reading
the prompt sees, so a search may run candidates on them; the problem's own ``check`` function
stays hidden. Only examples whose arguments and result are Python literals are taken.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from ..code.problem import Test

_ARROW = re.compile(r"^\s*(?:==|➞|=>|->|→|=|should\s+return|returns?|is)\s*", re.IGNORECASE)


def _call_end(text: str, open_at: int) -> int | None:
    """Index just past the parenthesis closing the one at ``open_at``, skipping string literals."""
    depth, i, quote = 0, open_at, None
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


def _literal(text: str) -> tuple[bool, Any]:
    text = text.strip().rstrip(".,;").strip()
    if not text:
        return False, None
    try:
        return True, ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False, None


def _result_text(after: str) -> str | None:
    """The expected value after a call: on the same line after an arrow, or the next line (doctest)."""
    line, _, rest = after.partition("\n")
    arrow = _ARROW.match(line)
    if arrow and line[arrow.end():].strip():
        return line[arrow.end():]
    if not line.strip():
        nxt = rest.split("\n", 1)[0]
        if nxt.strip() and not nxt.strip().startswith(">>>"):
            return nxt
    return None


def docstring_examples(prompt: str, entry_point: str) -> list[Test]:
    """``(arguments, expected)`` pairs shown in ``prompt`` for ``entry_point``, duplicates dropped."""
    out: list[Test] = []
    for match in re.finditer(rf"(?<![\w.]){re.escape(entry_point)}\s*\(", prompt):
        if prompt[max(0, match.start() - 4):match.start()] == "def ":
            continue
        end = _call_end(prompt, match.end() - 1)
        if end is None:
            continue
        try:
            call = ast.parse(prompt[match.start():end], mode="eval").body
        except SyntaxError:
            continue
        if not isinstance(call, ast.Call) or call.keywords:
            continue
        try:
            args = [ast.literal_eval(a) for a in call.args]
        except (ValueError, SyntaxError, TypeError):
            continue
        result = _result_text(prompt[end:])
        ok, want = _literal(result) if result is not None else (False, None)
        if ok and (args, want) not in out:
            out.append((args, want))
    return out
