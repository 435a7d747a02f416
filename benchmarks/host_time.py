"""Where a CLI run's wall time goes: the runtime's pieces, timed around any ``thoughttree`` command.

Wraps the runtime's methods (decoding, decode steps and their host work, general forwards, graph
captures, tokenization, the KV tree, the search rounds) with wall-clock timers, runs the command
in this process and prints, per piece, its calls, seconds and µs per call. Times are inclusive (a
piece's time holds the pieces it calls) and hold the timers' own cost, about a microsecond a
call; the GPU's share shows as the wait in ``DecodeArena.collect``.

    python benchmarks/host_time.py game24 --method bfs --device cuda --start 900 --end 1000
"""

from __future__ import annotations

import functools
import importlib
import runpy
import shlex
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

# (module, class, methods): what a search spends its time in, outermost first. Class None: the
# module's own functions (as the module calls them; a function it imported is timed there).
PIECES = [
    ("thoughttree.search", "_Run", ["loop"]),
    ("thoughttree.search.rounds", "RoundRunner", ["_expand", "_evaluate"]),
    ("thoughttree.runtime.engine", "Engine", ["decode", "_decode_fast", "forward", "_forward_on_arena", "_still_active", "_reserve", "_take", "arena_for"]),
    ("thoughttree.runtime.decode_batch", "DecodeBatch", ["__init__", "launch", "collect"]),
    ("thoughttree.runtime.decode_batch", None, ["plan_tree_attention", "decode_work"]),
    ("thoughttree.runtime.graphs", "DecodeArena", ["__init__", "load", "step", "forward_rows", "publish", "collect", "_capture"]),
    ("thoughttree.runtime.stops", "StopWindow", ["hits"]),
    ("thoughttree.runtime.lm", "LM", ["encode", "encode_batch", "tree_logits", "_generation"]),
    ("thoughttree.runtime.kv_tree", "KVTree", ["insert", "release", "open_child"]),
]


def wrap(totals: dict[str, list[float]], name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            entry = totals.setdefault(name, [0, 0.0])
            entry[0] += 1
            entry[1] += time.perf_counter() - start

    return timed


def main() -> int:
    argv = sys.argv[1:]
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    totals: dict[str, list[float]] = {}
    order = []
    for module, cls, methods in PIECES:
        owner = importlib.import_module(module)
        if cls is not None:
            owner = getattr(owner, cls)
        prefix = cls or module.rsplit(".", 1)[-1]
        for method in methods:
            if method not in vars(owner):
                raise SystemExit(f"{module}.{prefix} has no {method}: update PIECES in {__file__}")
            name = f"{prefix}.{method}"
            setattr(owner, method, wrap(totals, name, vars(owner)[method]))
            order.append(name)
    sys.argv = ["thoughttree", *argv]
    start = time.perf_counter()
    code = 0
    try:
        runpy.run_module("thoughttree", run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    wall = time.perf_counter() - start
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    console = Console()
    console.print(f"device: {device}, torch {torch.__version__}", soft_wrap=True)
    console.print(f"command: python benchmarks/host_time.py {shlex.join(argv)}", soft_wrap=True)
    table = Table(title=f"where the command's {wall:.2f} s went (inclusive times)")
    for col in ("piece", "calls", "s", "µs per call", "share of the command"):
        table.add_column(col, justify="left" if col == "piece" else "right")
    for name in order:
        calls, seconds = totals.get(name, (0, 0.0))
        if calls:
            table.add_row(name, f"{int(calls):,}", f"{seconds:.3f}", f"{1e6 * seconds / calls:,.1f}", f"{seconds / wall:.1%}")
    console.print(table)
    return code


if __name__ == "__main__":
    sys.exit(main())
