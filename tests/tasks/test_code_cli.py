"""The apps, humaneval and check-program commands, on a tiny random model, and their run files in show/stats."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tiny_models import make_model

from thoughttree.cli import main
from thoughttree.tree.serialize import load_run

pytestmark = pytest.mark.sandbox  # runs programs in bubblewrap

SOLUTION_4411 = "def find_missing_number(numbers):\n    n = len(numbers) + 1\n    return n * (n + 1) // 2 - sum(numbers)\n"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    """A tiny random Llama with room for whole APPS statements."""
    return make_model(tmp_path_factory.mktemp("tiny-code"), "llama", max_position_embeddings=8192)


def run_cli(capsys, *argv: object) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("method, end, options", [
    ("bon", 2, []),
    # The line-by-line searches take the same command path; test_code_search covers their searches.
    pytest.param("beam", 1, ["--width", "2", "--max-lines", "2"], marks=pytest.mark.slow),
    pytest.param("mcts", 1, ["--iterations", "2", "--max-lines", "2"], marks=pytest.mark.slow),
])
def test_apps_runs_a_search_and_writes_a_run_file(model_dir, tmp_path, capsys, method, end, options):
    out = tmp_path / "run.json"
    code, text, err = run_cli(capsys, "apps", "--model", model_dir, "--data", "bundled", "--difficulty", "all",
                              "--method", method, "--start", "0", "--end", end, "--samples", "2", *options,
                              "--max-tokens", "6", "--seed", "1", "--output", out)
    assert code == 0, err
    assert "APPS train split (bundled sample)" in text and "strict_accuracy" in text
    run = load_run(out)
    assert run.meta["data"] == "APPS train split (bundled sample)" and run.meta["task"] == "apps"
    assert [p["id"] for p in run.problems] == ["1604", "1607"][:end]
    for record in run.problems:
        result = record["result"]
        assert "error" not in result
        if result["program"]:
            assert len(result["hidden"]) == record["hidden_tests"]
        assert result["passed"] is False  # random weights write no working program
    assert run.totals["finished"] == end and run.totals["strict_accuracy"] == 0.0
    assert run.totals["strict_accuracy_interview"] == 0.0
    code, text, err = run_cli(capsys, "show", out)
    assert code == 0 and err == "" and "problem 0: 1604" in text
    code, text, err = run_cli(capsys, "stats", out)
    assert code == 0 and err == "" and "strict_accuracy" in text


def test_humaneval_io_reports_pass_at_k(model_dir, tmp_path, capsys):
    out = tmp_path / "he.json"
    code, text, err = run_cli(capsys, "humaneval", "--model", model_dir, "--method", "io", "--k", "2",
                              "--start", "0", "--end", "2", "--max-tokens", "6", "--output", out)
    assert code == 0, err
    run = load_run(out)
    assert [p["id"] for p in run.problems] == ["HumanEval/0", "HumanEval/1"]
    assert all(len(p["result"]["sample_passed"]) == 2 for p in run.problems)
    assert run.totals["pass@1"] == 0.0 and run.totals["pass@2"] == 0.0
    assert run_cli(capsys, "stats", out)[0] == 0


@pytest.mark.parametrize("argv, message", [
    (["apps", "--data", "missing.jsonl"], "no such file or folder"),
    (["apps", "--start", "500"], "beyond the data"),
    (["apps", "--start", "5", "--end", "3"], "empty"),
    (["apps", "--difficulty", "introductory", "--start", "0", "--end", "2"], "no introductory problems"),
    (["humaneval", "--end", "200"], "end <= 164"),
    (["apps", "--method", "io", "--width", "3"], "--width does not apply to --method io (it is for beam)"),
    (["apps", "--method", "beam", "--iterations", "3"], "--iterations does not apply to --method beam"),
    (["humaneval", "--method", "bon", "--max-lines", "3"], "--max-lines does not apply to --method bon"),
    (["humaneval", "--method", "bon", "--samples", "4", "--k", "8"], "--samples 4 and --k 8 disagree"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, message):
    code, _, err = run_cli(capsys, *argv, "--model", tmp_path / "no-model")
    assert code == 2 and message in err and err.count("\n") == 1


def test_an_unwritable_output_fails_before_the_model_loads(tmp_path, capsys):
    code, _, err = run_cli(capsys, "apps", "--model", tmp_path / "no-model", "--output", tmp_path)
    assert code == 2 and "is a directory" in err
    code, _, err = run_cli(capsys, "humaneval", "--model", tmp_path / "no-model", "--output", tmp_path / "x" / "r.json")
    assert code == 2 and "does not exist" in err


def test_a_missing_model_is_a_clear_error(tmp_path, capsys):
    code, _, err = run_cli(capsys, "apps", "--model", tmp_path / "no-model", "--start", "0", "--end", "1")
    assert code == 2 and "--model" in err


def test_check_program_prints_verdicts_and_exit_status(tmp_path, capsys):
    good = tmp_path / "good.py"
    good.write_text(SOLUTION_4411)
    code, text, err = run_cli(capsys, "check-program", good, "--data", "bundled", "--problem", "4411")
    assert code == 0 and err == "" and "tests passed" in text
    code, text, _ = run_cli(capsys, "check-program", good, "--problem", "4411", "--json")
    report = json.loads(text)
    assert code == 0 and report["passed"] == report["tests"] > 2
    assert {v["set"] for v in report["verdicts"]} == {"public", "hidden"}
    bad = tmp_path / "bad.py"
    bad.write_text("def find_missing_number(numbers):\n    return 1\n")
    code, text, _ = run_cli(capsys, "check-program", bad, "--problem", "4411", "--json")
    report = json.loads(text)
    assert code == 1 and 0 < report["passed"] < report["tests"]
    assert "wrong_answer" in {v["status"] for v in report["verdicts"]}


@pytest.mark.parametrize("argv, message", [
    (["check-program", "{tmp}/nothing.py", "--problem", "4411"], "cannot read the program"),
    (["check-program", "{good}", "--problem", "99999"], "no such problem"),
    (["check-program", "{good}", "--problem", "4411", "--data", "{tmp}/none"], "no such file or folder"),
])
def test_check_program_bad_input(tmp_path, capsys, argv, message):
    good = tmp_path / "good.py"
    good.write_text(SOLUTION_4411)
    argv = [a.format(tmp=tmp_path, good=good) for a in argv]
    code, _, err = run_cli(capsys, *argv)
    assert code == 2 and message in err
