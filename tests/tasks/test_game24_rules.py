"""Game of 24 rules: puzzles, the exact checker, the solver and step lines."""

from __future__ import annotations

import hashlib
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from thoughttree.tasks.game24 import (
    NUM_PUZZLES, TEST_INDICES, ExpressionError, check_answer, compose_expression,
    evaluate_expression, format_number, get_puzzle, good_steps, held_out_puzzles, is_solvable,
    load_puzzles, make_state, next_steps, parse_number, parse_puzzle, parse_step, solution_paths,
    solve, validate_step,
)

DATA = Path(__file__).resolve().parents[2] / "thoughttree" / "tasks" / "game24" / "data"


def test_bundled_csv_is_the_upstream_file_with_its_notice() -> None:
    digest = hashlib.sha256((DATA / "24.csv").read_bytes()).hexdigest()
    assert digest == "b9f12b3e36d987a3c714c4cef17d89a137d7c59da26532fcfb93b4821d8111b5"
    notice = (DATA / "LICENSE").read_text()
    assert "MIT License" in notice and "Copyright (c) 2023 Shunyu Yao" in notice


def test_puzzle_list() -> None:
    puzzles = load_puzzles()
    assert len(puzzles) == NUM_PUZZLES == 1362
    assert puzzles[0] == (1, 1, 4, 6)
    assert get_puzzle(900) == (4, 5, 6, 10)
    assert get_puzzle(999) == (4, 9, 10, 13)
    assert held_out_puzzles() == [puzzles[i] for i in range(900, 1000)]
    assert list(TEST_INDICES) == list(range(900, 1000))
    assert len(set(puzzles)) == len(puzzles)


@pytest.mark.parametrize("index", [-1, 1362, 10**6])
def test_out_of_range_index(index: int) -> None:
    with pytest.raises(IndexError, match="0..1361"):
        get_puzzle(index)


def test_non_int_index() -> None:
    with pytest.raises(TypeError):
        get_puzzle("3")  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["4 5 6", "4 5 6 10 11", "4 five 6 10", "4 5 6 1.5", "4 5 6 3/2", ""])
def test_malformed_puzzle(text: str) -> None:
    with pytest.raises(ValueError, match="puzzle"):
        parse_puzzle(text)


def test_parse_puzzle() -> None:
    assert parse_puzzle(" 4  5 6\t10 ") == (4, 5, 6, 10)
    assert parse_puzzle("0 4 6 1") == (0, 4, 6, 1)


def test_negative_puzzle_numbers_are_refused() -> None:
    # an answer to "-1 1 4 6" would have to write -1, which the checker cannot read
    assert not check_answer("-1 + 1 + 4 * 6 = 24", (-1, 1, 4, 6)).correct
    with pytest.raises(ValueError, match="'-1' is negative"):
        parse_puzzle("-1 1 4 6")


@pytest.mark.parametrize("answer,numbers", [
    ("6 / (1 - 3 / 4)", (1, 3, 4, 6)),
    ("4 + 5 * (10 - 6) = 24", (4, 5, 6, 10)),
    ("answer: (10 - 6) * 5 + 4 = 24", (4, 5, 6, 10)),
    ("8 / (3 - 8 / 3)", (3, 3, 8, 8)),
    ("5 * (5 - 1 / 5)", (1, 5, 5, 5)),
    ("(13 - 9) * (10 - 4)", (4, 9, 10, 13)),
])
def test_checker_accepts_solutions(answer: str, numbers: tuple[int, ...]) -> None:
    result = check_answer(answer, numbers)
    assert result.correct, result.reason
    assert result.reason == "ok" and result.value == 24


