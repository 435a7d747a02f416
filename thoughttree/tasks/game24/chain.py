"""The short written arithmetic that decides a three-number state, one pairing at a time.

Three numbers make 24 exactly when, for one way of setting a number ``w`` aside, the other
two (``x``, ``y``) combine into a result that pairs with ``w`` to make 24. A *segment* writes
that test for one pairing as plain arithmetic on one or two numbers:

``13: 11 37 312 24/13 13/24 ; 2 9: 11 7 18 9/2 2/9``

first the numbers that make 24 with ``w`` (its *needs*: ``24 - w`` or ``w - 24``, ``w + 24``,
``24 * w``, ``24 / w``, ``w / 24``), then the results of ``x`` and ``y`` (``x + y``, the
larger minus the smaller, ``x * y``, both quotients). A result that is also a need decides
the state. Every number written is a function of one number or of one pair, so a model that
has learned those pieces can write the segment for a state it has never seen.

- value chain: the segments in a fixed order, each followed by ``=> r`` (the shared number)
  or ``=> no``, stopping at the first hit; the verdict label goes on the next line;
- propose chain: one segment (a sampled pairing), then ``=> `` and a step line: a step that
  makes the shared number when there is one, else any step of that pair.

Only non-negative numbers are involved: the solver's canonical steps never go below zero, and
nothing is lost by that (see :mod:`.solver`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from fractions import Fraction

from thoughttree.tasks.game24.arith import TARGET, format_number, parse_number
from thoughttree.tasks.game24.solver import next_steps
from thoughttree.tasks.game24.steps import State, Step, make_state

ARROW = " => "
NO = "no"
_SEGMENT_RE = re.compile(r"\s*(\S+):[^;|]*;\s*(\S+)\s+(\S+):")


def _unique(values: Iterable[Fraction]) -> list[Fraction]:
    out: list[Fraction] = []
    for v in values:
        if v >= 0 and v not in out:
            out.append(v)
    return out


def needs(w: Fraction) -> list[Fraction]:
    """The non-negative numbers that make 24 with ``w`` in one canonical step, in a fixed order."""
    values = [abs(TARGET - w), w + TARGET, TARGET * w]
    if w != 0:
        values += [TARGET / w, w / TARGET]
    if w == 0:
        values = [TARGET]
    return _unique(values)


def pair_results(x: Fraction, y: Fraction) -> list[Fraction]:
    """The results of the canonical steps on ``x`` and ``y``: sum, difference, product, quotients."""
    small, large = min(x, y), max(x, y)
    values = [small + large, large - small, small * large]
    if small != 0:
        values.append(large / small)
    if large != 0:
        values.append(small / large)
    return _unique(values)


def pairings(state: Iterable[Fraction | int | str]) -> list[tuple[Fraction, Fraction, Fraction]]:
    """``(w, x, y)`` for each distinct way of setting one number of a three-number state aside,
    largest ``w`` first; ``x <= y``."""
    a, b, c = make_state(state)
    out: list[tuple[Fraction, Fraction, Fraction]] = []
    for triple in ((c, a, b), (b, a, c), (a, b, c)):
        if triple not in out:
            out.append(triple)
    return out


def hit(w: Fraction, x: Fraction, y: Fraction) -> Fraction | None:
    """The first result of ``x``, ``y`` that is also a need of ``w`` (None when there is none)."""
    wanted = needs(w)
    return next((r for r in pair_results(x, y) if r in wanted), None)


def segment(w: Fraction, x: Fraction, y: Fraction) -> str:
    """One pairing's arithmetic, e.g. ``'13: 11 37 312 24/13 13/24 ; 2 9: 11 7 18 9/2 2/9'``."""
    return (f"{format_number(w)}: {' '.join(format_number(v) for v in needs(w))} ; "
            f"{format_number(x)} {format_number(y)}: {' '.join(format_number(v) for v in pair_results(x, y))}")


def value_chain(state: Iterable[Fraction | int | str]) -> str:
    """The segments of a three-number state up to the first hit, one line without a newline."""
    parts = []
    for w, x, y in pairings(state):
        shared = hit(w, x, y)
        parts.append(f"{segment(w, x, y)}{ARROW}{NO if shared is None else format_number(shared)}")
        if shared is not None:
            break
    return " | ".join(parts)


def propose_targets(state: Iterable[Fraction | int | str]) -> list[tuple[tuple[Fraction, Fraction, Fraction], list[Step]]]:
    """Per pairing, the steps a propose chain may end with: those making the shared number, else all
    steps of that pair."""
    state = make_state(state)
    steps = next_steps(state)
    out = []
    for w, x, y in pairings(state):
        own = [s for s in steps if sorted((s.a, s.b)) == [x, y]]
        shared = hit(w, x, y)
        good = [s for s in own if s.result == shared]
        out.append(((w, x, y), good or own))
    return out


def propose_chain(pairing: tuple[Fraction, Fraction, Fraction], step: Step) -> str:
    """A propose completion line (no newline): the pairing's segment, then the step."""
    return f"{segment(*pairing)}{ARROW}{step.text()}"


def step_text(line: str) -> str:
    """The step part of a propose line: what follows the last ``=>``, or the line itself."""
    return line.rsplit("=>", 1)[-1].strip()


def chain_states(text: str) -> list[State]:
    """The three-number state each segment of a chain is about (``w`` with ``x`` and ``y``)."""
    states = []
    for line in text.split("\n"):
        for part in line.split("|"):
            match = _SEGMENT_RE.match(part)
            if match is None:
                continue
            try:
                states.append(make_state(parse_number(v) for v in match.groups()))
            except ValueError:
                continue
    return states
