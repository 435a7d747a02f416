"""Run files: totals survive a round trip; reserved keys and newer formats are refused; saves are atomic."""

from __future__ import annotations

import json
import math
from pathlib import Path

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


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch) -> None:
    path = tmp_path / "run.json"
    RunFile(meta={"seed": 0}, problems=[{"id": "0"}], totals={}).save(path)
    before = path.read_bytes()
    real = Path.write_text

    def disk_full(self: Path, text: str, *args, **kwargs) -> int:
        real(self, text[: len(text) // 2], *args, **kwargs)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", disk_full)
    with pytest.raises(OSError, match="No space"):
        RunFile(meta={"seed": 0}, problems=[{"id": "0"}, {"id": "1"}], totals={}).save(path)
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]


def test_files_of_a_newer_format_are_refused(tmp_path) -> None:
    tree = ThoughtTree(prompt=[1, 2])
    path = tmp_path / "run.json"
    RunFile(meta={}, problems=[{"problem": "p", "tree": tree_to_dict(tree)}], totals={}).save(path)
    data = json.loads(path.read_text())
    (tmp_path / "newer.json").write_text(json.dumps({**data, "version": serialize.VERSION + 1}))
    with pytest.raises(RunFileError, match="newer thoughttree .*upgrade"):
        load_run(tmp_path / "newer.json")
    data["problems"][0]["tree"]["version"] = serialize.VERSION + 1
    (tmp_path / "newer_tree.json").write_text(json.dumps(data))
    with pytest.raises(RunFileError, match="problem 0: the tree .*newer thoughttree"):
        load_run(tmp_path / "newer_tree.json")


def test_values_json_cannot_hold_save_as_null(tmp_path) -> None:
    tree = ThoughtTree(prompt=[1, 2])
    child = tree.add_child(tree.root, [3], "x")
    child.value, child.logprob = float("nan"), float("-inf")
    path = tmp_path / "run.json"
    RunFile(meta={}, problems=[{"tree": tree_to_dict(tree)}], totals={}).save(path)
    node = json.loads(path.read_text())["problems"][0]["tree"]["nodes"][1]
    assert node["value"] is None and node["logprob"] is None
    back = load_run(path).trees()[0][1]
    assert back.value is None and math.isnan(back.logprob)
