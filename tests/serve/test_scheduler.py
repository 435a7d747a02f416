"""Admission control of the serving scheduler (no HTTP)."""

from __future__ import annotations

import threading

import pytest

from thoughttree import Sampling
from thoughttree.serve.scheduler import AdmissionError, Job, Scheduler


def _job(prompt: list[int], n: int, max_tokens: int, done: list) -> Job:
    return Job(prompt, Sampling(max_tokens=max_tokens, ignore_eos=True), list(range(n)), emit=done.append)


def test_a_job_larger_than_the_pool_is_refused_and_a_full_queue_answers_429(local_lm) -> None:
    scheduler = Scheduler(local_lm, max_waiting=1)  # not started: jobs stay queued
    pages = scheduler.total_pages
    with pytest.raises(AdmissionError, match="lower n") as too_big:
        scheduler.submit(_job([1, 5], pages, 200, []))
    assert too_big.value.status == 400
    scheduler.submit(_job([1, 5], 1, 8, []))
    with pytest.raises(AdmissionError, match="busy") as busy:
        scheduler.submit(_job([1, 5], 1, 8, []))
    assert busy.value.status == 429


def test_jobs_wait_for_kv_room_and_all_finish(local_lm) -> None:
    scheduler = Scheduler(local_lm)
    per_job = scheduler.pages_for(3, 4, 40)
    scheduler.total_pages = per_job + per_job // 2  # room for one job at a time
    done = threading.Event()
    tokens = [0, 0, 0]
    running: set[int] = set()

    def emit(i: int):
        def take(updates) -> None:
            assert isinstance(updates, list), updates
            tokens[i] += len(updates)
            running.add(scheduler.usage()["running"])
            if sum(tokens) == 3 * 4 * 40:
                done.set()

        return take

    scheduler.start()
    try:
        for i in range(3):
            scheduler.submit(Job([1, 5 + i, 6], Sampling(max_tokens=40, ignore_eos=True), [0, 1, 2, 3], emit=emit(i)))
        assert done.wait(120)
    finally:
        scheduler.close()
    assert running == {1} and tokens == [160, 160, 160]
    assert scheduler.reserved == 0 and local_lm.kv.pool.num_used == 0
    local_lm.check_integrity()
