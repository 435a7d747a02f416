"""Loading APPS problems: JSON-lines rows, the original folder layout, or the bundled train-split sample.

Rows carry ``problem_id``, ``question``, ``solutions``, ``input_output``, ``difficulty``, ``url``
and ``starter_code``; ``solutions`` and ``input_output`` may be JSON strings (as in the rows
people download) or already decoded. The folder layout is APPS's own: ``<split>/<id>/question.txt``,
``input_output.json``, ``metadata.json`` (difficulty, url), ``starter_code.py`` and
``solutions.json`` (the last two optional). Call-based outputs are kept as APPS stores them
(usually the return value wrapped in a one-element list); the sandbox's comparison accepts
both that wrapping and the bare value, as APPS's own checker does.

The bundled sample (``data="bundled"``) holds 87 problems of the APPS **train** split (see
``data/README.md``): for trying the task, not for reporting APPS test results.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Iterable

from ..code.problem import CodeProblem, split_public

DIFFICULTIES = ("introductory", "interview", "competition")
BUNDLED = "bundled"
BUNDLED_SPLIT = "train"


class AppsDataError(ValueError):
    """APPS data that cannot be read; the message names the file and what is wrong."""


def bundled_path() -> Path:
    return Path(str(resources.files("thoughttree.tasks.apps").joinpath("data/train_sample.jsonl")))


@dataclass(frozen=True)
class Selection:
    """Which problems to take: a difficulty (or "all") and a range of positions in the data, end exclusive."""

    difficulty: str = "all"
    start: int = 0
    end: int | None = None

    def __post_init__(self) -> None:
        if self.difficulty not in (*DIFFICULTIES, "all"):
            raise ValueError(f"difficulty must be one of {', '.join(DIFFICULTIES)} or all, got {self.difficulty!r}")
        if self.start < 0 or (self.end is not None and self.end <= self.start):
            raise ValueError(f"the range start={self.start}, end={self.end} is empty; need 0 <= start < end")


def load(data: str | Path, selection: Selection | None = None) -> list[CodeProblem]:
    """Problems from ``"bundled"``, a ``.jsonl`` file or an APPS split folder, filtered by ``selection``.

    The range applies to the problems' positions in the data (file order, or folder names in
    order) before the difficulty filter, so ``start``/``end`` mean the same for every difficulty.
    """
    selection = selection or Selection()
    path = bundled_path() if str(data) == BUNDLED else Path(data)
    if path.is_dir():
        rows = list(_folder_rows(path))
    elif path.is_file():
        rows = list(_jsonl_rows(path))
    else:
        raise AppsDataError(f"{path}: no such file or folder; pass 'bundled', a .jsonl file or an APPS split folder")
    if not rows:
        raise AppsDataError(f"{path}: holds no problems")
    if selection.start >= len(rows):
        raise AppsDataError(f"start {selection.start} is beyond the data: {path} holds {len(rows)} problems "
                            f"(positions 0..{len(rows) - 1})")
    picked = rows[selection.start:selection.end]
    problems = [problem_from_row(row, f"{path} problem {row.get('problem_id')}") for row in picked]
    if selection.difficulty != "all":
        problems = [p for p in problems if p.difficulty == selection.difficulty]
    if not problems:
        raise AppsDataError(f"{path}: no {selection.difficulty} problems among positions "
                            f"{selection.start}..{(selection.end or len(rows)) - 1}")
    return problems


def _jsonl_rows(path: Path) -> Iterable[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise AppsDataError(f"{path} line {number}: not JSON ({exc.msg}); expected one APPS row per line") from None
            if not isinstance(row, dict):
                raise AppsDataError(f"{path} line {number}: expected a JSON object, got {type(row).__name__}")
            yield row


def _folder_rows(root: Path) -> Iterable[dict[str, Any]]:
    folders = sorted(p for p in root.iterdir() if p.is_dir() and (p / "question.txt").is_file())
    if not folders:
        raise AppsDataError(f"{root}: no problem folders (<id>/question.txt); point at an APPS split such as APPS/test")
    for folder in folders:
        meta_file = folder / "metadata.json"
        meta = _read_json(meta_file) if meta_file.is_file() else {}
        io_file = folder / "input_output.json"
        if not io_file.is_file():
            raise AppsDataError(f"{folder}: no input_output.json; every problem needs its tests")
        starter = folder / "starter_code.py"
        solutions = folder / "solutions.json"
        yield {
            "problem_id": int(folder.name) if folder.name.isdigit() else folder.name,
            "question": (folder / "question.txt").read_text(encoding="utf-8"),
            "input_output": _read_json(io_file),
            "solutions": _read_json(solutions) if solutions.is_file() else [],
            "difficulty": meta.get("difficulty", ""),
            "url": meta.get("url", ""),
            "starter_code": starter.read_text(encoding="utf-8") if starter.is_file() else "",
        }


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise AppsDataError(f"{path}: not JSON ({exc.msg})") from None


def _decoded(value: Any, what: str, where: str) -> Any:
    if isinstance(value, str):
        if not value.strip():
            return None
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise AppsDataError(f"{where}: {what} is not valid JSON ({exc.msg})") from None
    return value


def problem_from_row(row: dict[str, Any], where: str = "row") -> CodeProblem:
    """One APPS row as a :class:`CodeProblem` (public tests: the statement's examples; see ``split_public``)."""
    missing = [k for k in ("problem_id", "question", "input_output") if k not in row]
    if missing:
        raise AppsDataError(f"{where}: missing {', '.join(missing)}; APPS rows have problem_id, question, "
                            "solutions, input_output, difficulty, url, starter_code")
    io = _decoded(row["input_output"], "input_output", where)
    if not isinstance(io, dict) or not isinstance(io.get("inputs"), list) or not isinstance(io.get("outputs"), list):
        raise AppsDataError(f"{where}: input_output needs lists 'inputs' and 'outputs'")
    if len(io["inputs"]) != len(io["outputs"]):
        raise AppsDataError(f"{where}: {len(io['inputs'])} inputs but {len(io['outputs'])} outputs")
    fn_name = io.get("fn_name") or None
    if fn_name is None:
        tests = [(_as_text(i), _as_text(o)) for i, o in zip(io["inputs"], io["outputs"])]
    else:
        tests = [(i if isinstance(i, list) else [i], o) for i, o in zip(io["inputs"], io["outputs"])]
    solutions = _decoded(row.get("solutions"), "solutions", where) or []
    difficulty = str(row.get("difficulty") or "")
    if difficulty and difficulty not in DIFFICULTIES:
        raise AppsDataError(f"{where}: unknown difficulty {difficulty!r}; APPS uses {', '.join(DIFFICULTIES)}")
    try:
        public, hidden = split_public(tests, str(row["question"]), fn_name=fn_name)
    except ValueError as exc:
        raise AppsDataError(f"{where}: {exc}") from None
    return CodeProblem(
        key=str(row["problem_id"]), statement=str(row["question"]), public=public, hidden=hidden, fn_name=fn_name,
        starter_code=str(row.get("starter_code") or ""), difficulty=difficulty,
        solutions=tuple(str(s) for s in solutions), info={"url": str(row.get("url") or "")},
    )


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else "\n".join(map(str, value)) if isinstance(value, list) else str(value)

