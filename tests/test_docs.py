"""The documents keep their promises: the README's snippets run as written (on the bundled model,
CPU), every command BENCHMARKS.md names answers ``--help``, and the two files keep their shape
(sizes, install before the tour, a command, a machine and a commit for every table).

The ``--help`` calls run in processes forked from one that imported torch and the package once
(answer_help.py): each call's own process then takes a fraction of a second instead of seconds.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
BENCHMARKS = (ROOT / "BENCHMARKS.md").read_text()


def python_snippets(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


def shell_commands(text: str) -> list[str]:
    """Every command line of the fenced blocks that are not Python, continuation lines joined, and
    every inline command that runs Python."""
    commands = re.findall(r"`((?:[A-Z_]+=\S+ )*python3? [^`]+)`", text)
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
        if block.lstrip().startswith(("import ", "from ")):
            continue
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].strip()
            if line and not line.startswith("#"):
                commands.append(line)
    return commands


def help_argv(command: str) -> list[str]:
    """The ``--help`` call of the program a command line runs, from the repository root."""
    words = [w for w in shlex.split(command) if not re.fullmatch(r"[A-Z_]+=\S*", w)]
    program, rest = words[0], words[1:]
    if program == "thoughttree":
        return [sys.executable, "-m", "thoughttree", rest[0], "--help"]
    if program == "torchrun":  # its options come first, then a script or -m and a module
        rest = rest[next(i for i, w in enumerate(rest) if w == "-m" or w.endswith(".py")) :]
    elif not re.fullmatch(r"python3?", program):
        raise AssertionError(f"no rule for the program of {command!r}")
    if rest[0] == "-m":
        module, args = rest[1], [w for w in rest[2:] if w != "--"]
        if module == "thoughttree":
            return [sys.executable, "-m", "thoughttree", args[0], "--help"]
        return [sys.executable, "-m", module, "--help"]
    return [sys.executable, rest[0], "--help"]


README_COMMANDS = [c for c in shell_commands(README) if c.startswith(("thoughttree", "torchrun"))]
COMMANDS = sorted({" ".join(help_argv(c)[1:]) for c in shell_commands(BENCHMARKS) + README_COMMANDS})


def test_documents_name_the_commands_they_promise() -> None:
    assert "benchmarks/tree_attention.py --help" in COMMANDS
    assert "-m thoughttree game24 --help" in COMMANDS
    assert "benchmarks/flashinfer_wheels.py --help" in COMMANDS  # named inline
    assert "-m thoughttree export --help" in COMMANDS  # from the README's command line
    assert len(COMMANDS) >= 20


@pytest.fixture(scope="module")
def help_answers(tmp_path_factory) -> dict[str, dict]:
    """Each command's exit status, stdout and stderr, as answer_help.py reports them, and under
    "broken" those of a script that prints a line and exits with an error."""
    broken = tmp_path_factory.mktemp("help") / "broken.py"
    broken.write_text("import sys\nprint('partial help')\nsys.exit('no such option')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "benchmarks")])}
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "answer_help.py"), *COMMANDS, f"{broken} --help"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    answers = json.loads(done.stdout)
    answers["broken"] = answers.pop(f"{broken} --help")
    return answers


@pytest.mark.parametrize("command", COMMANDS)
def test_every_benchmark_command_answers_help(command: str, help_answers: dict[str, dict]) -> None:
    answer = help_answers[command]
    assert answer["status"] == 0, answer["stderr"][-2000:]
    assert answer["stdout"].strip(), "no help printed"


def test_a_command_that_fails_is_reported(help_answers: dict[str, dict]) -> None:
    # The forked calls see what a command does: its status, and what it printed where.
    assert help_answers["broken"] == {"status": 1, "stdout": "partial help\n", "stderr": "no such option\n"}


def test_benchmarks_is_a_reference() -> None:
    assert len(BENCHMARKS.encode()) <= 40_000
    sections = re.split(r"\n## ", BENCHMARKS)[1:]
    assert len(sections) >= 8
    for section in sections:
        title = section.splitlines()[0]
        if "|---" not in section:
            continue
        assert "```" in section, f"{title}: a table without its command"
        assert re.search(r"`[0-9a-f]{7}`", section), f"{title}: a table without its commit"
        assert re.search(r"H100|H200|CPU", section), f"{title}: a table without its machine"


def test_readme_is_a_front_door() -> None:
    assert len(README.encode()) <= 12_000
    headings = re.findall(r"^## (.+)$", README, re.M)
    assert headings[:3] == ["Install", "Quickstart", "A short tour"]
    assert "make demo" in README and "make test" in README
    for link in re.findall(r"\]\(([^)#]+)", README):
        assert (ROOT / link).exists(), link


@pytest.mark.parametrize("index", range(len(python_snippets(README))))
def test_readme_snippet_runs(index: int, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # snippets may write files (run.json)
    code = python_snippets(README)[index]
    exec(compile(code, f"README.md snippet {index}", "exec"), {"__name__": f"readme_{index}"})
