"""Smaller truths: run files that say what is wrong, one best path, failures that are not hidden."""

from __future__ import annotations

import json

import pytest
from fakes import FakeLM, ScriptTask, pick

from thoughttree.cli import main
from thoughttree.commands.game24 import answer_line
from thoughttree.search.driver import SearchError, search
from thoughttree.search.results import SearchResult
from thoughttree.strategies import BFS
from thoughttree.tree import Status, ThoughtTree, TreeError
from thoughttree.tree.serialize import RunFile, RunFileError, load_run, tree_to_dict


def sample_run(tmp_path):
    tree = ThoughtTree(prompt=[1, 2])
    low = tree.add_child(tree.root, [3], "low", value=0.2)
    tree.add_child(tree.root, [4], "high", value=0.9)
    low.status = Status.TERMINAL
    entry = {"problem": "p", "tree": tree_to_dict(tree),
             "result": {"answer": "low", "best": low.id, "solutions": [], "stopped": "done",
                        "statistics": {"wall_time": 0.5, "rounds": 1}}}
    path = tmp_path / "run.json"
    RunFile(meta={"task": "t"}, problems=[entry], totals={"success_rate": 0.0}).save(path)
    return path, json.loads(path.read_text())


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda d: d.update(meta="x"), "meta must be a JSON object, got 'x'"),
        (lambda d: d["problems"][0]["result"].update(statistics="oops"),
         "problem 0: result.statistics must be a JSON object, got 'oops'"),
        (lambda d: d["problems"][0]["tree"]["nodes"][2].update(value="high"),
         "problem 0: node 2: value must be a number or null, got 'high'"),
        (lambda d: d["problems"][0]["tree"]["nodes"][1].update(tokens=[3, -1]), "problem 0: node 1: tokens must be"),
        (lambda d: d["problems"][0]["tree"]["nodes"][1].update(status="great"), "node 1: status must be one of"),
        (lambda d: d["problems"][0]["tree"]["nodes"][2].update(parent=2), "node 2: parent must be null or the id"),
        (lambda d: d["problems"][0]["result"].update(best=7), "result.best must be null or a node id below 3"),
        (lambda d: d["problems"][0]["result"].update(answer=24), "result.answer must be a string or null, got 24"),
        (lambda d: d.update(success_rate="high"), "success_rate must be a number"),
        (lambda d: d["problems"][0].pop("tree"), "problem 0: has no 'tree'"),
        (lambda d: d.update(problems={}), "problems must be a list"),
    ],
)
def test_bad_run_files_name_the_field(tmp_path, capsys, change, message):
    path, data = sample_run(tmp_path)
    change(data)
    path.write_text(json.dumps(data))
    with pytest.raises(RunFileError, match=message.replace("(", r"\(")):
        load_run(path)
    for command in ("show", "stats"):
        assert main([command, str(path)]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1


def test_show_best_draws_the_path_the_result_reports(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    path, _ = sample_run(tmp_path)
    assert main(["show", str(path), "--best"]) == 0
    out = capsys.readouterr().out
    assert "★ #1" in out and "#2" not in out  # the reported best, not the highest value


def test_unsolved_answers_are_not_shown_as_equations():
    wrong = {"correct": False, "answer": "(4 + 5) * 6 - 10 = 24", "check": "evaluates to 44, not 24"}
    line = answer_line(wrong)
    assert line.startswith("not solved ✗") and "evaluates to 44, not 24" in line
    assert answer_line({"correct": False, "answer": None}) == "not solved ✗ (no answer)"
    assert answer_line({"correct": True, "answer": "4 * 6 = 24"}) == "4 * 6 = 24 ✓"


class BrokenBest(BFS):
    def best(self):
        raise RuntimeError("best is broken")


def test_a_strategy_whose_best_raises_fails_the_search_and_keeps_the_tree():
    lm = FakeLM(children=lambda context, ordinal, seed: pick(["a;", "b;"], seed))
    with pytest.raises(SearchError, match="BrokenBest.best\\(\\) raising: best is broken") as failed:
        search(ScriptTask({"a;": 0.5, "b;": 0.4}), BrokenBest(depth=1, samples=2), lm, problem="Q")
    assert len(failed.value.tree) == 3 and failed.value.partial_result.best is None


def test_trees_refuse_nodes_of_other_trees_in_every_method():
    lm = FakeLM(children=lambda context, ordinal, seed: "a;")
    mine, other = ThoughtTree(lm, prompt=[1, 5]), ThoughtTree(lm, prompt=[1, 6])
    other.materialize()
    stranger = other.root
    calls = {
        "expand": lambda: mine.expand([stranger]),
        "add_child": lambda: mine.add_child(stranger, [7], "x"),
        "extend": lambda: mine.extend(stranger, "x"),
        "prune": lambda: mine.prune(stranger),
        "path": lambda: mine.path(stranger),
        "materialize": lambda: mine.materialize([stranger]),
    }
    for name, call in calls.items():
        with pytest.raises(TreeError, match="belongs to another tree"):
            call()
    assert stranger.kv is not None and stranger.status is Status.OPEN and len(mine) == 1
    mine.check_integrity()
    other.check_integrity()


@pytest.mark.parametrize("n", [2.5, 0, -1, True, "3"])
def test_expand_wants_a_whole_n(n):
    tree = ThoughtTree(FakeLM(children=lambda context, ordinal, seed: "a;"), prompt=[1, 5])
    with pytest.raises(TreeError, match="n must be an integer >= 1"):
        tree.expand([tree.root], n=n)


@pytest.mark.parametrize("tokens", [[1, -3], [1, 2.5], [1, True], [1, "7"]])
def test_token_ids_must_be_whole_and_non_negative(tokens):
    with pytest.raises(TreeError, match="token id"):
        ThoughtTree(prompt=tokens)
    tree = ThoughtTree(prompt=[1, 2])
    with pytest.raises(TreeError, match="token id"):
        tree.add_child(tree.root, tokens, "x")


def test_token_ids_beyond_the_vocabulary_are_refused(tiny_model_dir):
    from thoughttree import LM, RuntimeConfig

    lm = LM.from_pretrained(tiny_model_dir, device="cpu", runtime=RuntimeConfig(num_pages=16))
    with pytest.raises(TreeError, match=f"below {lm.config.vocab_size}"):
        ThoughtTree(lm, prompt=[1, lm.config.vocab_size])


def test_game24_run_files_open_with_search_result_load(tmp_path, capsys):
    out = tmp_path / "run.json"
    assert main(["game24", "--device", "cpu", "--method", "io", "--k", "1", "--end", "902", "--output", str(out)]) == 0
    capsys.readouterr()
    run = load_run(out)
    assert run.meta["attention"] == "reference" and run.meta["dtype"] == "float32"
    for index in range(2):
        result = SearchResult.load(out, index=index)
        assert result.answer == run.problems[index]["result"]["answer"]
        assert result.best is not None and result.best.id == run.problems[index]["result"]["best"]
    assert main(["stats", str(out)]) == 0
    assert "attention" in capsys.readouterr().out


def test_game24_with_the_bundled_draft_model_solves_what_plain_decoding_solves(tmp_path, capsys):
    """``--speculative draft:bundled`` on the command line: the same puzzles solved with the same
    generated tokens as without, and the run file's statistics tell of the drafts."""
    runs = {}
    for mode in ("off", "draft:bundled"):
        out = tmp_path / f"{mode.replace(':', '-')}.json"
        argv = ["game24", "--device", "cpu", "--method", "bfs", "--no-distinct", "--start", "850", "--end", "851"]
        assert main([*argv, "--speculative", mode, "--output", str(out)]) == 0
        runs[mode] = load_run(out)
    capsys.readouterr()
    off, on = (r.problems[0]["result"] for r in runs.values())
    assert on["answer"] == off["answer"] and on["solved"] == off["solved"]
    assert on["statistics"]["generated_tokens"] == off["statistics"]["generated_tokens"]
    assert on["statistics"]["draft_tokens"] > 0 == off["statistics"]["draft_tokens"]
    assert on["statistics"]["draft_seconds"] > 0 == off["statistics"]["draft_seconds"]
    assert main(["stats", str(tmp_path / "draft-bundled.json")]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "tokens per forward; drafting" in printed and "speculation: " in printed
