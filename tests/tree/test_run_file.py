"""Run files: totals at the top level survive a round trip; reserved keys are refused."""

from __future__ import annotations

import json

import pytest

from thoughttree.tree import ThoughtTree
from thoughttree.tree import serialize
from thoughttree.tree.serialize import EntryTexts, RunFile, RunFileError, load_run, tree_to_dict


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


def test_cached_entry_texts_give_the_same_bytes_and_encode_each_entry_once(monkeypatch) -> None:
    entries = [{"id": str(i), "tree": {"nodes": [{"text": "a\nb\"", "value": 0.5 * i}]}, "result": {"ok": i % 2 == 0}}
               for i in range(4)]
    cache = EntryTexts()
    for n in range(len(entries) + 1):
        run = RunFile(meta={"seed": 0}, problems=entries[:n], totals={"wall_time": float(n)})
        assert run.to_text(cache) == run.to_text()
    calls = []
    real = serialize._dumps
    monkeypatch.setattr(serialize, "_dumps", lambda data: calls.append(data) or real(data))
    RunFile(meta={}, problems=entries + [{"id": "new"}], totals={}).to_text(cache)
    assert [c for c in calls if c in entries] == []  # old entries come from the cache
    assert {"id": "new"} in calls


def test_cached_text_falls_back_when_a_value_looks_like_the_stand_in() -> None:
    run = RunFile(meta={"note": serialize._SLOT}, problems=[{"id": "a"}], totals={})
    assert json.loads(run.to_text(EntryTexts())) == json.loads(run.to_text())
    assert run.to_text(EntryTexts()) == run.to_text()
