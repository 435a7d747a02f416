"""Searches for programs end to end: a scripted model that writes known programs, checked in the sandbox."""

from __future__ import annotations

import pytest
from fakes import FakeLM

from thoughttree.search.code_methods import CodeSearch, apps_totals, humaneval_totals, search_problem
from thoughttree.tasks.apps import Apps
from thoughttree.tasks.code import Checker, CodeProblem

pytestmark = pytest.mark.sandbox  # runs programs in bubblewrap

RIGHT = "print(int(input()) * 2)\n"
WRONG = "print(int(input()))\n"
CRASH = "print(1 / 0)\n"

DOUBLE = CodeProblem(key="1", statement="Print twice the number read.\nExample: 2 -> 4", public=(("2\n", "4\n"),),
                     hidden=(("3\n", "6\n"), ("10\n", "20\n")), difficulty="introductory")


def hidden_runs(checker: Checker) -> set[str]:
    return {program for program, label in checker._cache if label.endswith("hidden")}


def programs_lm(programs: list[str]) -> FakeLM:
    """Whole programs: the i-th sample under the root is programs[i]."""
    return FakeLM(children=lambda context, ordinal, seed: programs[ordinal % len(programs)])


def test_best_of_n_keeps_the_program_that_passes_the_public_tests():
    checker = Checker()
    task = Apps([DOUBLE], CodeSearch(method="bon", samples=3).task_config(), checker=checker)
    lm = programs_lm([WRONG, RIGHT, CRASH])
    entry = search_problem(task, "1", lm, CodeSearch(method="bon", samples=3), seed=0)
    result = entry["result"]
    assert result["program"] == RIGHT and result["public_pass_rate"] == 1.0
    assert result["hidden"] == ["passed", "passed"] and result["passed"] is True
    values = sorted(n["value"] for n in entry["tree"]["nodes"][1:])
    assert values == [0.0, 0.0, 1.0]
    assert hidden_runs(checker) == {RIGHT}  # hidden tests ran once, on the answer only
    assert [c for c in lm.calls if c[0] == "generate"] == [("generate", 3)]  # one batched expansion
    totals = apps_totals([entry])
    assert totals["strict_accuracy"] == 1.0 and totals["strict_accuracy_introductory"] == 1.0


def test_io_runs_no_public_tests_and_keeps_the_first_sample():
    checker = Checker()
    method = CodeSearch(method="io", samples=2)
    task = Apps([DOUBLE], method.task_config(), checker=checker)
    entry = search_problem(task, "1", programs_lm([WRONG, RIGHT]), method, seed=0)
    assert entry["result"]["program"] == WRONG and entry["result"]["passed"] is False
    assert entry["result"]["hidden"] == ["wrong_answer", "wrong_answer"]
    assert not any(label.endswith("public") for _, label in checker._cache)
    assert apps_totals([entry])["test_case_average"] == 0.0


LINES = {
    "x = int(input())\n": "print(x * 2)\n",
    "x = 0\n": "print(x)\n",
}


def line_lm() -> FakeLM:
    """Line by line: first line one of two, second line fixed by the first; rollouts complete the program."""

    def children(context: str, ordinal: int, seed: int) -> str:
        body = context.split("ANSWER:\n", 1)[1]
        if not body:
            return list(LINES)[ordinal % 2]
        return LINES[body] if ordinal % 2 == 0 else "print(x + x)\n"

    def answers(prompt: str, seed: int) -> str:
        body = prompt.split("ANSWER:\n", 1)[1]
        return LINES.get(body.splitlines(keepends=True)[0], "print(0)\n") if body.count("\n") == 1 else ""

    return FakeLM(children=children, answers=answers)


