"""Is an output right? APPS's comparison rules, in the parent process only.

Standard output (:func:`outputs_match`): lines are compared token by token, so spacing, blank
lines and trailing newlines do not matter; two tokens also match when at least one is a decimal
number (has a point or an exponent) and both are within ``FLOAT_REL`` relative or ``FLOAT_ABS``
absolute of each other, as APPS accepts floats that ``numpy.allclose`` calls equal. Two
integers must be equal: APPS's float fallback would also accept 100000 for 100001.

Every comparison is total over what a program can print: integers of any length are compared
as digit strings (no conversion, so no digit limit), decimals beyond a float's range exactly as
decimal values, and no output of any bytes or any number of lines raises.
APPS additionally accepts a line whose tokens match as an unordered set; that accepts wrong
answers to ordering problems, so it is not followed here.

Return values (:func:`values_match`): compared as values, with tuples equal to lists (APPS's
expected values come from JSON, which has no tuples), floats within the same tolerance, and
APPS's two conventions for its JSON files: an expected value wrapped in a one-element list, and
dictionary keys that JSON turned into strings of digits.
"""

from __future__ import annotations

import decimal
import math
import re
from typing import Any

FLOAT_REL = 1e-5
FLOAT_ABS = 1e-6
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_INTEGER = re.compile(r"[+-]?\d+")


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=FLOAT_REL, abs_tol=FLOAT_ABS)


def _tokens(text: str) -> list[list[str]]:
    return [words for words in (line.split() for line in text.splitlines()) if words]


def _integer_text(token: str) -> str:
    """An integer token's canonical digits: no plus sign, no leading zeros, no minus on zero."""
    negative = token.startswith("-")
    digits = token.lstrip("+-").lstrip("0") or "0"
    return "-" + digits if negative and digits != "0" else digits


def _decimals_close(got: str, want: str) -> bool:
    """Two decimal tokens within the tolerance, exactly, when a float cannot hold them."""
    try:
        with decimal.localcontext(decimal.Context(prec=64, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)):
            a, b = decimal.Decimal(got), decimal.Decimal(want)
            return abs(a - b) <= max(decimal.Decimal(FLOAT_REL) * max(abs(a), abs(b)), decimal.Decimal(FLOAT_ABS))
    except (decimal.DecimalException, ValueError, OverflowError, MemoryError):
        return False


def _token_match(got: str, want: str) -> bool:
    if got == want:
        return True
    if not (_NUMBER.fullmatch(got) and _NUMBER.fullmatch(want)):
        return False
    if _INTEGER.fullmatch(got) and _INTEGER.fullmatch(want):
        return _integer_text(got) == _integer_text(want)
    a, b = float(got), float(want)  # the pattern admits no "inf" or "nan": an infinity is an overflow
    if math.isfinite(a) and math.isfinite(b):
        return _close(a, b)
    return _decimals_close(got, want)


def outputs_match(output: str, expected: str | list[str]) -> bool:
    """Whether a program's standard output answers a test whose expected output is ``expected``.

    ``expected`` may also be a list of lines, as some APPS files store it.
    """
    if isinstance(expected, list):
        expected = "\n".join(str(line) for line in expected)
    got, want = _tokens(output), _tokens(expected)
    if len(got) != len(want):
        return False
    return all(
        len(g) == len(w) and all(_token_match(a, b) for a, b in zip(g, w)) for g, w in zip(got, want)
    )


def _same(value: Any, expected: Any) -> bool:
    if isinstance(value, tuple):
        value = list(value)
    if isinstance(expected, tuple):
        expected = list(expected)
    if isinstance(value, list) and isinstance(expected, list):
        return len(value) == len(expected) and all(_same(v, e) for v, e in zip(value, expected))
    if isinstance(value, dict) and isinstance(expected, dict):
        return value.keys() == expected.keys() and all(_same(value[k], expected[k]) for k in value)
    numbers = (int, float)
    if (
        isinstance(value, numbers) and isinstance(expected, numbers)
        and not isinstance(value, bool) and not isinstance(expected, bool)
        and (isinstance(value, float) or isinstance(expected, float))
    ):
        try:
            return _close(float(value), float(expected))
        except OverflowError:  # an integer beyond any float: no float is within the tolerance of it
            return False
    try:
        return bool(value == expected)
    except Exception:  # a comparison the program's value cannot make counts as unequal
        return False


def _int_keys(expected: Any) -> Any:
    if isinstance(expected, dict) and all(isinstance(k, str) and _INTEGER.fullmatch(k) for k in expected):
        try:
            return {int(k): v for k, v in expected.items()}
        except ValueError:  # more digits than Python converts
            return expected
    return expected


def values_match(value: Any, expected: Any) -> bool:
    """Whether a function's return value equals the expected value of a call-based test.

    Total: a value nested too deeply to compare, or one whose comparison fails, is unequal.
    """
    candidates = [expected]
    if isinstance(expected, list) and len(expected) == 1:
        candidates.append(expected[0])
    try:
        return any(_same(value, c) or _same(value, _int_keys(c)) for c in candidates)
    except (RecursionError, MemoryError, ValueError, TypeError, OverflowError):
        return False
