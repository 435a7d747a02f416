"""Success rate against generated tokens per puzzle, read off Game of 24 run files.

A search run with a token budget is an anytime run: a search stops at the first solution it
verifies, and one that ends unsolved starts again until the budget is spent, so a puzzle solved
after t generated tokens is solved by every budget of at least t (a budget is checked between
rounds, so a run given budget B may still solve a puzzle in a round that crosses B: the curve
is a lower bound there). The success at budget B is the share of puzzles solved within B tokens.

For IO / CoT sampling runs each puzzle lists its samples in order; at budget B a puzzle gets
the longest prefix of its samples whose tokens fit in B, and the answer is chosen by the exact
checker (any of them correct: an oracle) or by the model's own mean token log-probability.
Prefixes of independent samples are best-of-j runs, and so are prefixes of distinct samples
(their order is the Gumbel-top-k order).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

RANKS = ("checker", "logprob")


@dataclass(frozen=True)
class Curve:
    """Success rate at each budget (generated tokens per puzzle) over ``puzzles`` puzzles."""

    name: str
    budgets: tuple[int, ...]
    success: tuple[float, ...]
    puzzles: int

    def at(self, budget: int) -> float:
        """Success at the largest listed budget not above ``budget`` (0 below the first)."""
        best = 0.0
        for b, s in zip(self.budgets, self.success):
            if b <= budget:
                best = s
        return best


def budgets(largest: float, points: int = 12, smallest: float = 100) -> tuple[int, ...]:
    """``points`` budgets spaced evenly in log scale from ``smallest`` to ``largest`` tokens."""
    if points < 2 or not largest > smallest > 0:
        raise ValueError(f"need points >= 2 and largest > smallest > 0, got {points}, {largest}, {smallest}")
    ratio = (largest / smallest) ** (1 / (points - 1))
    return tuple(sorted({round(smallest * ratio**i) for i in range(points)}))


def solve_tokens(entry: Mapping[str, Any]) -> float | None:
    """Generated tokens a search run's puzzle took to be solved; None when it was not."""
    result = entry.get("result", {})
    if not result.get("correct"):
        return None
    return float(result.get("statistics", {}).get("generated_tokens", 0))


def search_curve(name: str, entries: Sequence[Mapping[str, Any]], grid: Sequence[int]) -> Curve:
    """The anytime curve of a search run (see the module docstring)."""
    if not entries:
        raise ValueError(f"{name}: the run has no puzzles")
    solved = [solve_tokens(e) for e in entries]
    rates = tuple(sum(t is not None and t <= b for t in solved) / len(entries) for b in grid)
    return Curve(name, tuple(grid), rates, len(entries))


def _prefix(samples: Sequence[Mapping[str, Any]], budget: int) -> Sequence[Mapping[str, Any]]:
    used, j = 0, 0
    for s in samples:
        if used + s["tokens"] > budget:
            break
        used += s["tokens"]
        j += 1
    return samples[:j]


def best_of_curve(name: str, entries: Sequence[Mapping[str, Any]], grid: Sequence[int], rank: str) -> Curve:
    """Best-of-k at each budget from an io / cot run's per-sample records; ``rank`` "checker" or "logprob"."""
    if rank not in RANKS:
        raise ValueError(f"rank must be one of {', '.join(RANKS)}, got {rank!r}")
    rows = [e.get("result", {}).get("samples") for e in entries]
    if not rows or any(r is None for r in rows):
        raise ValueError(f"{name}: best-of-k needs an io, cot or bon run (its entries list their samples)")
    rates = []
    for b in grid:
        wins = 0
        for samples in rows:
            first = _prefix(samples, b)
            if not first:
                continue
            if rank == "checker":
                wins += any(s["correct"] for s in first)
            else:
                best = max(first, key=lambda s: s["logprob"] if math.isfinite(s["logprob"]) else -math.inf)
                wins += bool(best["correct"])
        rates.append(wins / len(rows))
    return Curve(name, tuple(grid), tuple(rates), len(rows))


def run_curves(name: str, entries: Sequence[Mapping[str, Any]], method: str, grid: Sequence[int]) -> list[Curve]:
    """The curves of one run: one for a search, two (checker, log-probability) for io / cot."""
    if method in ("io", "cot"):
        label = method.upper() if method == "io" else "CoT"
        return [
            best_of_curve(f"{label} best-of-k, checker", entries, grid, "checker"),
            best_of_curve(f"{label} best-of-k, log-prob", entries, grid, "logprob"),
        ]
    if method == "bon":
        return [best_of_curve(name, entries, grid, "logprob")]
    return [search_curve(name, entries, grid)]
