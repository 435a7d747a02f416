"""Check many programs at once, one sandbox per program, up to the number of CPU cores."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from .limits import Limits
from .result import TestResult
from .execute import run_tests


@dataclass(frozen=True)
class Job:
    """One program and its tests, as :func:`run_tests` takes them."""

    program: str
    tests: Sequence[tuple[Any, Any]]
    fn_name: str | None = None
    limits: Limits = field(default_factory=Limits)
    fresh_interpreter: bool = False


def run_many(
    jobs: Iterable[Job], *, workers: int | None = None, isolation: str = "bwrap", bwrap: str = "bwrap"
) -> list[list[TestResult]]:
    """The results of every job, in order; ``workers`` sandboxes run at once (default: CPU cores).

    Each sandbox is a separate process tree, so threads are enough to keep them all busy.
    """
    jobs = list(jobs)
    if workers is None:
        workers = os.cpu_count() or 1
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive integer, got {workers!r}")
    for index, job in enumerate(jobs):
        if not isinstance(job, Job):
            raise TypeError(f"job {index} must be a thoughttree.sandbox.Job, got {type(job).__name__}")
    if not jobs:
        return []

    def one(job: Job) -> list[TestResult]:
        return run_tests(
            job.program, job.tests, fn_name=job.fn_name, limits=job.limits, isolation=isolation, bwrap=bwrap,
            fresh_interpreter=job.fresh_interpreter,
        )

    with ThreadPoolExecutor(max_workers=min(workers, len(jobs))) as pool:
        return list(pool.map(one, jobs))
