"""The Game of 24 task and command: steps as thoughts, exact answers, clear errors."""

from __future__ import annotations

import json

import pytest

from thoughttree.cli import main
from thoughttree.search.game24_methods import Game24Run
from thoughttree.tasks.game24.split import RANGES
from thoughttree.tasks.game24.task import Game24, Game24Direct, Game24DirectConfig, as_puzzle, node_state
from thoughttree.tree import ThoughtTree


def _tree() -> ThoughtTree:
    return ThoughtTree(prompt=[1, 2, 3])


def test_puzzle_parsing() -> None:
    assert as_puzzle("4 5 6 10") == (4, 5, 6, 10)
    assert as_puzzle([4, 5, 6, 10]) == (4, 5, 6, 10)
    for bad in (None, 4):
        with pytest.raises(ValueError, match="a Game of 24 problem is four numbers"):
            as_puzzle(bad)
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
        (dict(puzzles=("-1 1 4 6",)), "is negative"),
        (dict(value="magic"), "--value"),
        (dict(prompts="few_shot", value="lookahead"), "'samples' for few-shot"),
        (dict(evaluations=0), "--evaluations"),
        (dict(value="probs", evaluations=7), "--evaluations does not apply to --value probs"),
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


def test_few_shot_prompts_for_instruction_models() -> None:
    from thoughttree.tasks import ValuePrompt
    from thoughttree.tasks.game24.task import Game24Config

    task, problem = Game24(Game24Config(prompts="few_shot", value="samples")), "4 5 6 10"
    tree = _tree()
    request = task.request(problem, tree.root)
    assert "Possible next steps:" in request.prompt and request.prompt.rstrip().endswith("Possible next steps:")
    completion = "10 - 4 = 6 (left: 5 6 6)\n5 + 6 = 11 (left: 4 10 11)\nI think that is all\n"
    lines = task.split(problem, tree.root, completion)
    assert lines == ["10 - 4 = 6 (left: 5 6 6)\n", "5 + 6 = 11 (left: 4 10 11)\n", "I think that is all\n"]
    assert [task.accept(problem, tree.root, line) for line in lines] == [True, True, False]
    assert isinstance(task.evaluator(), ValuePrompt)
    with pytest.raises(ValueError, match="value='samples'"):
        Game24Config(prompts="few_shot", value="probs")
    with pytest.raises(ValueError, match="value='samples'"):
        Game24Config(prompts="few_shot", value="lookahead")
    with pytest.raises(ValueError, match="lookahead_samples"):
        Game24Config(lookahead_samples=0)
    compact, verdicts = Game24Run(), Game24Run(prompts="few_shot")
    assert (compact.value, compact.evaluations, verdicts.value, verdicts.evaluations) == ("lookahead", 20, "samples", 3)
    io = Game24Direct(Game24DirectConfig(prompts="few_shot"))
    assert io.prompt(problem).endswith("Input: 4 5 6 10\n")
    node = tree.add_child(tree.root, [4], "Answer: (10 - 4) * 5 - 6 = 24\n")
    assert io.check(problem, io.answer(problem, node))


def test_defaults_are_the_settings_chosen_on_validation() -> None:
    """Distinct proposals (23 per BFS state, 20 for MCTS and beam) and PUCT for the compact tree searches; sampled ones
    elsewhere, and on request; the command leaves them off where they cannot run or would idle."""
    import argparse

    from thoughttree.commands.game24 import default_distinct

    bfs, mcts, beam = Game24Run(), Game24Run(method="mcts"), Game24Run(method="beam")
    assert (bfs.distinct, bfs.samples, mcts.distinct, mcts.rule, beam.distinct) == (True, 23, True, "puct", True)
    assert (mcts.samples, beam.samples, Game24Run(method="dfs").samples) == (20, 20, 10)
    plain, plain_mcts = Game24Run(distinct=False), Game24Run(method="mcts", distinct=False)
    assert (plain.samples, plain_mcts.rule, plain_mcts.samples) == (30, "uct", 10)
    assert not any(Game24Run(method=m).distinct for m in ("io", "cot", "bon", "dfs"))
    assert not Game24Run(prompts="few_shot").distinct
    assert Game24Run(method="mcts", rule="uct").rule == "uct"

    def given(model: str = "bundled", speculative: str = "off", distinct: bool | None = None) -> bool | None:
        return default_distinct(argparse.Namespace(model=model, speculative=speculative, distinct=distinct))

    assert given() is None and given(distinct=True) is True
    assert given(model="http://127.0.0.1:8000/v1") is False and given(speculative="lookup") is False
    assert given(speculative="lookup", distinct=True) is True


