"""The held-out split: no four- or three-number state of a validation or test puzzle in any training example.

Also every other check of the full training data (generated once, about a minute of CPU): the
held-out starting states never appear, the kinds and their balance, every target is correct."""

from __future__ import annotations

import csv
import io
import json
import random
from collections import Counter
from fractions import Fraction
from pathlib import Path

import pytest

from thoughttree.tasks.game24 import (
    check_answer, held_out_puzzles, is_solvable, load_puzzles, make_state, next_steps, parse_cot, parse_io,
    parse_propose, parse_step, parse_value, path_answer, value_label,
)
from thoughttree.tasks.game24.dataset import DataConfig, Example, data_sha256, training_roots, training_states
from thoughttree.tasks.game24.formats import cot_completion, io_completion, propose_completion, value_prompt
from thoughttree.tasks.game24.puzzles import is_held_out, is_validation, validation_puzzles
from thoughttree.tasks.game24.solver import solution_paths
from thoughttree.tasks.game24.split import (
    HELD_OUT_INDICES, RANGES, SPLIT_DESCRIPTION, TEST, VALIDATION, PuzzleRange, example_states, held_out_states,
    leaked_states, model_held_out, range_of,
)
from thoughttree.tasks.game24.steps import compose_expression

MODEL = Path(__file__).resolve().parents[2] / "thoughttree" / "models" / "game24"
PUZZLE_CSV = MODEL.parents[1] / "tasks" / "game24" / "data" / "24.csv"


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


def _forbidden_of(indices: tuple[int, ...]) -> frozenset:
    puzzles = load_puzzles()
    roots = {make_state(puzzles[i]) for i in indices}
    return frozenset(roots | {c for r in roots for c in _all_children(r)})


def _state_of(example: Example) -> tuple:
    return make_state(example.prompt.split(":", 1)[1].split())


@pytest.fixture(scope="module")
def forbidden_test() -> frozenset:
    return _forbidden_of(tuple(range(900, 1000)))


@pytest.fixture(scope="module")
def forbidden_validation() -> frozenset:
    return _forbidden_of((*range(850, 900), *range(1000, 1050)))


@pytest.fixture(scope="module")
def forbidden(forbidden_test: frozenset, forbidden_validation: frozenset) -> frozenset:
    return forbidden_test | forbidden_validation


@pytest.fixture(scope="module")
def examples(game24_examples: list[Example]) -> list[Example]:
    return game24_examples


def test_held_out_states_are_the_validation_and_test_puzzles_and_their_children(
        forbidden: frozenset, forbidden_test: frozenset, forbidden_validation: frozenset) -> None:
    assert TEST.held_out_states() == forbidden_test
    assert VALIDATION.held_out_states() == forbidden_validation
    assert held_out_states() == forbidden == held_out_states(HELD_OUT_INDICES)
    for states in (forbidden_test, forbidden_validation):
        sizes = {n: sum(len(s) == n for s in states) for n in (3, 4)}
        assert sizes[4] == 100 and sizes[3] >= 1760
    for held_out in RANGES.values():
        assert all(step.left in forbidden for p in held_out.puzzles() for step in next_steps(p))


def test_validation_and_test_ranges_are_named_disjoint_and_of_one_difficulty() -> None:
    assert RANGES == {"val": VALIDATION, "test": TEST}
    assert TEST.indices == tuple(range(900, 1000))
    assert VALIDATION.indices == (*range(850, 900), *range(1000, 1050))
    assert not set(VALIDATION.indices) & set(TEST.indices)
    # disjoint as puzzles too (24.csv holds each multiset once), so no validation puzzle is a test puzzle
    validation, test = ({make_state(p) for p in r.puzzles()} for r in (VALIDATION, TEST))
    assert len(validation) == len(test) == 100 and not validation & test
    # the 50 puzzles either side of the test range: 24.csv is ordered by human solving time
    rows = list(csv.DictReader(io.StringIO(PUZZLE_CSV.read_text())))
    rate = {r: sum(float(rows[i]["Solved rate"].rstrip("%")) for i in r.indices) / 100 for r in (VALIDATION, TEST)}
    assert abs(rate[VALIDATION] - rate[TEST]) < 0.5
    puzzles = load_puzzles()
    assert range_of(puzzles[850][::-1]) == VALIDATION and range_of(puzzles[1049]) == VALIDATION
    assert range_of(puzzles[900]) == TEST and range_of(puzzles[899 - 50]) is None
    assert all(is_validation(p) and not is_held_out(p) for p in VALIDATION.puzzles())
    assert all(is_held_out(p) and not is_validation(p) for p in TEST.puzzles())
    assert "850-899 and 1000-1049" in SPLIT_DESCRIPTION and "900-999" in SPLIT_DESCRIPTION
    with pytest.raises(ValueError, match="distinct"):
        PuzzleRange("broken", "1, 1", (1, 1))


def test_model_held_out_reads_the_ranges_from_training_json(tmp_path: Path) -> None:
    assert model_held_out(tmp_path) is None
    (tmp_path / "training.json").write_text(json.dumps({"split": "strict: puzzles 900-999"}))
    assert model_held_out(tmp_path) == TEST.indices  # written before the validation range existed
    (tmp_path / "training.json").write_text(json.dumps({"held_out": {"test": [901, 900], "validation": [3]}}))
    assert model_held_out(tmp_path) == (3, 900, 901)
    (tmp_path / "training.json").write_text(json.dumps({"held_out": [900]}))
    with pytest.raises(ValueError, match="must map range names"):
        model_held_out(tmp_path)


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
    assert len(states[4]) == len(training_roots()) == 1820 - 200
    shared = {s for r in forbidden if len(r) == 3 for s in _all_children(r)} & set(states[2])
    assert shared, "two-number states may be shared with test puzzles"
    assert make_state([Fraction(1, 2), 12]) in set(states[2])


def test_propose_targets_are_every_distinct_valid_step(examples: list[Example]) -> None:
    state = make_state([1, 2, 3, 4])
    targets = {e.completion for e in examples if e.kind == "propose" and e.prompt == "propose: 1 2 3 4\n"}
    assert targets == {propose_completion(s) for s in next_steps(state) if s.left not in held_out_states()}


def test_bundled_model_was_trained_on_this_data(examples: list[Example]) -> None:
    recorded = json.loads((MODEL / "training.json").read_text())
    assert recorded["split"] == SPLIT_DESCRIPTION
    assert recorded["held_out"] == {r.name: list(r.indices) for r in RANGES.values()}
    assert recorded["data_sha256"] == data_sha256(examples)


def test_held_out_starting_states_never_appear(examples: list[Example]) -> None:
    held_out = {make_state(p) for p in held_out_puzzles() + validation_puzzles()}
    assert len(held_out) == 200
    four_number_states = {_state_of(e) for e in examples if len(_state_of(e)) == 4}
    assert four_number_states, "expected propose/value/io/cot prompts on four numbers"
    assert not four_number_states & held_out


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
