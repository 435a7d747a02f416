"""Best-of-k baselines read off one sampling run, for comparisons at equal generated tokens.

A run of ``io`` or ``cot`` with k samples per puzzle lists each sample (correct, mean token
log-probability, tokens) in its entries. Since samples are drawn independently, the first j of
them are a best-of-j run for every j <= k, and :func:`best_of` scores it two ways: the exact
checker picks (any of j correct: an oracle) or the model's own log-probability picks (the
sample with the highest mean token log-probability must be correct). :func:`matching_k` chooses
the j whose generated tokens match a search's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class BestOf:
    """Success rates of best-of-``k`` over ``puzzles`` puzzles, and the tokens it generated per puzzle."""

    k: int
    oracle: float
    by_logprob: float
    tokens_per_puzzle: float
    puzzles: int


def _samples(entries: Sequence[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    rows = []
    for entry in entries:
        samples = entry.get("result", {}).get("samples")
        if samples is None:
            raise ValueError("run entries have no 'samples'; best-of-k needs an io, cot or bon run")
        rows.append(samples)
    if not rows:
        raise ValueError("the run has no puzzles")
    return rows


def tokens_per_sample(entries: Sequence[Mapping[str, Any]]) -> float:
    """Mean generated tokens of one sample in the run."""
    flat = [s["tokens"] for row in _samples(entries) for s in row]
    return sum(flat) / max(1, len(flat))


def pool_size(entries: Sequence[Mapping[str, Any]]) -> int:
    """The k every puzzle of the run has samples for."""
    return min(len(row) for row in _samples(entries))


def matching_k(tokens_per_puzzle: float, per_sample: float) -> int:
    """The number of samples whose tokens come closest to ``tokens_per_puzzle`` (at least 1)."""
    if per_sample <= 0:
        raise ValueError(f"tokens per sample must be > 0, got {per_sample}")
    return max(1, round(tokens_per_puzzle / per_sample))


def best_of(entries: Sequence[Mapping[str, Any]], k: int) -> BestOf:
    """Best-of-``k`` from the first ``k`` samples of each puzzle (ValueError if a puzzle has fewer)."""
    rows = _samples(entries)
    if k < 1 or k > pool_size(entries):
        raise ValueError(f"best-of-{k} needs 1..{pool_size(entries)} samples per puzzle in this run")
    oracle = by_logprob = tokens = 0
    for row in rows:
        first = row[:k]
        oracle += any(s["correct"] for s in first)
        best = max(first, key=lambda s: s["logprob"] if math.isfinite(s["logprob"]) else -math.inf)
        by_logprob += bool(best["correct"])
        tokens += sum(s["tokens"] for s in first)
    n = len(rows)
    return BestOf(k=k, oracle=oracle / n, by_logprob=by_logprob / n, tokens_per_puzzle=tokens / n, puzzles=n)
