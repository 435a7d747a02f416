"""Game of 24 success rate against generated tokens per puzzle, from run files: a table and a PNG.

    python benchmarks/game24_curves.py runs/game24-*.json [--png docs/game24-curves.png] [--points 12]

Every run file of ``thoughttree game24`` (or of ``benchmarks/game24_table.py``) becomes one curve
(a search: share of puzzles solved within each budget) or two (io / cot: best-of-k picked by the
exact checker and by log-probability), read by :mod:`thoughttree.tasks.game24.curves`. Runs
should cover the same puzzles; the table says how many each has. The PNG needs matplotlib
(``pip install 'thoughttree[plot]'``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from thoughttree.tasks.game24.curve_view import markdown, plot, table
from thoughttree.tasks.game24.curves import Curve, budgets, run_curves
from thoughttree.tree.serialize import load_run


def run_label(meta: dict, fallback: str) -> str:
    """A short name of a run from its settings."""
    run = meta.get("run") or {}
    method = run.get("method")
    if method is None:
        return fallback
    parts = [method]
    for key, flag in (("breadth", "b"), ("width", "w"), ("iterations", "it"), ("samples", "n"), ("k", "k")):
        value = run.get(key)
        if (
            value is not None
            and (key != "k" or method in ("io", "cot", "bon"))
            and (
                key not in ("breadth", "width", "iterations")
                or method in {"breadth": "bfs", "width": "beam", "iterations": "mcts"}[key]
            )
        ):
            parts.append(f"{flag}={value}")
    if run.get("rule") == "puct" and method == "mcts":
        parts.append("puct")
    if run.get("distinct"):
        parts.append("distinct")
    if run.get("max_tokens_per_problem"):
        parts.append(f"budget={run['max_tokens_per_problem']}")
    return " ".join(parts)


def curves_of(paths: Sequence[Path], points: int) -> list[Curve]:
    """The curves of these run files on one shared grid of budgets (up to the most any run spent)."""
    runs = []
    for path in paths:
        run = load_run(path)
        runs.append((run_label(run.meta, path.stem), (run.meta.get("run") or {}).get("method", "bfs"), run.problems))
    largest = 1.0
    for _, method, entries in runs:
        for e in entries:
            stats = e.get("result", {}).get("statistics", {})
            samples = e.get("result", {}).get("samples") or []
            largest = max(largest, float(stats.get("generated_tokens", 0)), float(sum(s["tokens"] for s in samples)))
    grid = budgets(max(largest, 200.0), points)
    return [c for name, method, entries in runs for c in run_curves(name, entries, method, grid)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", type=Path, nargs="+", help="run files of thoughttree game24")
    p.add_argument("--png", type=Path, help="write the curves here as a PNG (needs matplotlib)")
    p.add_argument("--points", type=int, default=12, help="budgets on the grid (default 12)")
    p.add_argument("--title", default="Game of 24")
    args = p.parse_args()
    curves = curves_of(args.runs, args.points)
    Console().print(table(curves))
    print(markdown(curves))
    if args.png:
        try:
            plot(curves, args.png, args.title)
        except RuntimeError as exc:
            print(exc, file=sys.stderr)
            return 1
        print(f"wrote {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
