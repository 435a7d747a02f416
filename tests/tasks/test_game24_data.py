"""The bundled model's training data: its roots, and generation is seeded. The properties of the
full data (held-out puzzles stay out, the kinds' balance, every target right, the stricter split
property) are checked in test_game24_split.py, which generates it once."""

from __future__ import annotations

from collections import Counter

import pytest

from thoughttree.tasks.game24 import load_puzzles, make_state
from thoughttree.tasks.game24.dataset import DataConfig, Example, generate_examples, training_roots


def _state_of(example: Example) -> tuple:
    return make_state(example.prompt.split(":", 1)[1].split())


def test_roots_are_all_other_multisets() -> None:
    roots = set(training_roots())
    assert len(roots) == 1820 - 200
    puzzles = load_puzzles()
    assert make_state(puzzles[900]) not in roots and make_state(puzzles[999]) not in roots  # test
    assert make_state(puzzles[850]) not in roots and make_state(puzzles[1049]) not in roots  # validation
    assert make_state(puzzles[849]) in roots and make_state(puzzles[1050]) in roots


def test_generation_is_seeded() -> None:
    # holding out most puzzles keeps this quick; the rule is the same as for the full data
    small = {"kinds": ("io",), "solutions_per_puzzle": 2, "held_out": tuple(range(1200))}
    first = generate_examples(DataConfig(**small))
    assert first == generate_examples(DataConfig(**small))
    assert first != generate_examples(DataConfig(**small, seed=1))
    per_root = Counter(e.prompt for e in first)
    assert len(per_root) > 50 and max(per_root.values()) == 2
    assert not {make_state(p) for p in load_puzzles()[:1200]} & {_state_of(e) for e in first}
    with pytest.raises(ValueError, match="unknown example kinds"):
        DataConfig(kinds=("chat",))
