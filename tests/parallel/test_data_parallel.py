"""A data-parallel Game of 24 run over two Gloo ranks writes the single-process run file; rank 0's merge,
parts and exit status with the other group stood in for."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from launch import ROOT, finish, rank_env, start
from run_files import without_clock

from thoughttree.cli import main
from thoughttree.search import data_parallel
from thoughttree.search.data_parallel import PART_KEY, Layout, run_problem_set
from thoughttree.search.runner import Problem, RunOptions, run_problems
from thoughttree.tree import ThoughtTree
from thoughttree.tree.serialize import RunFile, load_run, tree_to_dict

GAME24 = ["game24", "--device", "cpu", "--start", "900", "--end", "903", "--breadth", "2", "--samples", "4",
          "--evaluations", "1"]


def test_data_parallel_run_equals_single_process(tmp_path) -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each launched rank runs
    try:
        assert main([*GAME24, "--output", str(tmp_path / "single.json")]) == 0
    finally:
        torch.set_num_threads(threads)
    merged = tmp_path / "merged.json"
    # torchrun takes --start for its own --start-method: "--" ends its options.
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "thoughttree", "--", *GAME24, "--output", str(merged), "--data-parallel"]
    done = subprocess.run(cmd, cwd=ROOT, env=rank_env(0, 1, 0), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    single, parallel = json.loads((tmp_path / "single.json").read_text()), json.loads(merged.read_text())
    assert [p["id"] for p in parallel["problems"]] == ["900", "901", "902"]
    assert without_clock(parallel) == without_clock(single)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["merged.json", "single.json"]  # parts removed
    # A launch resumes a one-process run file: each group takes its share of the finished
    # problems (marked here, so a redone problem would show).
    marked = json.loads((tmp_path / "single.json").read_text())
    for record in marked["problems"]:
        record["result"]["marker"] = record["id"]
    (tmp_path / "marked.json").write_text(json.dumps(marked))
    cmd = [*cmd[:cmd.index("--output")], "--resume", str(tmp_path / "marked.json"), "--output", str(tmp_path / "again.json"),
           "--data-parallel"]
    done = subprocess.run(cmd, cwd=ROOT, env=rank_env(0, 1, 0), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    again = json.loads((tmp_path / "again.json").read_text())
    assert [p["result"].get("marker") for p in again["problems"]] == ["900", "901", "902"]


def test_dying_rank_leaves_no_merged_run(tmp_path) -> None:
    output = tmp_path / "run.json"
    worker = str(Path(__file__).with_name("dying_rank.py"))
    procs = start([worker, *GAME24, "--end", "902", "--output", str(output), "--data-parallel"], world=2)
    (status0, text0), (status1, _) = finish(procs, timeout=200)  # the last --end wins: rank 0 runs 900 only
    assert status1 == 9 and status0 == 1, text0[-2000:]
    assert "data-parallel merge failed on rank 0 of 2: a rank died" in text0
    assert not output.exists()
    part = json.loads((tmp_path / "run.json.part-1-of-2").read_text())
    assert part["meta"][PART_KEY] == {"part": 1, "parts": 2}  # marked: never taken for the whole run
    # One process cannot take the parts; a launch of as many groups resumes them and merges.
    assert main([*GAME24, "--end", "902", "--resume", str(output)]) == 2
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "thoughttree",
           "--", *GAME24, "--end", "902", "--resume", str(output), "--data-parallel"]
    done = subprocess.run(cmd, cwd=ROOT, env=rank_env(0, 1, 0), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    merged = json.loads(output.read_text())
    assert [p["id"] for p in merged["problems"]] == ["900", "901"]
    assert merged["problems"][0] == part["problems"][0]  # rank 0's finished problem was kept, not redone
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]


def test_a_launch_needs_an_output(capsys, monkeypatch) -> None:
    monkeypatch.setattr(data_parallel, "join_data_parallel", lambda *a, **k: type(
        "L", (), {"groups": 2, "world": 2})())
    assert main([*GAME24, "--data-parallel"]) == 2
    assert "a launch over several ranks needs --output" in capsys.readouterr().err


def squares(problem: Problem) -> dict[str, Any]:
    tree = ThoughtTree(prompt=[1])
    tree.add_child(tree.root, [2], str(problem.data))
    return {"problem": problem.data, "tree": tree_to_dict(tree), "result": {"answer": str(problem.data ** 2)}}


PROBLEMS = [Problem(str(i), i) for i in range(6)]
META = {"task": "squares", "device": "cuda:1"}  # as rank 1 of a launch asked for "cuda" sees it


def rank0_of_two_groups(monkeypatch, others: int, signal_while_waiting: bool = False) -> Layout:
    """Rank 0 of a two-group launch whose other group finished ``others`` of its problems."""
    other = run_problems(PROBLEMS, squares, META, RunOptions(progress=False, select=lambda ps: ps[1::2][:others])).run

    def gather(layout: Layout, part: RunFile | None) -> list[RunFile]:
        if signal_while_waiting:
            os.kill(os.getpid(), signal.SIGTERM)
        return [part, other]

    monkeypatch.setattr(data_parallel, "_gather", gather)
    monkeypatch.setattr(data_parallel, "_share", lambda layout, flag: flag)
    return Layout(rank=0, world=2, tensor_parallel=1, device=torch.device("cpu"), requested="cuda", coordinator=None)


def test_groups_take_every_problem_once_whatever_the_tensor_parallel_size() -> None:
    layouts = [Layout(rank, 6, 2, torch.device("cpu"), "cpu", None) for rank in range(6)]
    assert [layout.share(PROBLEMS) for layout in layouts if layout.leader] == [PROBLEMS[g::3] for g in range(3)]
    assert layouts[3].share(PROBLEMS) == layouts[2].share(PROBLEMS)  # one group, one share


@pytest.mark.parametrize("late", [False, True])  # a signal once every problem is done changes nothing
def test_a_complete_launch_merges_with_the_requested_device_and_removes_its_part(tmp_path, monkeypatch, late) -> None:
    out = tmp_path / "run.json"
    outcome = run_problem_set(PROBLEMS, squares, META, RunOptions(output=out, progress=False),
                              layout=rank0_of_two_groups(monkeypatch, others=3, signal_while_waiting=late))
    assert outcome.exit_code == 0 and sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]
    merged = load_run(out)
    assert merged.meta == {**META, "device": "cuda"} and merged.totals["finished"] == 6
    assert [p["id"] for p in merged.problems] == [p.id for p in PROBLEMS]


def test_a_launch_stopped_anywhere_keeps_its_parts_and_says_so(tmp_path, monkeypatch) -> None:
    out = tmp_path / "run.json"
    outcome = run_problem_set(PROBLEMS, squares, META, RunOptions(output=out, progress=False),
                              layout=rank0_of_two_groups(monkeypatch, others=1, signal_while_waiting=True))
    assert outcome.exit_code == 143 and "stopped by SIGTERM after 4 of 6" in outcome.message()
    assert load_run(tmp_path / "run.json.part-1-of-2").totals["finished"] == 3  # kept for --resume
    assert load_run(out).totals["finished"] == 4


def test_a_launch_whose_other_group_stopped_exits_1_on_rank_0_and_says_so(tmp_path, monkeypatch) -> None:
    out = tmp_path / "run.json"
    outcome = run_problem_set(PROBLEMS, squares, META, RunOptions(output=out, progress=False),
                              layout=rank0_of_two_groups(monkeypatch, others=1))  # no signal reaches rank 0
    assert outcome.signal is None and outcome.exit_code == 1
    assert outcome.message() == (f"4 of 6 problems finished: another process of the launch stopped early; "
                                 f"saved to {out}; continue with --resume {out}")
    assert load_run(tmp_path / "run.json.part-1-of-2").totals["finished"] == 3  # kept for --resume
