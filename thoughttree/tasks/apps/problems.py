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
import keyword
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Iterable

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
    Only the problems in the range are read in full (a folder's files) and checked.
    """
    selection = selection or Selection()
    path, ids, read = _entries(data)
    if selection.start >= len(ids):
        raise AppsDataError(f"start {selection.start} is beyond the data: {path} holds {len(ids)} problems "
                            f"(positions 0..{len(ids) - 1})")
    positions = range(len(ids))[selection.start:selection.end]
    problems = [problem_from_row(read(i), f"{path} problem {ids[i]}") for i in positions]
    if selection.difficulty != "all":
        problems = [p for p in problems if p.difficulty == selection.difficulty]
    if not problems:
        raise AppsDataError(f"{path}: no {selection.difficulty} problems among positions "
                            f"{selection.start}..{(selection.end or len(ids)) - 1}")
    return problems


def find(data: str | Path, key: str) -> CodeProblem | None:
    """The problem whose id is ``key`` ("0002" finds the folder or id 2), reading only that one;
    None when there is none."""
    path, ids, read = _entries(data)
    wanted = {key, key.lstrip("0") or "0"} if key.isdigit() else {key}
    for i, problem_id in enumerate(ids):
        if problem_id in wanted:
            return problem_from_row(read(i), f"{path} problem {problem_id}")
    return None


def problem_ids(data: str | Path) -> list[str]:
    """Every problem's id, in the data's order."""
    return _entries(data)[1]


def _entries(data: str | Path) -> tuple[Path, list[str], Callable[[int], dict[str, Any]]]:
    """(the data's path, each problem's id, a reader of the row at a position); ids must be unique."""
    path = bundled_path() if str(data) == BUNDLED else Path(data)
    if path.is_dir():
        folders = _problem_folders(path)
        ids = [_folder_id(f) for f in folders]
        read: Callable[[int], dict[str, Any]] = lambda i: _folder_row(folders[i])  # noqa: E731
    elif path.is_file():
        rows = list(_jsonl_rows(path))
        for number, row in rows:
            if "problem_id" not in row:
                raise AppsDataError(f"{path} line {number}: no problem_id; APPS rows have problem_id, question, "
                                    "solutions, input_output, difficulty, url, starter_code")
        ids = [str(row["problem_id"]) for _, row in rows]
        read = lambda i: rows[i][1]  # noqa: E731
    else:
        raise AppsDataError(f"{path}: no such file or folder; pass 'bundled', a .jsonl file or an APPS split folder")
    if not ids:
        raise AppsDataError(f"{path}: holds no problems")
    first: dict[str, int] = {}
    for i, problem_id in enumerate(ids):
        if problem_id in first:
            raise AppsDataError(f"{path}: problem id {problem_id} appears at positions {first[problem_id]} and {i}; "
                                "ids must be unique (remove or renumber one)")
        first[problem_id] = i
    return path, ids, read


def _jsonl_rows(path: Path) -> Iterable[tuple[int, dict[str, Any]]]:
    """(line number, row) for each row of a JSON-lines file."""
    with path.open("rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise AppsDataError(f"{path} line {number}: not UTF-8 text (byte {exc.start} of the line); "
                                    "APPS rows are UTF-8 JSON") from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise AppsDataError(
                    f"{path} line {number}: not JSON ({exc.msg}); expected one APPS row per line") from None
            if not isinstance(row, dict):
                raise AppsDataError(f"{path} line {number}: expected a JSON object, got {type(row).__name__}")
            yield number, row


def _problem_folders(root: Path) -> list[Path]:
    folders = sorted(p for p in root.iterdir() if p.is_dir())
    if not any((f / "question.txt").is_file() for f in folders):
        raise AppsDataError(f"{root}: no problem folders (<id>/question.txt); point at an APPS split such as APPS/test")
    for folder in folders:
        if not (folder / "question.txt").is_file():
            raise AppsDataError(f"{folder}: no question.txt, so the problem positions after it would shift; "
                                "restore the file or remove the folder")
    return folders


def _folder_id(folder: Path) -> str:
    return str(int(folder.name)) if folder.name.isdigit() else folder.name


def _folder_row(folder: Path) -> dict[str, Any]:
    meta_file = folder / "metadata.json"
    meta = _read_json(meta_file) if meta_file.is_file() else {}
    if not isinstance(meta, dict):
        raise AppsDataError(f"{meta_file}: expected a JSON object (difficulty, url), got {type(meta).__name__}")
    io_file = folder / "input_output.json"
    if not io_file.is_file():
        raise AppsDataError(f"{folder}: no input_output.json; a problem needs its tests (restore the file, or "
                            "choose a range of problems without it)")
    starter = folder / "starter_code.py"
    solutions_file = folder / "solutions.json"
    solutions = _read_json(solutions_file) if solutions_file.is_file() else []
    if not isinstance(solutions, list):
        raise AppsDataError(f"{solutions_file}: expected a JSON list of programs, got {type(solutions).__name__}")
    return {
        "problem_id": _folder_id(folder),
        "question": _read_text(folder / "question.txt"),
        "input_output": _read_json(io_file),
        "solutions": solutions,
        "difficulty": meta.get("difficulty", ""),
        "url": meta.get("url", ""),
        "starter_code": _read_text(starter) if starter.is_file() else "",
    }


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise AppsDataError(f"{path}: not UTF-8 text (byte {exc.start}); APPS files are UTF-8") from None
    except OSError as exc:
        raise AppsDataError(f"{path}: cannot read ({exc.strerror or exc})") from None


def _read_json(path: Path) -> Any:
    try:
        return json.loads(_read_text(path))
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
    if not isinstance(row["question"], str) or not row["question"].strip():
        raise AppsDataError(f"{where}: question must be the problem statement's text, got {row['question']!r:.60}")
    io = _decoded(row["input_output"], "input_output", where)
    if not isinstance(io, dict) or not isinstance(io.get("inputs"), list) or not isinstance(io.get("outputs"), list):
        raise AppsDataError(f"{where}: input_output needs lists 'inputs' and 'outputs'")
    if len(io["inputs"]) != len(io["outputs"]):
        raise AppsDataError(f"{where}: {len(io['inputs'])} inputs but {len(io['outputs'])} outputs")
    fn_name = io.get("fn_name") or None
    if fn_name is not None and not (isinstance(fn_name, str) and fn_name.isidentifier()
                                    and not keyword.iskeyword(fn_name)):
        raise AppsDataError(f"{where}: input_output's fn_name {fn_name!r} is not a Python function name")
    if fn_name is None:
        tests: list[tuple[Any, Any]] = [(_as_text(i), _as_text(o)) for i, o in zip(io["inputs"], io["outputs"])]
    else:
        tests = [(i if isinstance(i, list) else [i], o) for i, o in zip(io["inputs"], io["outputs"])]
    solutions = _decoded(row.get("solutions"), "solutions", where) or []
    if not isinstance(solutions, list) or not all(isinstance(x, str) for x in solutions):
        raise AppsDataError(f"{where}: solutions must be a list of program texts, got {type(solutions).__name__}")
    difficulty = str(row.get("difficulty") or "")
    if difficulty and difficulty not in DIFFICULTIES:
        raise AppsDataError(f"{where}: unknown difficulty {difficulty!r}; APPS uses {', '.join(DIFFICULTIES)}")
    try:
        public, hidden = split_public(tests, str(row["question"]), fn_name=fn_name)
    except ValueError as exc:
        raise AppsDataError(f"{where}: {exc}; fix its tests, or choose a range of problems without it") from None
    return CodeProblem(
        key=str(row["problem_id"]), statement=str(row["question"]), public=public, hidden=hidden, fn_name=fn_name,
        starter_code=str(row.get("starter_code") or ""), difficulty=difficulty,
        solutions=tuple(str(s) for s in solutions), info={"url": str(row.get("url") or "")},
    )


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else "\n".join(map(str, value)) if isinstance(value, list) else str(value)

