"""APPS metrics as in the paper: strict accuracy and test-case average, overall and per difficulty.

For each problem the final program runs on the hidden tests. *Test-case average* is the mean
over problems of the share of its tests passed (a program that does not compile or crashes
passes none); *strict accuracy* is the share of problems whose every test passes. Problems
without a program count as passing nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from .problems import DIFFICULTIES


@dataclass(frozen=True)
class Scored:
    """One problem's hidden-test statuses (empty when no program was produced)."""

    difficulty: str
    statuses: tuple[str, ...]
    tests: int

    def __post_init__(self) -> None:
        if self.tests < 1:
            raise ValueError(f"a scored problem needs at least one hidden test, got {self.tests}")
        if self.statuses and len(self.statuses) != self.tests:
            raise ValueError(f"{len(self.statuses)} statuses for {self.tests} tests")

    @property
    def share(self) -> float:
        return sum(s == "passed" for s in self.statuses) / self.tests

    @property
    def strict(self) -> bool:
        return bool(self.statuses) and all(s == "passed" for s in self.statuses)


def summarize(scored: Iterable[Scored]) -> dict[str, dict[str, float | int]]:
    """``{"all"|difficulty: {"problems", "strict_accuracy", "test_case_average"}}`` for the groups present."""
    scored = list(scored)
    groups: dict[str, list[Scored]] = {"all": scored}
    for level in DIFFICULTIES:
        members = [s for s in scored if s.difficulty == level]
        if members:
            groups[level] = members
    out: dict[str, dict[str, float | int]] = {}
    for name, members in groups.items():
        if not members:
            continue
        out[name] = {
            "problems": len(members),
            "strict_accuracy": sum(s.strict for s in members) / len(members),
            "test_case_average": sum(s.share for s in members) / len(members),
        }
    return out
