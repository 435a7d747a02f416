"""A run file has one writer: a second process that would write it stops with a clear error and
status 2 and the first's file stays whole; export never replaces a file of another format."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from thoughttree.cli import main
from thoughttree.search.run_output import lock_path
from thoughttree.search.runner import Problem, RunError, RunOptions, run_problems
from thoughttree.tree import ThoughtTree
from thoughttree.tree.serialize import load_run, tree_to_dict

# A writer that saves a first problem, then waits for a go-ahead file before its second.
FIRST_WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from thoughttree.search.runner import Problem, RunOptions, run_problems
    from thoughttree.tree import ThoughtTree
    from thoughttree.tree.serialize import tree_to_dict

    out, go = Path(sys.argv[1]), Path(sys.argv[2])

    def solve(problem):
        while problem.data == 1 and not go.exists():
            time.sleep(0.05)
        tree = ThoughtTree(prompt=[1, 2])
        tree.add_child(tree.root, [problem.data], "step")
        return {"problem": str(problem.data), "tree": tree_to_dict(tree), "result": {"answer": "x", "stopped": "done"}}

    problems = [Problem(id=str(i), data=i) for i in range(2)]
    outcome = run_problems(problems, solve, {"task": "first"}, RunOptions(output=out, progress=False))
    sys.exit(outcome.exit_code)
""")


def _cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "thoughttree", *argv], capture_output=True, text=True, timeout=300)


def _wait_for(condition, what: str, timeout: float = 120.0) -> None:
    until = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < until, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_second_writer_gets_a_clear_error_and_the_first_file_stays_whole(tmp_path: Path):
    out, go = tmp_path / "same.json", tmp_path / "go"
    first = subprocess.Popen([sys.executable, "-c", FIRST_WRITER, str(out), str(go)], stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: out.is_file() and len(load_run(out).problems) == 1, "the first writer's first save")
        saved = out.read_bytes()
        for flag in ("--output", "--resume"):
            argv = ["game24", "--end", "901", flag, str(out)]
            second = _cli(*argv)
            assert second.returncode == 2, second.stderr
            assert f"{flag} {out} is being written by another thoughttree process (pid {first.pid})" in second.stderr
            assert len(second.stderr.strip().splitlines()) == 1 and "Traceback" not in second.stderr
            assert out.read_bytes() == saved
    finally:
        go.touch()
        _, errors = first.communicate(timeout=120)
    assert first.returncode == 0, errors
    run = load_run(out)
    assert run.meta == {"task": "first"} and [p["id"] for p in run.problems] == ["0", "1"]
    assert not lock_path(out).exists()


def test_export_output_is_locked_too(tmp_path: Path, capsys):
    run_file = tmp_path / "run.json"
    _one_problem_run(run_file)
    target = tmp_path / "tree.dot"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom pathlib import Path\n"
            "from thoughttree.search.runner import lock_run_file\nlock_run_file(Path(sys.argv[1]))\n"
            "print('locked', flush=True)\ntime.sleep(60)\n",
            str(target),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        code = main(["export", str(run_file), "--format", "dot", "--output", str(target)])
        err = capsys.readouterr().err
        assert code == 2 and f"is being written by another thoughttree process (pid {holder.pid})" in err
        assert not target.exists()
    finally:
        holder.kill()
        holder.wait()
    assert main(["export", str(run_file), "--format", "dot", "--output", str(target)]) == 0
    assert target.read_text().startswith("digraph thoughttree {")


def _one_problem_run(path: Path) -> None:
    def solve(problem: Problem) -> dict:
        tree = ThoughtTree(prompt=[1, 2])
        tree.add_child(tree.root, [3], "step")
        return {"problem": "p", "tree": tree_to_dict(tree), "result": {"answer": "x", "stopped": "done"}}

    run_problems([Problem("0", 0)], solve, {"task": "t"}, RunOptions(output=path, progress=False))


@pytest.mark.parametrize("fmt", ["json", "graphml", "dot"])
def test_export_refuses_a_file_of_another_format_unless_forced(tmp_path: Path, capsys, fmt: str):
    run_file = tmp_path / "run.json"
    _one_problem_run(run_file)
    for content in ("my notes\n", "", json.dumps({"format": "thoughttree.tree"}) if fmt != "json" else "digraph x {}"):
        target = tmp_path / f"out.{fmt}"
        target.write_text(content)
        code = main(["export", str(run_file), "--format", fmt, "--output", str(target)])
        err = capsys.readouterr().err
        assert code == 2 and "which the export would replace" in err and "--force" in err, err
        assert target.read_text() == content
        assert main(["export", str(run_file), "--format", fmt, "--output", str(target), "--force"]) == 0
        exported = target.read_text()
        assert exported and exported != content
        assert main(["export", str(run_file), "--format", fmt, "--output", str(target)]) == 0  # its own format
        assert target.read_text() == exported


def test_export_never_replaces_a_run_file_even_forced(tmp_path: Path, capsys):
    run_file, other = tmp_path / "run.json", tmp_path / "other.json"
    _one_problem_run(run_file)
    _one_problem_run(other)
    before = other.read_bytes()
    assert main(["export", str(run_file), "--format", "json", "--output", str(other), "--force"]) == 2
    assert "a thoughttree run file" in capsys.readouterr().err and other.read_bytes() == before


def test_an_empty_file_is_never_taken_for_a_run_file(tmp_path: Path, capsys):
    out = tmp_path / "empty.json"
    out.write_text("")
    with pytest.raises(RunError, match="is an empty file"):
        RunOptions(output=out).check()
    assert main(["game24", "--end", "901", "--output", str(out)]) == 2
    assert "is an empty file, not a thoughttree run file" in capsys.readouterr().err
    assert out.read_text() == ""
