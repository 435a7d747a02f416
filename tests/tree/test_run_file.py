"""Run files: totals at the top level survive a round trip; reserved keys are refused."""

from __future__ import annotations

import json

import pytest

from thoughttree.tree import ThoughtTree
from thoughttree.tree.serialize import RunFile, RunFileError, load_run, tree_to_dict


def test_totals_round_trip(tmp_path) -> None:
    tree = ThoughtTree(prompt=[1, 2, 3])
    tree.add_child(tree.root, [4], "x")
    run = RunFile(meta={"seed": 0}, problems=[{"problem": "p", "tree": tree_to_dict(tree)}],
                  totals={"success_rate": 0.5, "wall_time": 1.25})
    path = tmp_path / "run.json"
    run.save(path)
    raw = json.loads(path.read_text())
    assert raw["success_rate"] == 0.5 and raw["meta"] == {"seed": 0}
    back = load_run(path)
    assert back.totals == run.totals and back.meta == run.meta and back.problems == run.problems


def test_reserved_total_names_are_refused(tmp_path) -> None:
    with pytest.raises(RunFileError, match="reserved"):
        RunFile(totals={"problems": 3}).save(tmp_path / "run.json")