def test_run_keeps_going_after_a_failed_search(tmp_path, capsys, monkeypatch) -> None:
    """A search that fails (here: the task raises on one puzzle) is recorded, the run goes on, exit 1."""
    from tiny_models import make_model

    from thoughttree.tree.serialize import load_run

    split = Game24.split

    def failing(self, problem, parent, completion):
        if problem == "4 5 6 10":
            raise RuntimeError("the proposal service is down")
        return split(self, problem, parent, completion)

    monkeypatch.setattr(Game24, "split", failing)
    path = make_model(tmp_path, "llama")
    out = tmp_path / "run.json"
    code = main(["game24", "--model", str(path), "--device", "cpu", "--method", "bfs", "--breadth", "1",
                 "--samples", "2", "--puzzle", "4 5 6 10", "--puzzle", "1 2 3 4", "--output", str(out)])
    assert code == 1
    run = load_run(out)
    assert run.totals["errors"] == 1 and len(run.problems) == 2
    assert "the proposal service is down" in run.problems[0]["result"]["error"]
    assert "error" not in run.problems[1]["result"]  # searched (a random model proposes no valid step)
    out, err = capsys.readouterr()
    assert "searches that failed" in out
    assert "1 of 2 searches failed; the first (problem 4 5 6 10): the proposal service is down" in err


def test_few_shot_search_runs_on_a_real_model(tmp_path) -> None:
    from tiny_models import make_model

    from thoughttree import LM, RuntimeConfig, search
    from thoughttree.strategies import BFS
    from thoughttree.tasks.game24.task import Game24Config

    path = make_model(tmp_path, "qwen2", max_position_embeddings=4096)
    lm = LM.from_pretrained(path, device="cpu", runtime=RuntimeConfig(num_pages=2048))
    task = Game24(Game24Config(prompts="few_shot", value="samples", value_samples=1))
    result = search(task, BFS(breadth=2, samples=2, depth=3), lm, problem="4 5 6 10", seed=0)
    assert result.stopped in ("done", "solved")
    # A random model writes no valid steps: proposals were sampled, every one was rejected.
    assert lm.stats.generated_tokens > 0 and result.answer is None and not result.solved
    assert all(not n.alive for n in result.tree.nodes[1:])
    lm.check_integrity(result.tree)


def test_summary_says_which_puzzles_are_held_out_and_which_the_model_trained_on(tmp_path, capsys) -> None:
    from thoughttree.commands.game24 import split_rows
    from thoughttree.tree.serialize import load_run

    out = tmp_path / "run.json"
    assert main(["game24", "--device", "cpu", "--method", "io", "--k", "1", "--puzzle", "10 6 5 4",
                 "--puzzle", "1 1 1 1", "--output", str(out)]) == 0
    assert "held-out test puzzles" in capsys.readouterr().out
    run = load_run(out)
    assert run.totals["held_out_puzzles"] == 1 and run.totals["validation_puzzles"] == 0
    assert run.totals["puzzles"] == 2
    rows = [("held-out test puzzles", "1 of 2 (900-999, in any order)"),
            ("validation puzzles", "0 of 2 (850-899 and 1000-1049, in any order)")]
    assert split_rows(run) == [*rows, ("in the model's training data", "1 of 2")]
    run.meta["model"] = str(tmp_path)  # a model without training.json: nothing is known of its data
    assert split_rows(run) == rows
    # a model that records its held-out ranges: puzzle 850 is not in its data, 1049 is
    (tmp_path / "training.json").write_text(json.dumps({"held_out": {"validation": [850], "test": [900]}}))
    run.problems[0]["problem"], run.problems[1]["problem"] = "8 8 6 2", "2 5 5 7"
    assert split_rows(run)[-1] == ("in the model's training data", "1 of 2")
    held_out = {r.name: list(r.indices) for r in RANGES.values()}  # the split the bundled model is made with
    (tmp_path / "training.json").write_text(json.dumps({"held_out": held_out}))
    assert split_rows(run)[-1] == ("in the model's training data", "0 of 2")
    (tmp_path / "training.json").write_text(json.dumps({"held_out": {"validation": "850-899"}}))
    with pytest.raises(ValueError, match="held_out"):
        split_rows(run)


def test_a_run_on_a_held_out_range_is_labelled_with_it(tmp_path) -> None:
    from thoughttree.commands.game24 import run_puzzles_label
    from thoughttree.tasks.game24.split import VALIDATION
    from thoughttree.tree.serialize import load_run

    run = Game24Run(method="io", held_out="val")
    assert [i for i, _ in run.problems()] == list(VALIDATION.indices)
    with pytest.raises(ValueError, match="--range and --puzzle"):
        Game24Run(held_out="val", puzzles=("4 5 6 10",))
    with pytest.raises(ValueError, match="--range must be one of"):
        Game24Run(held_out="train")
    out = tmp_path / "run.json"
    assert main(["game24", "--device", "cpu", "--method", "io", "--k", "1", "--puzzle", "8 8 6 2",
                 "--puzzle", "3 3 5 12", "--output", str(out)]) == 0
    run_file = load_run(out)
    assert run_file.totals["validation_puzzles"] == 2 and run_file.totals["held_out_puzzles"] == 0
    assert run_puzzles_label(run_file) == "2 given puzzles (validation)"
