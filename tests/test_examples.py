"""The examples run as their docstrings say: the runtime by hand on the bundled model, a strategy
of one's own, and a search saved by one run and continued by the next."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import thoughttree as tt

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def load_example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"{name}_example", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


def test_tree_decoding_example(capsys) -> None:
    tree = load_example("tree_decoding").main()
    out = capsys.readouterr().out
    assert "16 branches" in out and "in one call" in out
    kids = tree.root.children
    assert len(kids) == 16 and len({k.text for k in kids if k.alive}) == sum(k.alive for k in kids)
    tree.lm.check_integrity(tree)


def test_custom_strategy_example_searches_and_saves(tiny_model_dir, tmp_path, capsys, monkeypatch) -> None:
    saved = tmp_path / "best-first.json"
    monkeypatch.setattr(sys, "argv", ["custom_strategy.py", str(tiny_model_dir), "What is 17 * 23?",
                                      "--device", "cpu", "--save", str(saved)])
    load_example("custom_strategy").main()
    out = capsys.readouterr().out
    assert "answer:" in out and "forward steps" in out
    tree = tt.SearchResult.load(saved).tree
    assert 1 < sum(1 for n in tree.nodes if n.children) <= 10  # expansions=10 in the example


def test_resume_search_example_continues_the_saved_search(tiny_model_dir, tmp_path) -> None:
    example, path = load_example("resume_search"), tmp_path / "trip.json"
    first = example.run(str(tiny_model_dir), "Plan a 3-day trip to Kyoto", 1, path, device="cpu")
    assert first.stopped == "max_rounds" and path.is_file()
    depth = max(n.depth for n in first.tree.nodes)
    second = example.run(str(tiny_model_dir), "Plan a 3-day trip to Kyoto", 1, path, device="cpu")
    assert max(n.depth for n in second.tree.nodes) == depth + 1
    assert [n.text for n in second.tree.nodes[: len(first.tree)]] == [n.text for n in first.tree.nodes]
    assert len(tt.SearchResult.load(path).tree) == len(second.tree)
