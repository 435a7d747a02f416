"""Game of 24 prompt formats: build/parse round trips, value labels, few-shot prompts."""

from __future__ import annotations

import pytest

from thoughttree.tasks.game24 import (
    VALUE_LABELS, VALUE_OF_LABEL, check_answer, cot_prompt, few_shot_cot_prompt,
    few_shot_io_prompt, few_shot_propose_prompt, few_shot_value_prompt, io_prompt, load_puzzles,
    make_state, next_steps, parse_cot, parse_io, parse_propose, parse_puzzle, parse_value,
    path_answer, propose_prompt, solve, validate_step, value_label, value_prompt,
)
from thoughttree.tasks.game24.formats import cot_completion, io_completion, propose_completion, value_completion
from thoughttree.tasks.game24.prompts import EXAMPLES, PROPOSE_EXAMPLE


def test_prompts_are_one_line_with_sorted_numbers() -> None:
    assert propose_prompt((10, 4, 6, 5)) == "propose: 4 5 6 10\n"
    assert value_prompt(("5/3", 2, 7)) == "value: 5/3 2 7\n"
    assert io_prompt([4, 5, 6, 10]) == "io: 4 5 6 10\n"
    assert cot_prompt([4, 5, 6, 10]) == "cot: 4 5 6 10\n"


def test_propose_round_trip() -> None:
    state = make_state((4, 5, 6, 10))
    for step in next_steps(state):
        completion = propose_completion(step)
        assert completion.endswith("\n") and completion.count("\n") == 1
        check = parse_propose(completion + "garbage after the line", state)
        assert check.valid and check.step == step and check.state == step.left
    assert not parse_propose("4 + 5 = 10 (left: 6 10 10)\n", state).valid
    assert not parse_propose("", state).valid


def test_value_round_trip_and_labels() -> None:
    for label in VALUE_LABELS:
        assert parse_value(value_completion(label)) == label
    assert parse_value("maybe\n") is None
    assert parse_value("") is None
    with pytest.raises(ValueError):
        value_completion("maybe")
    assert value_label((24,)) == "sure"
    assert value_label((23,)) == "impossible"
    assert value_label((4, 6)) == "sure"
    assert value_label((11, 12)) == "impossible"
    assert value_label((6, 8, 9)) == "likely"
    assert value_label((5, 7, 8)) == "impossible"
    assert value_label((4, 5, 6, 10)) == "likely"
    assert value_label((1, 1, 1, 1)) == "impossible"
    assert VALUE_OF_LABEL["sure"] > VALUE_OF_LABEL["likely"] > VALUE_OF_LABEL["impossible"] > 0


def test_io_round_trip() -> None:
    puzzle = (4, 5, 6, 10)
    answer = parse_io(io_completion("4 + 5 * (10 - 6)") + "more text")
    assert answer == "4 + 5 * (10 - 6) = 24"
    assert check_answer(answer, puzzle).correct


def test_cot_round_trip() -> None:
    puzzle = (4, 5, 6, 10)
    path = solve(puzzle)
    assert path is not None
    answer = path_answer(puzzle, path)
    completion = cot_completion(path, answer.removesuffix(" = 24"))
    assert completion.count("\n") == 4
    parsed = parse_cot(completion)
    assert parsed.steps == tuple(step.text() for step in path)
    assert parsed.answer == answer and check_answer(parsed.answer, puzzle).correct
    assert parse_cot("4 + 5 = 9 (left: 6 9 10)\n").answer is None
    assert parse_cot("Steps...\nAnswer: 4 + 5 * (10 - 6) = 24\n").answer == "4 + 5 * (10 - 6) = 24"


def test_path_answer_for_every_training_solution_kind() -> None:
    for puzzle in load_puzzles()[::50]:
        path = solve(puzzle)
        assert path is not None
        texts = [step.text() for step in path]
        assert check_answer(path_answer(puzzle, texts), puzzle).correct


def test_few_shot_examples_are_correct_and_not_test_puzzles() -> None:
    puzzles = load_puzzles()
    test_range = {puzzles[i] for i in range(900, 1000)}
    for puzzle_text, steps, expression in EXAMPLES:
        puzzle = parse_puzzle(puzzle_text)
        assert puzzle in puzzles and puzzle not in test_range
        assert check_answer(f"{expression} = 24", puzzle).correct
        assert check_answer(path_answer(puzzle, steps), puzzle).correct
    for prompt in (few_shot_io_prompt((4, 5, 6, 10)), few_shot_cot_prompt((4, 5, 6, 10))):
        assert "4 9 10 13" not in prompt
        assert prompt.endswith("4 5 6 10\n") or prompt.endswith("Steps:\n")
        assert prompt.count("Input:") == 6
    lines = PROPOSE_EXAMPLE.splitlines()
    state = make_state(lines[0].removeprefix("Numbers: ").split())
    assert all(validate_step(state, line).valid for line in lines[2:])
    assert few_shot_propose_prompt((1, 2, 3)).endswith("Numbers: 1 2 3\nPossible next steps:\n")
    assert few_shot_value_prompt((4, 6)).endswith("Numbers: 4 6\n")