@pytest.mark.parametrize("answer,numbers,reason", [
    ("4 * 6", (4, 5, 6, 10), "missing 5 10"),                       # missing numbers
    ("4 * 6 * (10 - 10 + 1)", (4, 5, 6, 10), "not allowed or reused"),  # reused / foreign
    ("(4 + 4) * (10 - 6 - 1) ", (4, 5, 6, 10), "reused"),
    ("4 + 5 + 6 + 10", (4, 5, 6, 10), "evaluates to 25"),           # not 24
    ("8 / (3 - 3) + 8", (3, 3, 8, 8), "division by zero"),
    ("4 * (5 + 6", (4, 5, 6, 10), "ends too early"),
    ("4 * 5 + 6 ) - 10", (4, 5, 6, 10), "after a complete expression"),
    ("4 + 5 * (10 - 6) = 25", (4, 5, 6, 10), "right-hand side"),
    ("", (4, 5, 6, 10), "ends too early"),
    ("I think the answer is 24", (4, 5, 6, 10), "unexpected character"),
])
def test_checker_rejects_near_misses(answer: str, numbers: tuple[int, ...], reason: str) -> None:
    result = check_answer(answer, numbers)
    assert not result.correct
    assert reason in result.reason


@pytest.mark.parametrize("text", [
    "__import__('os').system('true')", "2 ** 3", "-4 + 28", "4.0 * 6", "abs(24)", "1e1",
    "[24][0]", "24 if 1 else 0", "(4 * 6", "4 * 6)", "4 // 6", "x", "4 6", "4 * (5 +) 6",
])
def test_parser_refuses_anything_but_arithmetic(text: str) -> None:
    with pytest.raises(ExpressionError):
        evaluate_expression(text)


def test_parser_limits_length() -> None:
    with pytest.raises(ExpressionError, match="longer"):
        evaluate_expression("(" * 400 + "1" + ")" * 400)


def test_parser_limits_nesting_and_reads_ascii_digits_only() -> None:
    assert evaluate_expression("(" * 64 + "24" + ")" * 64).value == 24
    with pytest.raises(ExpressionError, match="nested deeper than 64"):
        evaluate_expression("(" * 65 + "24" + ")" * 65)

    def deep(levels: int) -> None:  # an answer checked deep in a caller's stack gets the same clear error
        if levels:
            return deep(levels - 1)
        evaluate_expression("(" * 250 + "24" + ")" * 250)

    with pytest.raises(ExpressionError, match="nested"):
        deep(sys.getrecursionlimit() - 400)
    with pytest.raises(ExpressionError):
        evaluate_expression("\u0664 * 6")  # an Arabic-Indic four is not the number 4
    with pytest.raises(ValueError, match="not a number"):
        parse_number("\u0664")


def test_evaluation_is_exact() -> None:
    evaluated = evaluate_expression("1 / 3 + 1 / 3 + 1 / 3")
    assert evaluated.value == 1 and evaluated.numbers == (1, 3, 1, 3, 1, 3)


def test_numbers_text_round_trip() -> None:
    for value in (Fraction(24), Fraction(5, 3), Fraction(-7, 2), Fraction(0)):
        assert parse_number(format_number(value)) == value
    assert format_number(Fraction(10, 4)) == "5/2"
    for bad in ("5/0", "x", "1.5", ""):
        with pytest.raises(ValueError):
            parse_number(bad)


def test_every_puzzle_is_solvable_and_solutions_check() -> None:
    for puzzle in load_puzzles():
        path = solve(puzzle)
        assert path is not None, puzzle
        assert check_answer(compose_expression(puzzle, path), puzzle).correct, puzzle


def test_solver_facts() -> None:
    assert is_solvable((4, 5, 6, 10))
    assert is_solvable((1, 5, 5, 5))          # needs the fraction 1/5
    assert is_solvable((3, 3, 8, 8))          # needs 8/3
    assert not is_solvable((1, 1, 1, 1))
    assert not is_solvable((5, 7, 8))
    assert is_solvable(("3/2", 16))
    assert is_solvable((24,)) and not is_solvable((23,))
    assert solve((1, 1, 1, 1)) is None


def test_negative_states_use_full_reachability() -> None:
    # -4 * 6 = -24, but 24 itself cannot be made from -4 and 6
    assert not is_solvable((-4, 6))
    assert is_solvable((-4, 28))


