"""The held-out split of the bundled model's training data, in one place.

Two named ranges of puzzles are held out: :data:`VALIDATION` (indices 850-899 and 1000-1049,
for choosing every default) and :data:`TEST` (900-999, run once per reported setting). A
held-out puzzle is held out together with every state of four or three numbers reachable from
it by any step (negative intermediates included): these are the states a search asks the model
about from the root down to depth 1. Two-number states are plain arithmetic shared by most
puzzles and may appear in training.

:func:`held_out_states` lists the forbidden states (of both ranges by default;
``VALIDATION.held_out_states()`` and ``TEST.held_out_states()`` those of one range);
:func:`example_states` reads every state of four or three numbers that one training example
shows, as its prompt or inside its completion: the ``(left: ...)`` part of each step line
(propose, cot) and, for an answer expression (io, cot), the state after each innermost operation
of the expression as written.
:func:`leaked_states` is the check the data generator and the test suite apply.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from pathlib import Path

from thoughttree.tasks.game24.arith import parse_numbers
from thoughttree.tasks.game24.puzzles import TEST_INDICES, VALIDATION_INDICES, load_puzzles
from thoughttree.tasks.game24.steps import State, make_state


@dataclass(frozen=True)
class PuzzleRange:
    """A named range of held-out puzzles: ``indices`` into ``24.csv``, ``label`` as people write it."""

    name: str
    label: str
    indices: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.indices or len(set(self.indices)) != len(self.indices):
            raise ValueError(f"range {self.name!r}: indices must be distinct and non-empty")

    def puzzles(self) -> list[tuple[int, ...]]:
        """The range's puzzles in index order."""
        all_puzzles = load_puzzles()
        return [all_puzzles[i] for i in self.indices]

    def contains(self, puzzle: Sequence[int]) -> bool:
        """Whether ``puzzle`` (in any order) is one of the range's puzzles."""
        return make_state(puzzle) in _roots(self.indices)

    def held_out_states(self) -> frozenset[State]:
        """The range's starting states and every three-number state one step from them."""
        return held_out_states(self.indices)


VALIDATION = PuzzleRange("validation", "850-899 and 1000-1049", tuple(VALIDATION_INDICES))
TEST = PuzzleRange("test", "900-999", tuple(TEST_INDICES))
RANGES: dict[str, PuzzleRange] = {"val": VALIDATION, "test": TEST}
HELD_OUT_INDICES: tuple[int, ...] = VALIDATION.indices + TEST.indices
SPLIT_DESCRIPTION = (f"strict, validation and test: no state of four or three numbers reachable from puzzles "
                     f"{VALIDATION.label} (validation) or {TEST.label} (test) in any example, as prompt or inside "
                     "a completion")


def range_of(puzzle: Sequence[int]) -> PuzzleRange | None:
    """The held-out range that ``puzzle`` (in any order) belongs to, or None for a training puzzle."""
    return next((r for r in (VALIDATION, TEST) if r.contains(puzzle)), None)


def model_held_out(model_dir: str | Path) -> tuple[int, ...] | None:
    """The puzzle indices held out of a model's training data, read from its ``training.json``;
    None for a model without one (nothing is known of its data). A ``training.json`` written
    before the validation range existed records no ``held_out`` and held out the test range only.
    """
    path = Path(model_dir) / "training.json"
    if not path.is_file():
        return None
    record = json.loads(path.read_text())
    held = record.get("held_out")
    if held is None:
        return TEST.indices
    if not isinstance(held, dict) or not all(
            isinstance(v, list) and all(isinstance(i, int) for i in v) for v in held.values()):
        raise ValueError(f"{path}: 'held_out' must map range names to lists of puzzle indices, got {held!r}")
    return tuple(sorted({i for v in held.values() for i in v}))


@lru_cache(maxsize=8)
def _roots(indices: tuple[int, ...]) -> frozenset[State]:
    puzzles = load_puzzles()
    return frozenset(make_state(puzzles[i]) for i in indices)


_LEFT_RE = re.compile(r"\(left: ([^)]*)\)")
_OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
        ast.Div: lambda a, b: a / b if b != 0 else None}


def _successors(state: State) -> set[State]:
    """Every state one step on, with all orders, signs and both divisions (the solver's rule)."""
    out: set[State] = set()
    for i in range(len(state)):
        for j in range(i + 1, len(state)):
            a, b = state[i], state[j]
            rest = state[:i] + state[i + 1:j] + state[j + 1:]
            results = {a + b, a - b, b - a, a * b}
            results |= {a / b} if b != 0 else set()
            results |= {b / a} if a != 0 else set()
            out |= {tuple(sorted((*rest, r))) for r in results}
    return out


def held_out_states(indices: Iterable[int] = HELD_OUT_INDICES) -> frozenset[State]:
    """The four-number starting states of the held-out puzzles (validation and test by default)
    and every three-number state one step from them."""
    return _held_out_states(tuple(sorted(set(indices))))


@lru_cache(maxsize=8)
def _held_out_states(indices: tuple[int, ...]) -> frozenset[State]:
    roots = _roots(indices)
    return frozenset(roots | {s for root in roots for s in _successors(root)})


@lru_cache(maxsize=1 << 17)
def _state_of_text(numbers: str) -> State:
    return make_state(parse_numbers(numbers))


@lru_cache(maxsize=1 << 16)
def _expression_states(expression: str) -> list[State]:
    """States of three or more numbers after each innermost operation of ``expression``."""
    try:
        tree = ast.parse(expression.strip(), mode="eval").body
    except SyntaxError:
        return []
    leaves = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, int)]
    states = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.BinOp) and type(node.op) in _OPS and isinstance(node.left, ast.Constant)
                and isinstance(node.right, ast.Constant)):
            a, b = Fraction(node.left.value), Fraction(node.right.value)  # type: ignore[arg-type]  # numbers
            value = _OPS[type(node.op)](a, b)
            rest = list(leaves)
            for used in (node.left.value, node.right.value):
                if used in rest:
                    rest.remove(used)  # type: ignore[arg-type]  # a number, as the leaves
            if value is not None and len(rest) == len(leaves) - 2:
                states.append(make_state([*rest, value]))
    return [s for s in states if len(s) >= 3]


def example_states(prompt: str, completion: str) -> list[State]:
    """Every state of three or four numbers in one training example (prompt and completion)."""
    states = [_state_of_text(prompt.split(":", 1)[1].strip())]
    states += [_state_of_text(m) for m in _LEFT_RE.findall(completion)]
    for line in completion.split("\n"):
        line = line.strip()
        if line.startswith("answer:"):
            line = line[len("answer:"):]
        if line.endswith("= 24") and "(left:" not in line:
            states += _expression_states(line[:-len("= 24")].strip())
    return [s for s in states if len(s) >= 3]


def leaked_states(prompt: str, completion: str, held_out: frozenset[State]) -> list[State]:
    """The held-out states that this example shows (empty for a clean example)."""
    return [s for s in example_states(prompt, completion) if s in held_out]


def is_clean_path(states: Sequence[State], held_out: frozenset[State]) -> bool:
    return not any(len(s) >= 3 and s in held_out for s in states)
