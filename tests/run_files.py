"""Run files compared across runs: everything but what the clock says."""

from __future__ import annotations

from typing import Any

CLOCK = ("wall_time", "tokens_per_s", "expand_seconds", "evaluate_seconds")


def without_clock(data: Any) -> Any:
    """``data`` (a run file's JSON) with every timing field left out, at any depth."""
    if isinstance(data, dict):
        return {k: without_clock(v) for k, v in data.items() if k not in CLOCK}
    if isinstance(data, list):
        return [without_clock(v) for v in data]
    return data
