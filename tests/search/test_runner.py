"""The problem-set runner: output checks, saving as it goes, interrupts, resume, exit codes, shares."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any, Sequence

import pytest

from thoughttree.search.runner import (
    Problem,
    Record,
    RunError,
    RunOptions,
    build_run,
    finish,
    merge_runs,
    run_problems,
)
from thoughttree.tree import ThoughtTree
from thoughttree.tree.serialize import RunFile, load_run, tree_to_dict

PROBLEMS = [Problem(id=str(i), data=i) for i in range(5)]
META = {"task": "squares", "seed": 3}


def totals(records: Sequence[Record]) -> dict[str, Any]:
    return {"solved": sum(int(r["result"]["answer"]) % 2 == 0 for r in records)}


class Solver:
    """Solves problem i with answer i*i; may fail on some and send itself a signal on one."""

    def __init__(self, fail: tuple[int, ...] = (), kill_on: int | None = None, sig: int = signal.SIGINT,
                 output: Path | None = None) -> None:
        self.fail, self.kill_on, self.sig, self.output = fail, kill_on, sig, output
        self.seen: list[int] = []
        self.saved_before: list[int] = []

    def __call__(self, problem: Problem) -> Record:
        i = problem.data
        self.seen.append(i)
        if self.output is not None and self.output.exists():
            self.saved_before.append(len(load_run(self.output).problems))
        tree = ThoughtTree(prompt=[1, 2])
        stopped = "done"
        try:
            tree.add_child(tree.root, [i], f"step {i}")
            if i == self.kill_on:
                os.kill(os.getpid(), self.sig)
                tree.add_child(tree.root, [i, i], "never reached")
        except KeyboardInterrupt:  # what search() does: keep the tree, say why it stopped
            stopped = "interrupted"
        result: dict[str, Any] = {"answer": str(i * i), "stopped": stopped,
                                  "statistics": {"generated_tokens": i, "prefill_tokens": 3}}
        if i in self.fail:
            result["error"] = f"model broke on {i}"
        return {"problem": i, "tree": tree_to_dict(tree), "result": result}


def strip_time(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    data.pop("wall_time")
    return data


def test_a_clean_run_saves_after_every_problem_and_exits_0(tmp_path):
    out = tmp_path / "run.json"
    solver = Solver(output=out)
    outcome = run_problems(PROBLEMS, solver, META, RunOptions(output=out, progress=False), totals=totals)
    assert outcome.exit_code == 0 and outcome.message() is None
    assert solver.saved_before == [1, 2, 3, 4]  # the file held every finished problem before the next began
    run = load_run(out)
    assert [p["id"] for p in run.problems] == ["0", "1", "2", "3", "4"] and run.meta == META
    assert run.totals["finished"] == run.totals["problem_count"] == 5
    assert run.totals["solved"] == 3 and run.totals["generated_tokens"] == 10 and run.totals["errors"] == 0
    assert run.totals["prefill_tokens"] == 15


def test_an_empty_output_file_is_not_a_run_file_and_is_never_replaced(tmp_path):
    out = tmp_path / "run.json"
    out.write_text("")
    with pytest.raises(RunError, match="is an empty file, not a thoughttree run file"):
        run_problems(PROBLEMS, Solver(), META, RunOptions(output=out, progress=False))
    assert out.read_text() == ""


@pytest.mark.parametrize("case", ["directory", "missing", "readonly"])
def test_a_bad_output_path_fails_before_any_work(tmp_path, case):
    if case == "directory":
        out, match = tmp_path, "is a directory"
    elif case == "missing":
        out, match = tmp_path / "nope" / "run.json", "does not exist"
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes into read-only directories")
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        out, match = ro / "run.json", "cannot write"
    solver = Solver()
    with pytest.raises(RunError, match=match):
        run_problems(PROBLEMS, solver, META, RunOptions(output=out, progress=False))
    assert solver.seen == [] and list(tmp_path.glob("*.tmp")) == []


def test_failed_searches_exit_1_with_count_and_first_error(tmp_path, capsys):
    outcome = run_problems(PROBLEMS, Solver(fail=(1, 3)), META, RunOptions(progress=False))
    assert outcome.exit_code == 1
    assert finish(outcome, "squares") == 1
    err = capsys.readouterr().err
    assert "2 of 5 searches failed" in err and "problem 1" in err and "model broke on 1" in err
    assert outcome.run.totals["errors"] == 2 and outcome.run.totals["finished"] == 5


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_saves_finished_and_partial_work_and_resume_ends_as_a_clean_run(tmp_path, sig, code):
    clean = tmp_path / "clean.json"
    run_problems(PROBLEMS, Solver(), META, RunOptions(output=clean, progress=False), totals=totals)
    out = tmp_path / "run.json"
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    solver = Solver(kill_on=2, sig=sig)
    outcome = run_problems(PROBLEMS, solver, META, RunOptions(output=out, progress=False), totals=totals)
    assert outcome.exit_code == code and solver.seen == [0, 1, 2]
    assert f"stopped by {signal.Signals(sig).name} after 2 of 5" in outcome.message()
    assert f"--resume {out}" in outcome.message()
    saved = load_run(out)
    assert [p["result"]["stopped"] for p in saved.problems] == ["done", "done", "interrupted"]
    assert len(saved.problems[2]["tree"]["nodes"]) == 2  # the partial tree of the current problem
    assert saved.totals["finished"] == 2 and saved.totals["solved"] == 1
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers  # restored

    again = Solver()
    outcome = run_problems(PROBLEMS, again, META, RunOptions(resume=out, progress=False), totals=totals)
    assert outcome.exit_code == 0 and again.seen == [2, 3, 4]
    assert strip_time(out) == strip_time(clean)


def test_an_interrupted_run_without_output_is_saved_in_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    outcome = run_problems(PROBLEMS, Solver(kill_on=1), META, RunOptions(progress=False))
    assert outcome.exit_code == 130 and outcome.path is not None and outcome.path.is_file()
    assert len(load_run(outcome.path).problems) == 2


def test_resume_refuses_another_runs_file(tmp_path):
    out = tmp_path / "run.json"
    run_problems(PROBLEMS, Solver(kill_on=1), META, RunOptions(output=out, progress=False))
    with pytest.raises(RunError, match=r"meta\.seed=3 there, 4 here; resume"):
        run_problems(PROBLEMS, Solver(), {**META, "seed": 4}, RunOptions(resume=out, progress=False))
    bfs = tmp_path / "bfs.json"
    run_problems(PROBLEMS, Solver(kill_on=1), {**META, "run": {"method": "bfs", "breadth": 2}},
                 RunOptions(output=bfs, progress=False))
    io = {**META, "seed": 4, "run": {"method": "io", "breadth": 5}}
    with pytest.raises(RunError, match=r"meta\.run\.method='bfs' there, 'io' here; meta\.run\.breadth=2 there, 5 here; "
                                       r"meta\.seed=3 there, 4 here; resume"):
        run_problems(PROBLEMS, Solver(), io, RunOptions(resume=bfs, progress=False))
    with pytest.raises(RunError, match="not this run's"):
        run_problems(PROBLEMS[2:], Solver(), META, RunOptions(resume=out, progress=False))


def test_duplicate_ids_are_refused():
    with pytest.raises(RunError, match="unique"):
        run_problems([Problem("a", 1), Problem("a", 2)], Solver(), META, RunOptions(progress=False))


def test_shares_of_the_problems_merge_into_the_whole_run(tmp_path):
    whole = run_problems(PROBLEMS, Solver(), META, RunOptions(progress=False), totals=totals).run
    parts = [
        run_problems(PROBLEMS, Solver(), META,
                     RunOptions(progress=False, select=lambda ps, r=rank: ps[r::2]), totals=totals).run
        for rank in range(2)
    ]
    assert [p["id"] for p in parts[1].problems] == ["1", "3"] and parts[1].totals["problem_count"] == 2
    parts[0].totals["wall_time"], parts[1].totals["wall_time"] = 3.0, 2.0
    merged = merge_runs(parts[::-1], PROBLEMS, totals)
    assert merged.totals["wall_time"] == 3.0  # the shares ran side by side
    for run in (merged, whole):
        run.totals.pop("wall_time")
    assert merged.to_dict() == whole.to_dict()


def test_build_run_counts_only_finished_records():
    records = [Solver()(Problem("0", 0)), {**Solver()(Problem("1", 1)), "result": {"stopped": "interrupted"}}]
    run = build_run(META, 4, records, totals, 1.5)
    assert run.totals["finished"] == 1 and run.totals["problem_count"] == 4 and run.totals["solved"] == 1


def test_a_search_interrupted_behind_the_handlers_back_stops_the_run_too(tmp_path):
    class Stops(Solver):
        def __call__(self, problem: Problem) -> Record:
            record = super().__call__(problem)
            if problem.data == 1:
                record["result"]["stopped"] = "interrupted"
            return record

    out = tmp_path / "run.json"
    solver = Stops()
    outcome = run_problems(PROBLEMS, solver, META, RunOptions(output=out, progress=False))
    assert outcome.exit_code == 130 and solver.seen == [0, 1] and load_run(out).totals["finished"] == 1


def test_resume_keeps_the_time_and_failures_so_far_and_the_problem_order(tmp_path):
    out = tmp_path / "run.json"
    run = run_problems(PROBLEMS, Solver(fail=(1,)), META, RunOptions(progress=False), totals=totals).run
    kept = [r for r in run.problems if r["id"] in ("0", "1", "3")]
    RunFile(meta=META, problems=kept, totals={**run.totals, "wall_time": 100.0}).save(out)
    again = Solver()
    outcome = run_problems(PROBLEMS, again, META, RunOptions(resume=out, progress=False), totals=totals)
    assert again.seen == [2, 4] and outcome.exit_code == 1 and "1 of 5 searches failed" in outcome.message()
    saved = load_run(out)
    assert [p["id"] for p in saved.problems] == ["0", "1", "2", "3", "4"]
    assert saved.totals["wall_time"] >= 100.0 and saved.totals["errors"] == 1


def test_a_signal_between_searches_stops_the_run_without_raising(tmp_path):
    out = tmp_path / "run.json"
    solver = Solver()
    try:
        outcome = run_problems(PROBLEMS, solver, META, RunOptions(output=out, progress=False),
                               on_record=lambda record, run: os.kill(os.getpid(), signal.SIGINT))
    except KeyboardInterrupt:
        pytest.fail("a signal outside a search raised KeyboardInterrupt")
    assert outcome.exit_code == 130 and solver.seen == [0] and load_run(out).totals["finished"] == 1


def test_a_second_signal_while_a_search_keeps_its_tree_is_remembered_not_raised(tmp_path):
    def solve(problem: Problem) -> Record:
        tree = ThoughtTree(prompt=[1, 2])
        stopped = "done"
        try:
            if problem.data == 1:
                os.kill(os.getpid(), signal.SIGINT)
        except KeyboardInterrupt:
            stopped = "interrupted"
            os.kill(os.getpid(), signal.SIGTERM)  # pressed again while the partial tree is kept
            tree.add_child(tree.root, [5], "kept")
        return {"problem": problem.data, "tree": tree_to_dict(tree), "result": {"stopped": stopped}}

    out = tmp_path / "run.json"
    outcome = run_problems(PROBLEMS, solve, META, RunOptions(output=out, progress=False))
    assert outcome.exit_code == 130 and "stopped by SIGINT" in outcome.message()
    saved = load_run(out)
    assert [p["result"]["stopped"] for p in saved.problems] == ["done", "interrupted"]
    assert len(saved.problems[1]["tree"]["nodes"]) == 2


def test_a_record_a_run_file_cannot_hold_is_refused_and_the_problems_before_it_stay_saved(tmp_path):
    out = tmp_path / "run.json"
    solver = Solver()

    def solve(problem: Problem) -> Record:
        record = solver(problem)
        if problem.data == 2:
            record["result"]["answer"] = 4  # a number, where run files hold text
        return record

    with pytest.raises(RunError, match=r"problem 2: .* \(result.answer must be a string or null, got 4\)"):
        run_problems(PROBLEMS, solve, META, RunOptions(output=out, progress=False))
    assert [p["id"] for p in load_run(out).problems] == ["0", "1"]
