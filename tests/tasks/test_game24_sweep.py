"""The sweep script chooses settings on the validation range only and runs the test range once per choice."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

from thoughttree.search.game24_methods import Game24Run
from thoughttree.tree.serialize import RunFile

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "game24_sweep.py"


def test_settings_are_chosen_on_validation_and_the_test_range_runs_once_each(tmp_path, monkeypatch) -> None:
    spec = importlib.util.spec_from_file_location("game24_sweep", SCRIPT)
    sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sweep)
    runs: list[Game24Run] = []

    def run_game24(lm, run):
        runs.append(run)
        # BFS solves more with more distinct proposals and spends 500 tokens per proposal and puzzle.
        rate = {
            "bfs": run.samples / 25 if run.distinct else 0.5,
            "mcts": 1.0 if run.rule == "puct" and run.widening is None else 0.5,
            "beam": 1.0 if run.distinct else 0.5,
        }.get(run.method, 0.5)
        tokens = 500.0 * (run.samples or 1) if run.method == "bfs" else 1000.0
        good = rate >= 0.9
        problems = [
            {
                "problem": str(i),
                "result": {
                    "correct": good,
                    "statistics": {"generated_tokens": tokens},
                    "samples": [{"tokens": 50, "correct": False, "logprob": -1.0}] * 8,
                },
            }
            for i in run.indices
        ]
        totals = {
            "success_rate": rate,
            "puzzles": len(problems),
            "generated_tokens": tokens * len(problems),
        }
        return type("Outcome", (), {"run": RunFile(meta={}, problems=problems, totals=totals)})()

    monkeypatch.setattr(sweep, "run_game24", run_game24)
    monkeypatch.setattr(sweep, "load_model", lambda *a: type("LM", (), {"device": type("D", (), {"type": "cpu"})()})())
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "game24_sweep.py",
            "--out",
            str(tmp_path),
            "--validation",
            "800-804",
            "--test",
            "900-904",
            "--max-tokens",
            "12000",
        ],
    )
    assert sweep.main() == 0
    record = json.loads((tmp_path / "sweep.json").read_text())
    searches = [r for r in runs if r.method in ("bfs", "mcts", "beam")]
    swept = [r for r in searches if r.indices == tuple(range(800, 805))]
    tested = [r for r in searches if r.indices == tuple(range(900, 905))]
    assert len(swept) == sum(len(g) for g in sweep.GRID.values()) and len(tested) == 3
    # 25 distinct proposals solve most but spend 12,500 tokens per puzzle: over the cap
    assert record["chosen"]["bfs"] == {"samples": 23, "distinct": True}
    assert record["chosen"]["mcts"]["rule"] == "puct" and record["chosen"]["mcts"]["max_tokens_per_problem"] == 11500
    assert all(r.max_tokens_per_problem == 11500 for r in swept if r.method != "bfs")
    assert [r["method"] for r in record["test_runs"]] == ["bfs", "mcts", "beam"]
    shown = record["test_runs"][0]["command"]
    assert "--distinct" in shown and "--start 900 --end 905" in shown
    assert {r.method for r in runs if r.method in ("io", "cot")} == {"io", "cot"}
    assert record["curves"]
