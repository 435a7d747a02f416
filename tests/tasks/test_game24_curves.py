"""Success-against-tokens curves from run entries, and the named puzzle ranges."""

from __future__ import annotations

import pytest

from thoughttree.tasks.game24.curve_view import markdown, table
from thoughttree.tasks.game24.curves import best_of_curve, budgets, run_curves, search_curve
from thoughttree.tasks.game24.ranges import puzzle_range


def _search(tokens: float, correct: bool) -> dict:
    return {"result": {"correct": correct, "statistics": {"generated_tokens": tokens}}}


def _samples(*rows: tuple[int, bool, float]) -> dict:
    return {"result": {"samples": [{"tokens": t, "correct": c, "logprob": lp} for t, c, lp in rows]}}


def test_a_search_counts_a_puzzle_from_the_tokens_it_took_to_solve_it() -> None:
    entries = [_search(150, True), _search(900, True), _search(300, False), _search(80, True)]
    curve = search_curve("bfs", entries, [100, 200, 1000])
    assert curve.success == (0.25, 0.5, 0.75)
    assert curve.at(199) == 0.25 and curve.at(50) == 0.0


def test_best_of_k_takes_the_samples_that_fit_the_budget() -> None:
    entries = [
        _samples((60, False, -0.1), (60, True, -0.5), (60, True, -0.2)),
        _samples((60, True, -0.3), (60, False, -0.1)),
    ]
    checker = best_of_curve("io", entries, [50, 60, 120, 180], "checker")
    assert checker.success == (0.0, 0.5, 1.0, 1.0)
    by_logprob = best_of_curve("io", entries, [50, 60, 120, 180], "logprob")
    assert by_logprob.success == (0.0, 0.5, 0.0, 0.0)
    names = [c.name for c in run_curves("x", entries, "cot", [60])]
    assert names == ["CoT best-of-k, checker", "CoT best-of-k, log-prob"]
    with pytest.raises(ValueError, match="io, cot or bon"):
        best_of_curve("bfs", [_search(1, True)], [10], "checker")


def test_budget_grid_and_rendering() -> None:
    grid = budgets(10_000, points=5, smallest=100)
    assert grid == (100, 316, 1000, 3162, 10000)
    curves = [search_curve("bfs b=5", [_search(500, True)], grid)]
    assert "| bfs b=5 | 1 | 0% | 0% | 100% | 100% | 100% |" in markdown(curves)
    assert table(curves).row_count == 1


def test_puzzle_ranges() -> None:
    assert puzzle_range("test") == tuple(range(900, 1000))
    assert puzzle_range("800-802") == (800, 801, 802)
    assert puzzle_range("validation", limit=3) == puzzle_range("validation")[:3]
    assert not set(puzzle_range("validation")) & set(puzzle_range("test"))
    with pytest.raises(ValueError, match="validation"):
        puzzle_range("dev")