@pytest.mark.parametrize("method", ["beam", "mcts"])
def test_line_searches_use_rollouts_on_public_tests(method):
    checker = Checker()
    search_method = CodeSearch(method=method, samples=2, width=2, iterations=4, max_lines=2)
    task = Apps([DOUBLE], search_method.task_config(), checker=checker)
    lm = line_lm()
    entry = search_problem(task, "1", lm, search_method, seed=3)
    result = entry["result"]
    assert result["program"] in ("x = int(input())\nprint(x * 2)\n", "x = int(input())\nprint(x + x)\n")
    assert result["public_pass_rate"] == 1.0 and result["passed"] is True
    assert hidden_runs(checker) == {result["program"]}
    nodes = entry["tree"]["nodes"]
    first = {n["text"]: n for n in nodes if n["parent"] == 0}
    assert first["x = int(input())\n"]["metadata"]["public_pass_rate"] == 1.0  # its rollout doubles
    assert first["x = 0\n"]["metadata"]["public_pass_rate"] == 0.0
    assert any(c[0] == "complete_from" for c in lm.calls)  # rollouts are batched calls


def test_a_search_error_is_recorded_and_the_problem_fails():
    task = Apps([DOUBLE], CodeSearch(method="bon", samples=2).task_config())

    def broken(context: str, ordinal: int, seed: int) -> str:
        raise RuntimeError("model exploded")

    entry = search_problem(task, "1", FakeLM(children=broken), CodeSearch(method="bon", samples=2), seed=0)
    assert "model exploded" in entry["result"]["error"]
    assert entry["result"]["passed"] is False and entry["result"]["program"] is None
    assert apps_totals([entry])["strict_accuracy"] == 0.0


def test_a_statement_longer_than_the_context_fails_its_problem_alone():
    method = CodeSearch(method="bon", samples=2)
    task = Apps([DOUBLE], method.task_config())
    lm = programs_lm([RIGHT])
    lm._max_context = len(lm.encode(task.prompt("1"), add_bos=True)) - 1
    entry = search_problem(task, "1", lm, method, seed=0, all_samples=True)
    assert "longer than the model's context" in entry["result"]["error"]
    assert entry["result"]["sample_passed"] == []
    assert entry["result"]["passed"] is False and entry["result"]["program"] is None
    assert entry["tree"]["nodes"] == [] and entry["result"]["stopped"] == "error"
    assert apps_totals([entry])["strict_accuracy"] == 0.0
    assert not [c for c in lm.calls if c[0] == "generate"]


def test_pass_at_k_counts_the_samples_a_problem_lacks_as_failed():
    def entry(samples: list[bool]) -> dict:
        return {"result": {"passed": bool(samples) and samples[0], "sample_passed": samples}}

    totals = humaneval_totals([entry([True, False, False, False]), entry([True, True, True, True]), entry([])], k=2)
    assert totals["passed"] == 2
    assert totals["pass@1"] == pytest.approx((0.25 + 1.0 + 0.0) / 3)
    assert totals["pass@2"] == pytest.approx((0.5 + 1.0 + 0.0) / 3)
    assert "pass@10" not in totals
    assert humaneval_totals([entry([])], k=2) == {"passed": 0, "pass@1": 0.0, "pass@2": 0.0}
    short = humaneval_totals([entry([True]), entry([False, False])], k=2)  # the first lacks one of its samples
    assert short["pass@2"] == pytest.approx((1.0 + 0.0) / 2) and short["pass@1"] == pytest.approx((0.5 + 0.0) / 2)


def test_the_checker_judges_alike_with_forked_tests_and_fresh_interpreters():
    tests = list(DOUBLE.public) + list(DOUBLE.hidden)
    programs = [RIGHT, WRONG, CRASH, "print(int(input()) * 2", ""]
    forked = Checker().check(programs, tests, fn_name=None, label="all")
    fresh = Checker(fresh_interpreter=True).check(programs, tests, fn_name=None, label="all")
    assert forked == fresh
    assert [v.pass_rate for v in forked] == [1.0, 0.0, 0.0, 0.0, 0.0]
