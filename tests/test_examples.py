"""The runtime example runs on the bundled model and leaves a consistent tree."""

from __future__ import annotations

import importlib.util
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "tree_decoding.py"


def test_tree_decoding_example(capsys) -> None:
    spec = importlib.util.spec_from_file_location("tree_decoding_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tree = module.main()
    out = capsys.readouterr().out
    assert "16 branches" in out and "in one call" in out
    kids = tree.root.children
    assert len(kids) == 16 and len({k.text for k in kids if k.alive}) == sum(k.alive for k in kids)
    tree.lm.check_integrity(tree)
