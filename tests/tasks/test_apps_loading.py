"""Reading APPS data: JSON-lines rows and the folder layout, and the errors bad data gets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from thoughttree.tasks import apps

IO = {"inputs": ["1\n", "2\n", "3\n"], "outputs": ["2\n", "4\n", "6\n"]}


def row(problem_id, **fields) -> dict:
    return {"problem_id": problem_id, "question": "Double it.\nExample: 1 -> 2", "input_output": json.dumps(IO),
            "solutions": json.dumps(["print(int(input()) * 2)\n"]), "difficulty": "introductory", **fields}


def jsonl(tmp_path: Path, *rows: dict | bytes) -> Path:
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b"".join(r if isinstance(r, bytes) else json.dumps(r).encode() + b"\n" for r in rows))
    return path


def folders(tmp_path: Path, count: int = 3) -> Path:
    root = tmp_path / "test"
    for i in range(count):
        folder = root / f"{i:04d}"
        folder.mkdir(parents=True)
        (folder / "question.txt").write_text(f"Problem {i}: double it.\nExample: 1 -> 2")
        (folder / "input_output.json").write_text(json.dumps(IO))
        (folder / "metadata.json").write_text(json.dumps({"difficulty": "interview", "url": f"u{i}"}))
        (folder / "solutions.json").write_text(json.dumps(["print(int(input()) * 2)\n"]))
    return root


@pytest.mark.parametrize("bad, message", [
    (b'{"problem_id": 2, "question": "caf\xe9"}\n', "line 2: not UTF-8 text"),
    (b"{not json\n", "line 2: not JSON"),
    (row(2, solutions=5), "solutions must be a list of program texts"),
    (row(2, input_output=json.dumps({**IO, "fn_name": "foo-bar"})), "is not a Python function name"),
    (row(2, input_output=json.dumps({**IO, "fn_name": 123})), "is not a Python function name"),
    (row(2, input_output=json.dumps({**IO, "fn_name": "class"})), "is not a Python function name"),
    (row(2, question=None), "question must be the problem statement's text"),
    (row(2, question=["Double it."]), "question must be the problem statement's text"),
    (row(1), "problem id 1 appears at positions 0 and 1"),
    (row(2, input_output=json.dumps({"inputs": ["1\n"], "outputs": ["2\n"]})), "choose a range of problems without it"),
])
def test_bad_rows_get_an_error_that_names_the_line_or_problem(tmp_path, bad, message):
    path = jsonl(tmp_path, row(1), bad)
    with pytest.raises(apps.AppsDataError, match=message):
        apps.load(path)


def test_rows_outside_the_range_are_not_checked_but_must_parse(tmp_path):
    path = jsonl(tmp_path, row(1), row(2, solutions=5))
    assert [p.key for p in apps.load(path, apps.Selection(end=1))] == ["1"]
    assert apps.find(path, "1").key == "1" and apps.find(path, "7") is None
    assert apps.problem_ids(path) == ["1", "2"]


def test_the_folder_layout_reads_only_the_problems_asked_for(tmp_path):
    root = folders(tmp_path)
    (root / "0002" / "input_output.json").unlink()
    (root / "0001" / "metadata.json").write_text("[1, 2]")
    problems = apps.load(root, apps.Selection(end=1))
    assert [(p.key, p.difficulty, p.info["url"]) for p in problems] == [("0", "interview", "u0")]
    assert apps.find(root, "0000").key == "0"
    with pytest.raises(apps.AppsDataError, match="0001/metadata.json: expected a JSON object"):
        apps.find(root, "1")
    with pytest.raises(apps.AppsDataError, match="0002: no input_output.json; a problem needs its tests"):
        apps.load(root, apps.Selection(start=2))


@pytest.mark.parametrize("damage, message", [
    (lambda f: (f / "question.txt").unlink(), "no question.txt, so the problem positions after it would shift"),
    (lambda f: (f / "question.txt").write_bytes(b"caf\xe9"), "question.txt: not UTF-8 text"),
    (lambda f: (f / "input_output.json").write_bytes(b'{"inputs": ["\xff"]}'), "input_output.json: not UTF-8 text"),
    (lambda f: (f / "solutions.json").write_text('"print(1)"'), "solutions.json: expected a JSON list of programs"),
])
def test_a_damaged_folder_is_named(tmp_path, damage, message):
    root = folders(tmp_path)
    damage(root / "0001")
    with pytest.raises(apps.AppsDataError, match=message):
        apps.load(root)
