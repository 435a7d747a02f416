"""Exact rational arithmetic for Game of 24: number text, expression parsing, answer checking.

Model text is never handed to ``eval``: expressions are read by a small recursive-descent
parser that accepts only non-negative integer literals, ``+ - * /`` and parentheses, and
computes with :class:`fractions.Fraction`, so ``8 / (3 - 8 / 3)`` is exactly 24.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction

TARGET = Fraction(24)
MAX_EXPRESSION_CHARS = 512  # answers are short; the cap bounds parse time and recursion depth

MAX_NESTING = 64  # parentheses deeper than this are no answer, and would cost a recursion per level
# ASCII digits only: \d would read other scripts' digits (Arabic-Indic "٤") as numbers.
_NUMBER_RE = re.compile(r"-?[0-9]+(?:/[0-9]+)?")
_TOKEN_RE = re.compile(r"\s*(?:([0-9]+)|([-+*/()]))")


class ExpressionError(ValueError):
    """An expression that is not plain arithmetic, or that cannot be evaluated."""


def format_number(value: Fraction | int) -> str:
    """``24`` for integers, ``5/3`` or ``-5/3`` for fractions (always in lowest terms)."""
    if type(value) is not Fraction:  # exact type test: isinstance on numbers ABCs is slow
        value = Fraction(value)
    if value.denominator == 1:
        return str(value.numerator)
    return f"{value.numerator}/{value.denominator}"


def parse_number(text: str) -> Fraction:
    """Inverse of :func:`format_number`: ``'7'``, ``'-2'``, ``'5/3'`` -> Fraction."""
    text = text.strip()
    if not _NUMBER_RE.fullmatch(text):
        raise ValueError(f"not a number: {text!r}; write an integer like 7 or a fraction like 5/3")
    numerator, _, denominator = text.partition("/")
    if denominator and int(denominator) == 0:
        raise ValueError(f"not a number: {text!r} has a zero denominator")
    return Fraction(int(numerator), int(denominator or 1))


def format_numbers(values: Iterable[Fraction | int]) -> str:
    """Space-separated numbers in ascending order, e.g. ``'1/2 4 6'`` (the state text)."""
    return " ".join(format_number(v) for v in sorted(v if type(v) is Fraction else Fraction(v)
                                                        for v in values))


def parse_numbers(text: str) -> tuple[Fraction, ...]:
    """``'4 5 6 10'`` -> the numbers in the order written."""
    parts = text.split()
    if not parts:
        raise ValueError("no numbers given; write them space-separated, e.g. '4 5 6 10'")
    return tuple(parse_number(p) for p in parts)


@dataclass(frozen=True)
class Evaluated:
    """An expression's exact value and the number literals it used, in order of appearance."""

    value: Fraction
    numbers: tuple[Fraction, ...]


def _tokenize(text: str) -> list[str]:
    tokens: list[str] = []
    text, pos = text.rstrip(), 0
    while pos < len(text):
        match = _TOKEN_RE.match(text, pos)
        if match is None:
            raise ExpressionError(f"unexpected character {text[pos:].lstrip()[0]!r} at position {pos}; "
                                  "only integers, + - * / and parentheses are allowed")
        tokens.append(match.group(1) or match.group(2))
        pos = match.end()
    return tokens


class _Parser:
    """expr := term (('+'|'-') term)* ; term := factor (('*'|'/') factor)* ;
    factor := INTEGER | '(' expr ')'."""

    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens
        self.pos = 0
        self.depth = 0
        self.numbers: list[Fraction] = []

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise ExpressionError("expression ends too early")
        self.pos += 1
        return token

    def expr(self) -> Fraction:
        value = self.term()
        while self.peek() in ("+", "-"):
            value = value + self.term() if self.take() == "+" else value - self.term()
        return value

    def term(self) -> Fraction:
        value = self.factor()
        while self.peek() in ("*", "/"):
            op = self.take()
            right = self.factor()
            if op == "*":
                value *= right
            elif right == 0:
                raise ExpressionError("division by zero")
            else:
                value /= right
        return value

    def factor(self) -> Fraction:
        token = self.take()
        if token == "(":
            self.depth += 1
            if self.depth > MAX_NESTING:
                raise ExpressionError(f"parentheses nested deeper than {MAX_NESTING}")
            value = self.expr()
            self.depth -= 1
            if self.take() != ")":
                raise ExpressionError("unbalanced parentheses")
            return value
        if token.isdigit():
            number = Fraction(int(token))
            self.numbers.append(number)
            return number
        raise ExpressionError(f"expected a number or '(' but found {token!r}")


def evaluate_expression(text: str) -> Evaluated:
    """Exactly evaluate plain arithmetic text such as ``'(10 - 4) * (5 - 6 / 6)'``.

    Raises ExpressionError for anything else (names, unary minus, decimals, ``**``,
    division by zero, unbalanced parentheses, trailing tokens, over-long text).
    """
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ExpressionError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    parser = _Parser(_tokenize(text))
    value = parser.expr()
    if parser.peek() is not None:
        raise ExpressionError(f"unexpected {parser.peek()!r} after a complete expression")
    return Evaluated(value=value, numbers=tuple(parser.numbers))


@dataclass(frozen=True)
class CheckResult:
    """Whether an answer is correct; ``reason`` says why not (``'ok'`` when correct)."""

    correct: bool
    reason: str
    value: Fraction | None = None


def check_answer(answer: str, numbers: Sequence[int | Fraction]) -> CheckResult:
    """Is ``answer`` (``'<expression>'`` or ``'<expression> = 24'``, optionally after
    ``'answer:'``) a correct Game of 24 solution for ``numbers``?

    Correct means: the left-hand side uses exactly ``numbers`` as a multiset and equals 24
    exactly. A right-hand side, when present, must be 24.
    """
    text = answer.strip()
    if text.lower().startswith("answer:"):
        text = text[len("answer:"):]
    lhs, eq, rhs = text.partition("=")
    if eq and rhs.strip() != "24":
        return CheckResult(False, f"right-hand side is {rhs.strip()!r}, not '24'")
    try:
        evaluated = evaluate_expression(lhs)
    except ExpressionError as error:
        return CheckResult(False, f"not valid arithmetic: {error}")
    used, wanted = Counter(evaluated.numbers), Counter(Fraction(n) for n in numbers)
    if used != wanted:
        missing = " ".join(format_number(n) for n in (wanted - used).elements())
        extra = " ".join(format_number(n) for n in (used - wanted).elements())
        detail = "; ".join(p for p in (f"missing {missing}" if missing else "",
                                       f"not allowed or reused {extra}" if extra else "") if p)
        return CheckResult(False, f"numbers used differ from {format_numbers(numbers)}: {detail}",
                           evaluated.value)
    if evaluated.value != TARGET:
        return CheckResult(False, f"evaluates to {format_number(evaluated.value)}, not 24",
                           evaluated.value)
    return CheckResult(True, "ok", evaluated.value)
