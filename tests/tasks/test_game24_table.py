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
