"""Rendering success-against-tokens curves: a rich table, Markdown, and a PNG (matplotlib, optional)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rich.table import Table

from .curves import Curve

PLOT_HINT = "the PNG needs matplotlib: pip install 'thoughttree[plot]' (or pip install matplotlib)"


def table(curves: Sequence[Curve]) -> Table:
    """A rich table: one row per curve, one column per budget."""
    grid = curves[0].budgets
    t = Table(title="Game of 24: success against generated tokens per puzzle")
    t.add_column("method")
    t.add_column("puzzles", justify="right")
    for b in grid:
        t.add_column(f"{b:,}", justify="right")
    for c in curves:
        t.add_row(c.name, str(c.puzzles), *(f"{s:.0%}" for s in c.success))
    return t


def markdown(curves: Sequence[Curve]) -> str:
    """The same table in Markdown (for BENCHMARKS.md)."""
    grid = curves[0].budgets
    lines = ["| method | puzzles | " + " | ".join(f"{b:,}" for b in grid) + " |", "|---|---" + "|---" * len(grid) + "|"]
    lines += [f"| {c.name} | {c.puzzles} | " + " | ".join(f"{s:.0%}" for s in c.success) + " |" for c in curves]
    return "\n".join(lines)


def plot(curves: Sequence[Curve], path: Path, title: str = "Game of 24") -> None:
    """Write the curves as a PNG (log-scale tokens); RuntimeError with the install hint without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RuntimeError(PLOT_HINT) from None
    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    for c in curves:
        style = "--" if "best-of-k" in c.name or c.name.startswith("bon") else "-"
        ax.plot(c.budgets, [100 * s for s in c.success], style, marker="o", markersize=3, label=c.name)
    ax.set_xscale("log")
    ax.set_xlabel("generated tokens per puzzle")
    ax.set_ylabel("puzzles solved (%)")
    ax.set_ylim(0, 100)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
