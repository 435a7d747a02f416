"""Exhaustive Game of 24 solver over exact rationals.

Reachability tries every ordered pair and every operation (negative results included), so it
is the ground truth for any state. The *canonical* step list that proposals, training data and
solutions use leaves out steps with a negative result: ``a - b`` is listed only for
``a >= b``. Nothing is lost for states of non-negative numbers, because replacing each
intermediate value by its absolute value (and swapping + and - where signs flip) turns any
solution into one without negative intermediates. Division is listed both ways (``1 / 5`` is
needed for ``1 5 5 5``).
"""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction
from functools import lru_cache

from thoughttree.tasks.game24.arith import TARGET
from thoughttree.tasks.game24.steps import State, Step, make_state


def _all_results(a: Fraction, b: Fraction) -> set[Fraction]:
    results = {a + b, a - b, b - a, a * b}
    if b != 0:
        results.add(a / b)
    if a != 0:
        results.add(b / a)
    return results


# The solver's functions are memoised on the canonical (sorted) state: pure functions of
# their argument, shared by all callers, bounded so a long-running process cannot grow them
# without limit.
@lru_cache(maxsize=1 << 20)
def _reachable(state: State) -> bool:
    if len(state) == 1:
        return state[0] == TARGET
    for i in range(len(state)):
        for j in range(i + 1, len(state)):
            rest = state[:i] + state[i + 1:j] + state[j + 1:]
            for value in _all_results(state[i], state[j]):
                if _reachable(tuple(sorted((*rest, value)))):
                    return True
    return False


def is_solvable(numbers: Iterable[Fraction | int | str]) -> bool:
    """Can the numbers (1-4 of them, each used once) make exactly 24?"""
    return _reachable(make_state(numbers))


def next_steps(numbers: Iterable[Fraction | int | str]) -> list[Step]:
    """All distinct canonical steps from a state, in a fixed order.

    Canonical: ``+`` and ``*`` once per pair (smaller operand first), ``-`` as larger minus
    smaller, ``/`` both ways with a non-zero divisor. Equal numbers give no duplicate steps.
    """
    return list(_next_steps(make_state(numbers)))


@lru_cache(maxsize=1 << 18)
def _next_steps(state: State) -> tuple[Step, ...]:
    seen: set[tuple[Fraction, str, Fraction]] = set()
    steps: list[Step] = []
    for i in range(len(state)):
        for j in range(i + 1, len(state)):
            small, large = state[i], state[j]  # state is sorted, so small <= large
            rest = state[:i] + state[i + 1:j] + state[j + 1:]
            candidates = [(small, "+", large, small + large), (large, "-", small, large - small),
                          (small, "*", large, small * large)]
            if small != 0:
                candidates.append((large, "/", small, large / small))
            if large != 0 and large != small:
                candidates.append((small, "/", large, small / large))
            for a, op, b, result in candidates:
                if (a, op, b) not in seen:
                    seen.add((a, op, b))
                    steps.append(Step(a, op, b, result, tuple(sorted((*rest, result)))))
    return tuple(steps)


def good_steps(numbers: Iterable[Fraction | int | str]) -> list[Step]:
    """The canonical steps after which 24 is still reachable."""
    return [s for s in _next_steps(make_state(numbers)) if _reachable(s.left)]


def solution_paths(numbers: Iterable[Fraction | int | str]) -> list[tuple[Step, ...]]:
    """Every canonical step sequence from the state down to the single number 24."""
    state = make_state(numbers)
    if len(state) == 1:
        return [()] if state[0] == TARGET else []
    paths: list[tuple[Step, ...]] = []
    for step in good_steps(state):
        paths.extend((step, *rest) for rest in solution_paths(step.left))
    return paths


def solve(numbers: Iterable[Fraction | int | str]) -> tuple[Step, ...] | None:
    """One solution path (the first in :func:`solution_paths` order), or None if unsolvable."""
    state = make_state(numbers)
    if len(state) == 1:
        return () if state[0] == TARGET else None
    for step in good_steps(state):
        rest = solve(step.left)
        if rest is not None:
            return (step, *rest)
    return None