def test_next_steps_are_canonical_and_valid() -> None:
    state = make_state((4, 5, 6, 10))
    steps = next_steps(state)
    texts = [s.text() for s in steps]
    assert len(texts) == len(set(texts))
    assert "4 + 5 = 9 (left: 6 9 10)" in texts
    assert "10 - 4 = 6 (left: 5 6 6)" in texts
    assert "4 / 10 = 2/5 (left: 2/5 5 6)" in texts
    assert all(s.result >= 0 for s in steps)
    assert all(validate_step(state, s.text()).valid for s in steps)
    # equal numbers: no duplicate steps
    assert len(next_steps((5, 5))) == len({s.text() for s in next_steps((5, 5))}) == 4
    good = good_steps(state)
    assert good and all(is_solvable(s.left) for s in good)


def test_solution_paths_all_reach_24() -> None:
    paths = solution_paths((4, 5, 6, 10))
    assert paths and len(paths) == len(set(paths))
    for path in paths:
        assert len(path) == 3 and path[-1].left == (24,)
        assert check_answer(compose_expression((4, 5, 6, 10), path), (4, 5, 6, 10)).correct


def test_parse_and_validate_steps() -> None:
    state = make_state((4, 5, 6, 10))
    ok = validate_step(state, "10 - 4 = 6 (left: 5 6 6)")
    assert ok.valid and ok.state == make_state((5, 6, 6))
    assert validate_step(state, "10 - 4 = 6 (left: 6 6 5)").valid          # any order
    assert validate_step(state, " 4 - 10 = -6 (left: -6 5 6) ").valid       # negatives allowed
    assert validate_step(make_state((1, 5, 5, 5)), "1 / 5 = 1/5 (left: 1/5 5 5)").valid
    assert validate_step(make_state(("1/5", 5, 5)), "5 - 1/5 = 24/5 (left: 24/5 5)").valid


@pytest.mark.parametrize("text,reason", [
    ("4 + 5 = 10 (left: 6 10 10)", "is 9, not 10"),
    ("4 + 7 = 11 (left: 5 6 11)", "not both in the state"),
    ("4 + 4 = 8 (left: 5 6 8 10)", "not both in the state"),
    ("4 + 5 = 9 (left: 6 9)", "left should be 6 9 10"),
    ("4 + 5 = 9 (left: 6 9 10 10)", "left should be 6 9 10"),
    ("6 / 0 = 0 (left: 0)", "not both in the state"),
    ("4 + 5 = 9", "not a step line"),
    ("four plus five", "not a step line"),
])
def test_invalid_steps(text: str, reason: str) -> None:
    check = validate_step(make_state((4, 5, 6, 10)), text)
    assert not check.valid and reason in check.reason


def test_division_by_zero_step() -> None:
    check = validate_step(make_state((0, 6, 7)), "6 / 0 = 0 (left: 0 7)")
    assert not check.valid and check.reason == "division by zero"


def test_parse_step_fields() -> None:
    step = parse_step("8 / 1/2 = 16 (left: 8 16)")
    assert (step.a, step.op, step.b, step.result) == (8, "/", Fraction(1, 2), 16)
    assert step.left == (8, 16)


def test_compose_expression_minimal_parentheses() -> None:
    puzzle = (4, 5, 6, 10)
    steps = ["10 - 6 = 4 (left: 4 4 5)", "5 * 4 = 20 (left: 4 20)", "4 + 20 = 24 (left: 24)"]
    assert compose_expression(puzzle, steps) == "4 + 5 * (10 - 6)"
    steps = ["5 - 4 = 1 (left: 1 6 10)", "10 - 6 = 4 (left: 1 4)", "4 - 1 = 3 (left: 3)"]
    assert compose_expression(puzzle, steps) == "10 - 6 - (5 - 4)"
    with pytest.raises(ValueError, match="step 2 is invalid"):
        compose_expression(puzzle, ["10 - 6 = 4 (left: 4 4 5)", "7 * 4 = 28 (left: 4 28)"])
    with pytest.raises(ValueError, match="leave 2 numbers"):
        compose_expression(puzzle, ["10 - 6 = 4 (left: 4 4 5)", "5 * 4 = 20 (left: 4 20)"])
