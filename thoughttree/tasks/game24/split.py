"""The held-out split of the bundled model's training data, in one place.

A test puzzle (indices 900-999 by default) is held out together with every state of four or
three numbers reachable from it by any step (negative intermediates included): these are the
states a search asks the model about from the root down to depth 1. Two-number states are
plain arithmetic shared by most puzzles and may appear in training.

:func:`held_out_states` lists the forbidden states; :func:`example_states` reads every state
of four or three numbers that one training example shows, as its prompt or inside its
completion: the ``(left: ...)`` part of each step line (propose, cot) and, for an answer
expression (io, cot), the state after each innermost operation of the expression as written.
:func:`leaked_states` is the check the data generator and the test suite apply.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Sequence
from fractions import Fraction
from functools import lru_cache

from thoughttree.tasks.game24.arith import parse_numbers
from thoughttree.tasks.game24.puzzles import TEST_INDICES, load_puzzles
from thoughttree.tasks.game24.steps import State, make_state

SPLIT_DESCRIPTION = ("strict: no state of four or three numbers reachable from puzzles 900-999 in any "
                     "example, as prompt or inside a completion")
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


def held_out_states(indices: Iterable[int] = TEST_INDICES) -> frozenset[State]:
    """The four-number starting states of the held-out puzzles and every three-number state one
    step from them."""
    puzzles = load_puzzles()
    roots = {make_state(puzzles[i]) for i in indices}
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
