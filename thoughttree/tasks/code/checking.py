"""Running candidate programs against tests in the sandbox, many at once, with a per-task cache.

Programs never run in this process: every check goes through :mod:`thoughttree.sandbox`. A
:class:`Checker` remembers verdicts by (program, test set), so a program that a search meets
twice (a rollout that reaches an existing program, a duplicate sample) runs once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from .problem import Test


@dataclass(frozen=True)
class Verdicts:
    """The results of one program on one test set: each test's status, and the share passed."""

    statuses: tuple[str, ...]

    @property
    def passed(self) -> int:
        return sum(s == "passed" for s in self.statuses)

    @property
    def pass_rate(self) -> float:
        return self.passed / len(self.statuses) if self.statuses else 0.0

    @property
    def all_passed(self) -> bool:
        return bool(self.statuses) and self.passed == len(self.statuses)


@dataclass
class Checker:
    """Checks programs in the sandbox under ``limits`` (a :class:`thoughttree.sandbox.Limits`; None = its defaults).

    ``workers`` sandboxes run at once (None: one per CPU core); ``isolation`` is passed to the
    sandbox ("bwrap", or the weaker mode it names); ``fresh_interpreter`` starts each test in a
    new interpreter instead of forking it from the sandbox's driver.
    """

    limits: Any = None
    workers: int | None = None
    isolation: str = "bwrap"
    fresh_interpreter: bool = False
    _cache: dict[tuple[str, str], Verdicts] = field(default_factory=dict, repr=False)

    def check(
        self, programs: Sequence[str], tests: Sequence[Test], *, fn_name: str | None, label: str
    ) -> list[Verdicts]:
        """Verdicts of every program on ``tests``; ``label`` names the test set in the cache (e.g. "1604 public").

        Distinct programs run in parallel; an empty program fails every test without running.
        """
        if not tests:
            raise ValueError(f"no tests to check programs against ({label})")
        todo = sorted({p for p in programs if p.strip() and (p, label) not in self._cache})
        if todo:
            for program, results in zip(todo, self._run(todo, list(tests), fn_name)):
                self._cache[(program, label)] = Verdicts(tuple(r.status for r in results))
        failed = Verdicts(tuple("syntax_error" for _ in tests))
        return [self._cache[(p, label)] if p.strip() else failed for p in programs]

    def _run(self, programs: list[str], tests: list[Test], fn_name: str | None) -> list[list[Any]]:
        from ...sandbox import Job, Limits, run_many

        limits = self.limits if self.limits is not None else Limits()
        jobs = [Job(program, tests, fn_name, limits, self.fresh_interpreter) for program in programs]
        return run_many(jobs, workers=self.workers, isolation=self.isolation)
