"""The Game of 24 task and command: steps as thoughts, exact answers, clear errors."""

from __future__ import annotations

import pytest

from thoughttree.cli import main
from thoughttree.tasks.game24.run import Game24Run
from thoughttree.tasks.game24.task import Game24, Game24Direct, Game24DirectConfig, as_puzzle, node_state
from thoughttree.tree import ThoughtTree


def _tree() -> ThoughtTree:
    return ThoughtTree(prompt=[1, 2, 3])


def test_puzzle_parsing() -> None:
    assert as_puzzle("4 5 6 10") == (4, 5, 6, 10)
    assert as_puzzle([4, 5, 6, 10]) == (4, 5, 6, 10)
    with pytest.raises(ValueError, match="not a whole number"):
        as_puzzle("4 5 six 10")
    with pytest.raises(ValueError, match="four numbers"):
        as_puzzle("4 5 6")


def test_steps_are_checked_and_compose_into_an_answer() -> None:
    task, problem = Game24(), "4 5 6 10"
    tree = _tree()
    root = tree.root
    assert task.accept(problem, root, "10 - 4 = 6 (left: 5 6 6)\n")
    assert not task.accept(problem, root, "10 - 4 = 7 (left: 5 6 7)\n")
    assert not task.accept(problem, root, "10 - 3 = 7 (left: 4 5 6 7)\n")
    assert not task.accept(problem, root, "make it 24\n")
    a = tree.add_child(root, [4], "10 - 4 = 6 (left: 5 6 6)\n")
    b = tree.add_child(a, [5], "5 * 6 = 30 (left: 6 30)\n")
    c = tree.add_child(b, [6], "30 - 6 = 24 (left: 24)\n")
    assert [str(x) for x in node_state(as_puzzle(problem), b)] == ["6", "30"]
    assert not task.is_terminal(problem, b) and task.is_terminal(problem, c)
    answer = task.answer(problem, c)
    assert answer is not None and task.check(problem, answer)
    d = tree.add_child(b, [7], "30 + 6 = 36 (left: 36)\n")
    wrong = task.answer(problem, d)
    assert wrong is not None and not task.check(problem, wrong)
    assert task.request(problem, b).prompt == "propose: 6 30\n"


def test_direct_answers() -> None:
    io = Game24Direct()
    tree = _tree()
    good = tree.add_child(tree.root, [4], "(10 - 4) * 5 - 6 = 24\n")
    bad = tree.add_child(tree.root, [4], "(10 - 4) * 5 - 5 = 25\n")
    score = io.evaluator()
    assert score.evaluate(None, "4 5 6 10", [good, bad], seed=0) == [1.0, 0.0]
    cot = Game24Direct(Game24DirectConfig(style="cot"))
    chain = tree.add_child(
        tree.root, [5], "10 - 4 = 6 (left: 5 6 6)\n5 * 6 = 30 (left: 6 30)\n30 - 6 = 24 (left: 24)\nanswer: (10 - 4) * 5 - 6 = 24\n"
    )
    assert cot.check("4 5 6 10", cot.answer("4 5 6 10", chain))
    with pytest.raises(ValueError, match="style"):
        Game24DirectConfig(style="poem")


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(start=5000), "beyond the data"),
        (dict(start=10, end=5), "--end"),
        (dict(method="magic"), "unknown method"),
        (dict(breadth=0), "--breadth"),
        (dict(puzzles=("4 5 x 10",)), "not a whole number"),
    ],
)
def test_run_settings_are_checked(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Game24Run(**kwargs)


def test_command_errors(tmp_path, capsys) -> None:
    assert main(["game24", "--start", "5000"]) == 2
    assert "beyond the data" in capsys.readouterr().err
    assert main(["game24", "--puzzle", "1 2 three 4"]) == 2
    assert "not a whole number" in capsys.readouterr().err
    assert main(["game24", "--model", str(tmp_path), "--start", "900", "--end", "901"]) == 2
    assert "no config.json" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["game24", "--start", "abc"])
