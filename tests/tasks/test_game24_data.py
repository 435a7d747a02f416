"""The bundled model's training data: held-out puzzles stay out, every target is right (the
stricter split property is in test_game24_split.py)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from thoughttree.tasks.game24 import (
    check_answer, held_out_puzzles, is_solvable, load_puzzles, make_state, parse_cot, parse_io,
    parse_propose, parse_value, path_answer, value_label,
)
from thoughttree.tasks.game24.puzzles import validation_puzzles
from thoughttree.tasks.game24.dataset import DataConfig, Example, generate_examples, training_roots, training_states


def _state_of(example: Example) -> tuple:
    return make_state(example.prompt.split(":", 1)[1].split())


@pytest.fixture(scope="module")
def examples(game24_examples: list[Example]) -> list[Example]:
    return game24_examples


def test_held_out_starting_states_never_appear(examples: list[Example]) -> None:
    held_out = {make_state(p) for p in held_out_puzzles() + validation_puzzles()}
    assert len(held_out) == 200
    four_number_states = {_state_of(e) for e in examples if len(_state_of(e)) == 4}
    assert four_number_states, "expected propose/value/io/cot prompts on four numbers"
    assert not four_number_states & held_out


def test_roots_are_all_other_multisets() -> None:
    roots = set(training_roots())
    assert len(roots) == 1820 - 200
    puzzles = load_puzzles()
    assert make_state(puzzles[900]) not in roots and make_state(puzzles[999]) not in roots  # test
    assert make_state(puzzles[850]) not in roots and make_state(puzzles[1049]) not in roots  # validation
    assert make_state(puzzles[849]) in roots and make_state(puzzles[1050]) in roots


def test_kinds_and_balance(examples: list[Example]) -> None:
    counts = Counter(e.kind for e in examples)
    assert set(counts) == {"propose", "value", "io", "cot"}
    # 833 roots have a solution path that avoids held-out states; 654 of them also have an
    # answer expression whose written grouping avoids them
    per_root = Counter(e.prompt for e in examples if e.kind == "cot")
    assert counts["io"] == counts["cot"] and len(per_root) == 654
    assert max(per_root.values()) == DataConfig().solutions_per_puzzle
    # value labels of three-number states come at their true frequency (calibration)
    three = [e for e in examples if e.kind == "value" and len(_state_of(e)) == 3]
    states = training_states()[3]
    assert len(three) == 2 * len(states)
    likely = sum(e.completion == "likely\n" for e in three) / len(three)
    assert likely == pytest.approx(sum(is_solvable(s) for s in states) / len(states))
    labels = Counter(e.completion for e in examples if e.kind == "value")
    assert labels["sure\n"] > 1000 and labels["likely\n"] > 1000


def test_every_target_is_correct(examples: list[Example]) -> None:
    rng = random.Random(0)
    for e in rng.sample(examples, 4000):
        state = _state_of(e)
        if e.kind == "propose":
            assert parse_propose(e.completion, state).valid, e
        elif e.kind == "value":
            assert parse_value(e.completion) == value_label(state), e
        elif e.kind == "io":
            assert check_answer(parse_io(e.completion), state).correct, e
        else:
            parsed = parse_cot(e.completion)
            assert len(parsed.steps) == 3 and parsed.answer is not None
            assert check_answer(parsed.answer, state).correct, e
            assert path_answer(state, parsed.steps) == parsed.answer


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
