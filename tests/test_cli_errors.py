"""Hostile command lines get one clear line on stderr and status 2; quick commands never load torch."""

from __future__ import annotations

import shlex
import subprocess
import sys

import pytest

from thoughttree.cli import main
from thoughttree.commands.model import bundled_model_path, is_bundled
from thoughttree.search import game24_methods


def one_error_line(capsys, *argv: str) -> str:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(
    "argv,message",
    [
        (["game24", "--device", "tpu", "--end", "901"], "--device 'tpu' is not a device; use cpu or cuda"),
        (["game24", "--device", "cuda", "--end", "901"], "--device cuda: CUDA is not available"),
        (["bench", "--device", "cuda:0"], "--device cuda:0: CUDA is not available"),
        (["demo", "--puzzles", "500"], "--puzzles 500: the data has 462 puzzles from index 900"),
        (["game24", "--method", "io", "--prompts", "few_shot", "--end", "901"],
         "the prompt of puzzle 4 5 6 10 has 440 tokens, the model's context is 256; use --prompts compact"),
        (["game24", "--method", "bfs", "--prompts", "few_shot", "--end", "901"],
         "the proposal prompt of puzzle 4 5 6 10 has 526 tokens, the model's context is 256; use --prompts compact"),
        (["game24", "--attention", "deft", "--end", "901"], "attention 'deft' runs Triton kernels on a CUDA GPU"),
        (["game24", "--puzzle", "1 2 3 4", "--puzzle", "1 2 3 4"], "a --puzzle is given twice"),
        (["bench", "--tokens", "256"], "--tokens 256 leaves no room for a prompt"),
        (["game24", "--method", "io", "--breadth", "3", "--end", "901"],
         "--breadth does not apply to --method io (it is for bfs); leave it out"),
        (["game24", "--method", "bfs", "--rule", "puct", "--end", "901"], "--rule does not apply to --method bfs"),
        (["game24", "--value", "probs", "--evaluations", "5", "--end", "901"],
         "--evaluations does not apply to --value probs"),
    ],
)
def test_bad_command_lines(capsys, monkeypatch, argv, message):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # the kernel tests turn the interpreter on
    if "cuda" in " ".join(argv):
        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has CUDA")
    assert message in one_error_line(capsys, *argv)


@pytest.mark.parametrize("case", ["directory", "missing"])
def test_an_unusable_output_fails_before_loading_the_model(tmp_path, capsys, case):
    out = tmp_path if case == "directory" else tmp_path / "no" / "run.json"
    err = one_error_line(capsys, "game24", "--end", "901", "--output", out, "--model", tmp_path / "nothing-here")
    assert ("is a directory" if case == "directory" else "does not exist; create it first") in err


def test_an_output_path_holding_another_file_is_refused_and_kept(tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    err = one_error_line(capsys, "game24", "--end", "901", "--output", notes)
    assert "is not a thoughttree run file" in err and notes.read_text() == "my notes\n"
    assert "--resume" in one_error_line(capsys, "game24", "--end", "901", "--resume", tmp_path)


def test_a_damaged_resume_file_fails_before_loading_the_model(tmp_path, capsys):
    cut = tmp_path / "run.json"
    cut.write_text('{"format": "thoughttree.run", "meta": {}, "problems": [{"id": "9')  # ended by a crash
    err = one_error_line(capsys, "game24", "--end", "901", "--resume", cut, "--model", tmp_path / "nothing-here")
    assert "is not valid JSON" in err


def test_an_interrupt_outside_a_run_is_one_line_and_status_130(capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("thoughttree.commands.game24.load_model", interrupted)
    assert main(["game24", "--end", "901"]) == 130
    err = capsys.readouterr().err
    assert err.strip() == "thoughttree game24: interrupted"


def test_a_stopped_demo_names_the_game24_command_that_resumes_it(tmp_path, capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(game24_methods, "search", interrupted)
    assert main(["demo", "--puzzles", "1", "--device", "cpu"]) == 130
    [saved] = tmp_path.glob("thoughttree-run-*.json")
    again = capsys.readouterr().err.strip().split("; continue with ")[1]
    assert again == f"thoughttree game24 --start 900 --end 901 --device cpu --resume {saved.name}"
    assert main(shlex.split(again)[1:]) == 130  # the file is taken as this run's (another run's is status 2)


def test_given_puzzles_need_no_range(tmp_path):
    from thoughttree.search.game24_methods import Game24Run

    assert Game24Run(puzzles=("4 5 6 10",), end=5000).problems() == [(None, "4 5 6 10")]


def test_the_bundled_model_is_known_by_its_path(tmp_path):
    assert is_bundled("bundled") and is_bundled(str(bundled_model_path()))
    assert is_bundled(str(bundled_model_path()) + "/") and not is_bundled(str(tmp_path))


def test_bench_defaults_fit_the_bundled_model(capsys):
    assert main(["bench", "--device", "cpu", "--branches", "2", "--tokens", "4", "--repeat", "1"]) == 0
    assert "on a 252-token prompt" in capsys.readouterr().out


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.startswith("thoughttree 0.")


QUICK = """
import sys
from thoughttree.cli import main
code = main(sys.argv[1:])
heavy = sorted(m for m in ("torch", "triton", "transformers", "networkx") if m in sys.modules)
print("HEAVY", heavy, "CODE", code)
"""


@pytest.mark.parametrize("argv", [["show"], ["stats"], ["export", "--format", "json"], ["export", "--format", "dot"]])
def test_commands_over_run_files_do_not_import_the_model_runtime(tmp_path, argv):
    from thoughttree.tree import ThoughtTree
    from thoughttree.tree.serialize import RunFile, tree_to_dict

    tree = ThoughtTree(prompt=[1, 2])
    tree.add_child(tree.root, [3], "a thought")
    path = tmp_path / "run.json"
    RunFile(meta={"task": "t"}, problems=[{"problem": "p", "tree": tree_to_dict(tree), "result": {}}]).save(path)
    done = subprocess.run([sys.executable, "-c", QUICK, argv[0], str(path), *argv[1:]], capture_output=True,
                          text=True, timeout=120)
    assert "HEAVY [] CODE 0" in done.stdout, done.stdout + done.stderr


def test_help_does_not_import_the_model_runtime():
    done = subprocess.run([sys.executable, "-c", QUICK.replace("main(sys.argv[1:])", "0"), ], capture_output=True,
                          text=True, timeout=120)
    assert "HEAVY [] CODE 0" in done.stdout, done.stdout + done.stderr
    done = subprocess.run([sys.executable, "-m", "thoughttree", "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "game24" in done.stdout
