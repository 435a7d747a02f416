"""Check many programs at once, one sandbox per program, up to the number of CPU cores."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from .isolation import SandboxUnavailable
from .limits import Limits
from .execute import checked_tests, run_tests
from .result import TestResult, excerpt


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

    Each sandbox is a separate process tree, so threads are enough to keep them all busy. Verdicts
    are per program: every job's tests are checked before any runs, and a job whose judging fails
    for any other reason than a missing sandbox gets ``runtime_error`` on each of its tests
    (the reason in ``stderr``) while the others keep theirs.
    """
    jobs = list(jobs)
    if workers is None:
        workers = os.cpu_count() or 1
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive integer, got {workers!r}")
    for index, job in enumerate(jobs):
        if not isinstance(job, Job):
            raise TypeError(f"job {index} must be a thoughttree.sandbox.Job, got {type(job).__name__}")
        checked_tests(job.tests, job.fn_name)
    if not jobs:
        return []

    def one(job: Job) -> list[TestResult]:
        try:
            return run_tests(
                job.program, job.tests, fn_name=job.fn_name, limits=job.limits, isolation=isolation, bwrap=bwrap,
                fresh_interpreter=job.fresh_interpreter,
            )
        except SandboxUnavailable:
            raise
        except Exception as error:  # this program's judging failed: its own tests say so, no other job's
            why = excerpt(f"not judged: {type(error).__name__}: {error}", tail=True)
            return [TestResult("runtime_error", stderr=why) for _ in job.tests]

    with ThreadPoolExecutor(max_workers=min(workers, len(jobs))) as pool:
        return list(pool.map(one, jobs))
