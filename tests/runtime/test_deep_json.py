"""Deeply nested JSON in a run file gets the usual one-line corrupt-file error, from every command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from thoughttree.cli import main
from thoughttree.tree import ThoughtTree
from thoughttree.tree.serialize import MAX_DEPTH, RunFile, RunFileError, load_run, tree_to_dict

LEVELS = 100_000


def _deep_run_file(path: Path, where: str) -> Path:
    deep = "[" * LEVELS + "]" * LEVELS
    if where == "meta":
        path.write_text('{"format": "thoughttree.run", "version": 1, "meta": {"x": ' + deep + '}, "problems": []}')
    else:
        tree = tree_to_dict(ThoughtTree(prompt=[1, 2]))
        tree["nodes"][0]["metadata"] = {"x": "SLOT"}
        text = json.dumps(
            {
                "format": "thoughttree.run",
                "version": 1,
                "meta": {},
                "problems": [{"id": "0", "problem": "p", "tree": tree, "result": {}}],
            }
        )
        path.write_text(text.replace('"SLOT"', deep))
    return path


@pytest.mark.parametrize("where", ["meta", "node-metadata"])
@pytest.mark.parametrize("command", [["show"], ["stats"], ["export", "--format", "dot"], ["game24", "--resume"]])
def test_deep_nesting_is_a_corrupt_run_file(tmp_path: Path, capsys, where: str, command: list[str]):
    path = _deep_run_file(tmp_path / "deep.json", where)
    before = path.read_bytes()
    argv = [*command, str(path)] + (["--end", "901"] if command[0] == "game24" else [])
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"nests JSON values more than {MAX_DEPTH} levels deep; the file is corrupt" in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert path.read_bytes() == before


def test_nesting_within_the_limit_loads(tmp_path: Path):
    value: list = []
    for _ in range(MAX_DEPTH - 3):
        value = [value]
    RunFile(meta={"x": value}).save(tmp_path / "ok.json")
    assert load_run(tmp_path / "ok.json").meta["x"] == value
    RunFile(meta={"x": [[[[[value]]]]]}).save(tmp_path / "deep.json")
    with pytest.raises(RunFileError, match="levels deep"):
        load_run(tmp_path / "deep.json")
