"""Named Game of 24 puzzle ranges for the benchmarks: ``validation``, ``test`` or ``A-B`` (inclusive).

``test`` is :data:`thoughttree.tasks.game24.puzzles.TEST_INDICES`. ``validation`` is the split
module's ``VALIDATION_INDICES`` when it defines one (the puzzles held out of training besides
the test range), else puzzles 800-899.
"""

from __future__ import annotations

import importlib

from thoughttree.tasks.game24.puzzles import NUM_PUZZLES, TEST_INDICES

DEFAULT_VALIDATION = range(800, 900)


def validation_indices() -> tuple[int, ...]:
    for module in ("thoughttree.tasks.game24.split", "thoughttree.tasks.game24.puzzles"):
        found = getattr(importlib.import_module(module), "VALIDATION_INDICES", None)
        if found is not None:
            return tuple(found)
    return tuple(DEFAULT_VALIDATION)


def puzzle_range(spec: str, limit: int | None = None) -> tuple[int, ...]:
    """The dataset indices ``spec`` names (the first ``limit`` of them when given)."""
    if spec == "validation":
        out = validation_indices()
    elif spec == "test":
        out = tuple(TEST_INDICES)
    else:
        try:
            lo, hi = (int(x) for x in spec.split("-"))
        except ValueError:
            raise ValueError(f"a puzzle range is 'validation', 'test' or A-B (inclusive), got {spec!r}") from None
        if not 0 <= lo <= hi < NUM_PUZZLES:
            raise ValueError(f"puzzle range {spec}: indices run 0..{NUM_PUZZLES - 1}")
        out = tuple(range(lo, hi + 1))
    return out[:limit] if limit is not None else out
