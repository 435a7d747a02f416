"""The held-out split: no four- or three-number state of a test puzzle in any training example."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

from thoughttree.tasks.game24 import held_out_puzzles, load_puzzles, make_state, next_steps, parse_cot, parse_step
from thoughttree.tasks.game24.dataset import Example, training_roots, training_states
from thoughttree.tasks.game24.formats import cot_completion, io_completion, propose_completion, value_prompt
from thoughttree.tasks.game24.solver import solution_paths
from thoughttree.tasks.game24.split import example_states, held_out_states, leaked_states
from thoughttree.tasks.game24.steps import compose_expression

MODEL = Path(__file__).resolve().parents[2] / "thoughttree" / "models" / "game24"


def _all_children(state: tuple) -> set[tuple]:
    """Every state one step on, computed independently of the split module (all orders and signs)."""
    out = set()
    for i, a in enumerate(state):
        for j, b in enumerate(state):
            if i == j:
                continue
            rest = [x for k, x in enumerate(state) if k not in (i, j)]
            for value in (a + b, a - b, a * b) + ((a / b,) if b else ()):
                out.add(make_state([*rest, value]))
    return out


@pytest.fixture(scope="module")
def forbidden() -> frozenset:
    roots = {make_state(p) for p in held_out_puzzles()}
    return frozenset(roots | {c for r in roots for c in _all_children(r)})


@pytest.fixture(scope="module")
def examples(game24_examples: list[Example]) -> list[Example]:
    return game24_examples


def test_held_out_states_are_the_test_puzzles_and_their_children(forbidden: frozenset) -> None:
    assert held_out_states() == forbidden
    sizes = {n: sum(len(s) == n for s in forbidden) for n in (3, 4)}
    assert sizes[4] == 100 and sizes[3] >= 1760
    assert all(step.left in forbidden for p in held_out_puzzles() for step in next_steps(p))


def test_example_states_finds_states_in_prompts_and_completions(forbidden: frozenset) -> None:
    puzzle = load_puzzles()[900]  # 4 5 6 10
    step = next_steps(puzzle)[0]
    path = solution_paths(puzzle)[0]
    assert leaked_states("propose: 4 5 6 10\n", "x\n", forbidden) == [make_state(puzzle)]
    assert step.left in leaked_states("propose: 1 1 1 1\n", propose_completion(step), forbidden)
    assert leaked_states(value_prompt(step.left), "likely\n", forbidden) == [step.left]
    cot = cot_completion(path, compose_expression(puzzle, path))
    assert path[0].left in leaked_states("cot: 1 1 1 1\n", cot, forbidden)
    # an answer expression shows the state after each innermost operation as written
    assert make_state([9, 6, 10]) in example_states("io: 1 1 1 1\n", "(4 + 5) * 6 - 10 = 24\n")
    assert make_state([5, 6, 6]) in example_states("io: 1 1 1 1\n", io_completion("5 * (10 - 4) - 6"))
    states = example_states("io: 1 2 3 4\n", io_completion("1 * 2 * 3 * 4"))
    assert states == [make_state([1, 2, 3, 4]), make_state([2, 3, 4])]
    assert leaked_states("io: 1 2 3 4\n", io_completion("1 * 2 * 3 * 4"), forbidden) == [
        s for s in states if s in forbidden]
    assert example_states("value: 3 8\n", "sure\n") == []


def test_no_held_out_state_in_any_training_example(examples: list[Example], forbidden: frozenset) -> None:
    assert len(examples) > 300_000
    for e in set(examples):
        assert not leaked_states(e.prompt, e.completion, forbidden), e
        # the same property read a second way: each step line parsed as a step
        for line in e.completion.split("\n"):
            if "(left:" in line:
                assert parse_step(line.strip()).left not in forbidden, e
        if e.kind == "cot":
            assert all(parse_step(s).left not in forbidden for s in parse_cot(e.completion).steps), e


def test_training_states_avoid_the_split_and_keep_two_number_states(forbidden: frozenset) -> None:
    states = training_states()
    assert not set(states[4]) & forbidden and not set(states[3]) & forbidden
    assert len(states[4]) == len(training_roots()) == 1720
    shared = {s for r in forbidden if len(r) == 3 for s in _all_children(r)} & set(states[2])
    assert shared, "two-number states may be shared with test puzzles"
    assert make_state([Fraction(1, 2), 12]) in set(states[2])


def test_propose_targets_are_every_distinct_valid_step(examples: list[Example]) -> None:
    state = make_state([1, 2, 3, 4])
    targets = {e.completion for e in examples if e.kind == "propose" and e.prompt == "propose: 1 2 3 4\n"}
    assert targets == {propose_completion(s) for s in next_steps(state) if s.left not in held_out_states()}


def test_bundled_model_was_trained_on_this_data(examples: list[Example]) -> None:
    info = MODEL / "training.json"
    if not info.is_file():
        pytest.skip("the bundled model predates the strict split (its model card says so)")
    import importlib.util
    spec = importlib.util.spec_from_file_location("train", MODEL.parents[2] / "training" / "game24" / "train.py")
    assert spec is not None and spec.loader is not None
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)
    recorded = json.loads(info.read_text())
    assert recorded["data_sha256"] == train.data_sha256(examples)
    assert recorded["split"].startswith("strict")
