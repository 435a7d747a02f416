"""The results-table script runs each row as `thoughttree game24` with the row's flags would."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from thoughttree.search.game24_methods import Game24Run
from thoughttree.tree.serialize import RunFile

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "game24_table.py"


class Searched(Exception):
    """Raised by the stand-in for run_game24 when the script reaches a search row."""


def test_search_rows_use_the_command_defaults_of_their_method(tmp_path, monkeypatch) -> None:
    spec = importlib.util.spec_from_file_location("game24_table", SCRIPT)
    table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table)
    runs: list[Game24Run] = []

    def run_game24(lm, run):
        runs.append(run)
        if run.method in table.SEARCHES:
            raise Searched
        return type("Outcome", (), {"run": RunFile(meta={}, problems=[], totals={"success_rate": 0.0})})()

    monkeypatch.setattr(table, "run_game24", run_game24)
    monkeypatch.setattr(sys, "argv", ["game24_table.py", "--device", "cpu", "--methods", "dfs", "--out", str(tmp_path)])
    with pytest.raises(Searched):
        table.main()
    assert runs[-1] == Game24Run(method="dfs", start=900, end=1000, seed=0)  # --samples 10, not BFS's 30
    assert [r.method for r in runs] == ["io", "io", "cot", "cot", "dfs"]


def test_curves_of_every_row_on_a_named_range(tmp_path, monkeypatch, capsys) -> None:
    spec = importlib.util.spec_from_file_location("game24_table", SCRIPT)
    table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table)
    runs: list[Game24Run] = []

    def run_game24(lm, run):
        runs.append(run)
        sample = {"tokens": 40, "correct": True, "logprob": -0.5}
        problems = [
            {
                "problem": str(i),
                "result": {"correct": True, "statistics": {"generated_tokens": 500.0}, "samples": [sample] * run.k},
            }
            for i in run.indices
        ]
        totals = {
            "success_rate": 1.0,
            "puzzles": len(problems),
            "generated_tokens": 500 * len(problems),
            "prefill_tokens": 0,
            "wall_time": 1.0,
            "average_sample_accuracy": 1.0,
        }
        return type("Outcome", (), {"run": RunFile(meta={}, problems=problems, totals=totals)})()

    monkeypatch.setattr(table, "run_game24", run_game24)
    monkeypatch.setattr(table, "load_model", lambda *a: type("LM", (), {"device": type("D", (), {"type": "cpu"})()})())
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "game24_table.py",
            "--methods",
            "bfs",
            "--range",
            "800-801",
            "--distinct",
            "--token-budget",
            "900",
            "--png",
            str(tmp_path / "c.png"),
            "--out",
            str(tmp_path),
        ],
    )
    table.main()
    assert all(r.indices == (800, 801) and r.distinct for r in runs)
    assert [r.max_tokens_per_problem for r in runs if r.method == "bfs"] == [900, 900]
    out = capsys.readouterr().out
    assert "| ToT BFS, b=5 | 2 |" in out and "IO best-of-k, log-prob" in out
