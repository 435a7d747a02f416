"""The bundled Game of 24 puzzle list (``data/24.csv``, 1,362 puzzles, 0-based indices).

The list is the Tree of Thoughts benchmark, ordered from easiest to hardest by human solving
time; the standard test split is indices 900-999 (:data:`TEST_INDICES`). The validation range
(:data:`VALIDATION_INDICES`) is the 50 puzzles either side of it, 850-899 and 1000-1049: the same
difficulty (mean human solve rate 86.1% against 85.9%), also held out of the bundled model's
training data (:mod:`.split`).
"""

from __future__ import annotations

import csv
import functools
import io
from fractions import Fraction
from importlib import resources

from thoughttree.tasks.game24.arith import parse_number

NUM_PUZZLES = 1362
TEST_INDICES = range(900, 1000)
VALIDATION_INDICES = (*range(850, 900), *range(1000, 1050))
CSV_RESOURCE = "data/24.csv"


def _read_csv_text() -> str:
    return resources.files("thoughttree.tasks.game24").joinpath(CSV_RESOURCE).read_text("utf-8")


@functools.lru_cache(maxsize=4096)  # a search reads its puzzle for every state it checks
def parse_puzzle(text: str) -> tuple[int, ...]:
    """``'4 5 6 10'`` -> ``(4, 5, 6, 10)``.

    A puzzle is exactly four whole numbers >= 0 (the answer checker reads no minus sign in front
    of a number, so a negative one could never be part of a correct answer); anything else
    raises ValueError naming the problem.
    """
    parts = text.split()
    if len(parts) != 4:
        raise ValueError(f"a puzzle has four numbers separated by spaces, got {text!r}")
    numbers: list[int] = []
    for part in parts:
        try:
            value: Fraction = parse_number(part)
        except ValueError:
            raise ValueError(f"puzzle {text!r}: {part!r} is not a whole number") from None
        if value.denominator != 1:
            raise ValueError(f"puzzle {text!r}: {part!r} is not a whole number")
        if value < 0:
            raise ValueError(f"puzzle {text!r}: {part!r} is negative; Game of 24 numbers are whole numbers >= 0")
        numbers.append(value.numerator)
    return tuple(numbers)


def load_puzzles() -> list[tuple[int, ...]]:
    """All 1,362 puzzles in file order (index ``i`` is CSV rank ``i + 1``)."""
    rows = list(csv.DictReader(io.StringIO(_read_csv_text())))
    puzzles = [parse_puzzle(row["Puzzles"]) for row in rows]
    if len(puzzles) != NUM_PUZZLES:
        raise RuntimeError(f"{CSV_RESOURCE} holds {len(puzzles)} puzzles, expected {NUM_PUZZLES}; "
                           "the bundled file is damaged, reinstall the package")
    return puzzles


def get_puzzle(index: int, puzzles: list[tuple[int, ...]] | None = None) -> tuple[int, ...]:
    """The puzzle at 0-based ``index`` (900 is ``(4, 5, 6, 10)``)."""
    if isinstance(index, bool) or not isinstance(index, int):
        raise TypeError(f"puzzle index must be an int, got {type(index).__name__}")
    if not 0 <= index < NUM_PUZZLES:
        raise IndexError(f"puzzle index {index} is out of range; valid indices are 0..{NUM_PUZZLES - 1}")
    return (puzzles if puzzles is not None else load_puzzles())[index]


def held_out_puzzles() -> list[tuple[int, ...]]:
    """The standard test puzzles, indices 900-999 (named so pytest does not collect it)."""
    puzzles = load_puzzles()
    return [puzzles[i] for i in TEST_INDICES]


@functools.lru_cache(maxsize=1)
def _held_out_multisets() -> frozenset[tuple[int, ...]]:
    return frozenset(tuple(sorted(p)) for p in held_out_puzzles())


def is_held_out(puzzle: tuple[int, ...]) -> bool:
    """Whether ``puzzle`` is one of the standard test puzzles, in any order (``10 6 5 4`` is 900)."""
    return tuple(sorted(puzzle)) in _held_out_multisets()


def validation_puzzles() -> list[tuple[int, ...]]:
    """The validation puzzles, indices 850-899 and 1000-1049, in index order."""
    puzzles = load_puzzles()
    return [puzzles[i] for i in VALIDATION_INDICES]


@functools.lru_cache(maxsize=1)
def _validation_multisets() -> frozenset[tuple[int, ...]]:
    return frozenset(tuple(sorted(p)) for p in validation_puzzles())


def is_validation(puzzle: tuple[int, ...]) -> bool:
    """Whether ``puzzle`` is one of the validation puzzles, in any order (``8 8 6 2`` is 850)."""
    return tuple(sorted(puzzle)) in _validation_multisets()
