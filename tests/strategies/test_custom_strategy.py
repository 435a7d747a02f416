"""The user-defined strategy of examples/custom_strategy.py runs through the same driver."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from fakes import FakeLM, ScriptTask

from thoughttree.search.driver import search
from thoughttree.search.results import SearchResult

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "custom_strategy.py"


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("custom_strategy_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_best_first_expands_the_best_open_leaves_anywhere(example):
    table = {"Q:": ["a;", "b;", "c;"], "Q:b;": ["d;", "e;", "f;"], "Q:a;": ["g;", "h;", "i;"],
             "Q:b;e;": ["j;", "k;", "l;"], "Q:c;": ["m;", "n;", "o;"]}
    values = {"a;": 0.5, "b;": 0.9, "c;": 0.1, "b;d;": 0.2, "b;e;": 0.8, "b;f;": 0.3, "a;g;": 0.0, "a;h;": 0.0,
              "a;i;": 0.0, "b;e;j;": 0.0, "b;e;k;": 0.0, "b;e;l;": 0.0}
    lm = FakeLM(children=table)
    strategy = example.BestFirst(width=2, samples=3, expansions=4)
    result = search(ScriptTask(values), strategy, lm, problem="Q")
    expanded = [n.path_text(include_root=False) for n in result.tree.nodes if n.children]
    # round 1: the root; round 2: b; (0.9) and a; (0.5) together; round 3: one left -> b;e; (0.8)
    assert expanded == ["", "a;", "b;", "b;e;"]
    assert [c for c in lm.calls if c[0] == "generate"] == [("generate", 3), ("generate", 6), ("generate", 3)]
    with pytest.raises(ValueError, match="did you mean 'width'"):
        example.BestFirst(widht=3)


def test_example_runs_on_a_tiny_model(example, tiny_model_dir, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run.json"
    monkeypatch.setattr(sys, "argv", ["custom_strategy.py", str(tiny_model_dir), "What is 2 + 2?", "--device", "cpu",
                                      "--save", str(out)])
    example.main()
    assert "rounds" in capsys.readouterr().out
    loaded = SearchResult.load(out)
    assert loaded.settings["strategy"]["class"] == "BestFirst" and len(loaded.tree) > 1


def test_checkpointed_example_resumes_across_runs(tiny_model_dir, tmp_path):
    spec = importlib.util.spec_from_file_location("resume_search_example", EXAMPLE.with_name("resume_search.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        path = tmp_path / "plan.json"
        first = module.run(str(tiny_model_dir), "Plan a day", 1, path, device="cpu")
        second = module.run(str(tiny_model_dir), "Plan a day", 1, path, device="cpu")
        both = module.run(str(tiny_model_dir), "Plan a day", 2, tmp_path / "both.json", device="cpu")
    finally:
        del sys.modules[spec.name]
    assert len(first.tree) == 4 and len(second.tree) == len(both.tree) > len(first.tree)
    assert [n.tokens for n in second.tree.nodes] == [n.tokens for n in both.tree.nodes]
