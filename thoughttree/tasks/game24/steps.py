"""Steps of a Game of 24 search: ``a op b = c (left: x y z)``, as in Tree of Thoughts.

A state is a multiset of 1-4 rational numbers; a step takes two of them, combines them with
one operation and leaves the rest plus the result. ``left`` is always written in ascending
order; parsing accepts any order and compares multisets.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction

from thoughttree.tasks.game24.arith import format_number, format_numbers, parse_number

OPS = ("+", "-", "*", "/")
State = tuple[Fraction, ...]  # always sorted ascending; build with make_state

_NUM = r"-?\d+(?:/\d+)?"
_STEP_RE = re.compile(rf"\s*({_NUM})\s*([-+*/])\s*({_NUM})\s*=\s*({_NUM})\s*"
                      rf"\(\s*left\s*:\s*((?:{_NUM}\s*)*)\)\s*")


def make_state(numbers: Iterable[Fraction | int | str]) -> State:
    """Canonical state: the numbers as Fractions, sorted ascending. Strings are parsed."""
    # exact type test first: isinstance against the numbers ABCs is slow in hot loops
    values = [n if type(n) is Fraction else parse_number(n) if isinstance(n, str) else Fraction(n)
              for n in numbers]
    if not 1 <= len(values) <= 4:
        raise ValueError(f"a Game of 24 state has 1-4 numbers, got {len(values)}")
    return tuple(sorted(values))


def apply_op(a: Fraction, op: str, b: Fraction) -> Fraction:
    """``a op b`` exactly; ZeroDivisionError for ``x / 0``, ValueError for an unknown op."""
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "/":
        if b == 0:
            raise ZeroDivisionError(f"{format_number(a)} / 0")
        return a / b
    raise ValueError(f"unknown operation {op!r}; use one of {' '.join(OPS)}")


@dataclass(frozen=True)
class Step:
    """One step: ``a op b = result`` leaving ``left`` (sorted, includes ``result``)."""

    a: Fraction
    op: str
    b: Fraction
    result: Fraction
    left: State

    def text(self) -> str:
        """The step line without a newline, e.g. ``'4 + 5 = 9 (left: 6 9 10)'``."""
        return (f"{format_number(self.a)} {self.op} {format_number(self.b)} = "
                f"{format_number(self.result)} (left: {format_numbers(self.left)})")


def _remove(state: Sequence[Fraction], values: Sequence[Fraction]) -> list[Fraction] | None:
    """``state`` minus ``values`` as multisets, or None when a value is not there."""
    rest = list(state)
    for v in values:
        if v not in rest:
            return None
        rest.remove(v)
    return rest


def make_step(state: Sequence[Fraction], a: Fraction, op: str, b: Fraction) -> Step:
    """The step combining ``a`` and ``b`` of ``state``; ValueError if they are not in it."""
    rest = _remove(state, (a, b))
    if rest is None:
        raise ValueError(f"{format_number(a)} and {format_number(b)} are not both in "
                         f"the state {format_numbers(state)}")
    result = apply_op(a, op, b)
    return Step(a, op, b, result, make_state([*rest, result]))


@functools.lru_cache(maxsize=4096)  # a search parses each line many times (checks, dedupe keys, states)
def parse_step(text: str) -> Step:
    """Parse ``'a op b = c (left: x y z)'`` as written (arithmetic not yet checked).

    Raises ValueError when the text does not have that shape.
    """
    match = _STEP_RE.fullmatch(text)
    if match is None:
        raise ValueError(f"not a step line: {text.strip()!r}; expected 'a op b = c (left: x y z)'")
    a, op, b, result, left = match.groups()
    left_values = tuple(parse_number(x) for x in left.split())
    if not left_values:
        raise ValueError(f"step {text.strip()!r} leaves no numbers")
    return Step(parse_number(a), op, parse_number(b), parse_number(result),
                tuple(sorted(left_values)))


@dataclass(frozen=True)
class StepCheck:
    """Result of validating a step against a state; ``state`` is the state after a valid step."""

    valid: bool
    reason: str
    step: Step | None = None
    state: State | None = None


def validate_step(state: Sequence[Fraction], step: Step | str) -> StepCheck:
    """Check a step against ``state``: operands present, arithmetic exact, ``left`` right."""
    if isinstance(step, str):
        try:
            step = parse_step(step)
        except ValueError as error:
            return StepCheck(False, str(error))
    if len(state) < 2:
        return StepCheck(False, f"state {format_numbers(state)} has fewer than two numbers", step)
    try:
        expected = make_step(state, step.a, step.op, step.b)
    except ValueError as error:
        return StepCheck(False, str(error), step)
    except ZeroDivisionError:
        return StepCheck(False, "division by zero", step)
    if expected.result != step.result:
        return StepCheck(False, f"{format_number(step.a)} {step.op} {format_number(step.b)} is "
                         f"{format_number(expected.result)}, not {format_number(step.result)}", step)
    if Counter(expected.left) != Counter(step.left):
        return StepCheck(False, f"numbers left should be {format_numbers(expected.left)}, "
                         f"not {format_numbers(step.left)}", step)
    return StepCheck(True, "ok", step, expected.left)


_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}


def _wrap(expr: str, prec: int, parent: int, right_of_noncommutative: bool) -> str:
    """Parenthesise a sub-expression only where precedence or associativity needs it."""
    if prec < parent or (prec == parent and right_of_noncommutative):
        return f"({expr})"
    return expr


def compose_expression(numbers: Sequence[Fraction | int], steps: Sequence[Step | str]) -> str:
    """The expression (without ``= 24``) that a path of steps from ``numbers`` computes.

    Each step is validated against the running state; ValueError names the first bad step.
    The path need not reach 24: the checker decides that.
    """
    # Each entry: (value, expression text, precedence of its top operation; 3 = atom).
    pool: list[tuple[Fraction, str, int]] = []
    for n in numbers:
        value = Fraction(n)
        atom = format_number(value)
        pool.append((value, atom if value.denominator == 1 and value >= 0 else f"({atom})", 3))
    for index, step in enumerate(steps, start=1):
        check = validate_step([v for v, _, _ in pool], step)
        if not check.valid or check.step is None:
            raise ValueError(f"step {index} is invalid: {check.reason}")
        step = check.step
        # Equal values are interchangeable; taking the latest one reads a step's operand as the
        # result of the step that just made it, which is what a path usually means.
        _, a_expr, a_prec = pool.pop(max(i for i, entry in enumerate(pool) if entry[0] == step.a))
        _, b_expr, b_prec = pool.pop(max(i for i, entry in enumerate(pool) if entry[0] == step.b))
        prec = _PRECEDENCE[step.op]
        text = (f"{_wrap(a_expr, a_prec, prec, False)} {step.op} "
                f"{_wrap(b_expr, b_prec, prec, step.op in '-/')}")
        pool.append((step.result, text, prec))
    if len(pool) != 1:
        raise ValueError(f"the steps leave {len(pool)} numbers; a full path leaves exactly one")
    return pool[0][1]
