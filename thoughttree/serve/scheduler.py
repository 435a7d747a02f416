"""Continuous batching of independent completion requests over one LM's KV tree.

A :class:`Scheduler` owns the LM from a thread of its own. Each step it admits waiting jobs
(their prompts inserted into the shared KV tree, so a prefix that several requests share is
stored once), drops cancelled ones (their KV freed before the step runs), and runs one forward
over the newest token of every running choice of every job, then one batched draw. A choice's
first step reads the logits at its prompt's last token; the forward computes whatever prompt KV
is missing in that same step. Draws use the runtime's seeded sampler with the step index
counted from the choice's first generated token, exactly as ``Engine.decode`` does, so a choice
seeded like a ``tree.expand`` child draws the same tokens.

Admission reserves, for each job, the pages its prompt and the longest continuation of each of
its choices could take; a job whose reservation does not fit waits, so the pool never runs out.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from ..config import Sampling
from ..runtime.kv_tree import Segment
from ..runtime.lm import LM
from ..runtime.sampler import sample_packed, unpack


class AdmissionError(Exception):
    """A job that cannot run: ``status`` is the HTTP status to answer with (400 or 429)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Update:
    """What one step added to one choice: its new token, that token's log-probability, the
    top alternatives (token id -> log-probability) when asked for, and the finish reason
    ("stop", "eos", "length") when this token ended it."""

    index: int
    token: int
    logprob: float
    top: dict[int, float] | None
    finish_reason: str | None


@dataclass(eq=False)
class Job:
    """One request: ``len(seeds)`` choices continuing ``prompt``; ``emit`` receives each step's
    updates (or an exception) from the scheduler's thread and must not block."""

    prompt: list[int]
    sampling: Sampling
    seeds: list[int]
    emit: Callable[[list[Update] | BaseException], None]
    top_logprobs: int = 0
    cancelled: bool = False
    pages: int = 0
    parent: Segment | None = None
    tails: list[Segment] = field(default_factory=list)
    tokens: list[list[int]] = field(default_factory=list)
    limit: int = 0
    running: list[int] = field(default_factory=list)


class Scheduler:
    """One decode batch for all jobs of one LM, stepped by a background thread."""

    def __init__(self, lm: LM, *, max_waiting: int = 256, max_batch: int = 1024) -> None:
        self.lm, self.kv, self.engine = lm, lm.kv, lm.engine
        self.max_waiting, self.max_batch = max_waiting, max_batch
        self.page_size = self.kv.pool.page_size
        self.total_pages = self.kv.pool.num_pages
        self.reserved = 0
        self._waiting: collections.deque[Job] = collections.deque()
        self._running: list[Job] = []
        self._calls: list[tuple[Callable[[], Any], Callable[[Any, BaseException | None], None]]] = []
        self._wake = threading.Condition()
        self._stop = False
        self.steps = 0
        self._thread = threading.Thread(target=self._loop, name="thoughttree-scheduler", daemon=True)
        self._fused = lm.device.type == "cuda"

    # -- outside the thread ----------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        with self._wake:
            self._stop = True
            self._wake.notify()
        self._thread.join(timeout=30)

    def pages_for(self, prompt_tokens: int, choices: int, max_tokens: int) -> int:
        """Pages a job can take at most: its prompt, and each choice's longest continuation."""
        ps = self.page_size
        limit = min(max_tokens, self.lm.max_context - prompt_tokens)
        return -(-prompt_tokens // ps) + choices * -(-limit // ps)

    def submit(self, job: Job) -> None:
        """Queue ``job``; AdmissionError when it can never fit (400) or the queue is full (429)."""
        job.pages = self.pages_for(len(job.prompt), len(job.seeds), job.sampling.max_tokens)
        if job.pages > self.total_pages:
            raise AdmissionError(
                f"this request may need {job.pages} KV pages ({len(job.seeds)} choices of up to "
                f"{job.sampling.max_tokens} tokens after a {len(job.prompt)}-token prompt); the server's pool holds "
                f"{self.total_pages}: lower n, best_of or max_tokens",
                400,
            )
        with self._wake:
            if len(self._waiting) >= self.max_waiting:
                raise AdmissionError(f"the server is busy ({len(self._waiting)} requests waiting); retry later", 429)
            self._waiting.append(job)
            self._wake.notify()

    def cancel(self, job: Job) -> None:
        """Stop ``job``; its KV is freed before the next step."""
        with self._wake:
            job.cancelled = True
            self._wake.notify()

    def call(self, fn: Callable[[], Any], done: Callable[[Any, BaseException | None], None]) -> None:
        """Run ``fn`` on the scheduler's thread between two steps, then ``done(result, error)``."""
        with self._wake:
            self._calls.append((fn, done))
            self._wake.notify()

    def usage(self) -> dict[str, int]:
        pool = self.kv.pool
        return {
            "pages_total": pool.num_pages,
            "pages_used": pool.num_used,
            "pages_free": pool.num_free,
            "pages_reserved": self.reserved,
            "page_size": pool.page_size,
            "running": len(self._running),
            "waiting": len(self._waiting),
            "steps": self.steps,
        }

    # -- the thread --------------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._wake:
                while not (self._stop or self._calls or self._running or self._admissible()):
                    self._wake.wait()
                if self._stop:
                    break
                calls, self._calls = self._calls, []
            self._drop_cancelled()
            for fn, done in calls:
                try:
                    result = fn()
                except Exception as exc:  # handed back to the caller, who reports it
                    done(None, exc)
                else:
                    done(result, None)
            self._admit()
            if self._running:
                try:
                    self._step()
                except Exception as exc:  # a failed step fails the jobs in it; the server goes on
                    for job in self._running:
                        self._finish(job)
                        job.emit(exc)
                    self._running = []
        for job in [*self._running, *self._waiting]:
            if job.parent is not None:
                self._finish(job)
            job.emit(RuntimeError("the server is shutting down"))

    def _admissible(self) -> bool:
        return bool(self._waiting) and (
            self._waiting[0].cancelled or self.reserved + self._waiting[0].pages <= self.total_pages
        )

    def _admit(self) -> None:
        rows = sum(len(j.running) for j in self._running)
        while True:
            with self._wake:
                if not self._waiting:
                    return
                job = self._waiting[0]
                if not job.cancelled and (
                    self.reserved + job.pages > self.total_pages or (rows and rows + len(job.seeds) > self.max_batch)
                ):
                    return
                self._waiting.popleft()
            if job.cancelled:
                continue
            try:
                job.parent = self.kv.insert(None, list(job.prompt))
            except Exception as exc:
                job.emit(exc)
                continue
            self.reserved += job.pages
            job.limit = min(job.sampling.max_tokens, self.lm.max_context - job.parent.end)
            job.tails = [self.kv.open_child(job.parent) for _ in job.seeds]
            job.tokens = [[] for _ in job.seeds]
            job.running = list(range(len(job.seeds)))
            self._running.append(job)
            rows += len(job.seeds)

    def _drop_cancelled(self) -> None:
        kept = []
        for job in self._running:
            if job.cancelled:
                self._finish(job)
            else:
                kept.append(job)
        self._running = kept

    def _finish(self, job: Job) -> None:
        """Free everything ``job`` holds."""
        for tail in job.tails:
            tail.sealed = True
            self.kv.release(tail)
        if job.parent is not None:
            self.kv.release(job.parent)
        job.tails, job.parent, job.running = [], None, []
        self.reserved -= job.pages
        job.pages = 0

    def _step(self) -> None:
        rows: list[tuple[Job, int]] = [(job, i) for job in self._running for i in job.running]
        targets: list[tuple[Segment, int]] = []
        for job, i in rows:
            made, parent = job.tokens[i], job.parent
            assert parent is not None, "a running job holds its prompt's segment"
            targets.append((job.tails[i], len(made) - 1) if made else (parent, len(parent.tokens) - 1))
        logits = self.engine.forward(targets)
        params = [job.sampling for job, _ in rows]
        draw = unpack(
            sample_packed(
                logits,
                params,
                [job.seeds[i] for job, i in rows],
                [len(job.tokens[i]) for job, i in rows],
                fused=self._fused,
            )
        )
        tops = self._top_logprobs(logits, [job.top_logprobs for job, _ in rows])
        self.kv.append_each([job.tails[i] for job, i in rows], draw.tokens)
        self.steps += 1
        self.engine.stats.generated_tokens += len(rows)
        updates: dict[int, list[Update]] = {}
        for r, ((job, i), token, lp) in enumerate(zip(rows, draw.tokens, draw.logprobs)):
            job.tokens[i].append(token)
            reason = self._finish_reason(job, i)
            updates.setdefault(id(job), []).append(Update(i, token, lp, tops[r], reason))
        for job in self._running:  # a finished job's KV is freed before its client hears that it finished
            ended = {u.index for u in updates.get(id(job), []) if u.finish_reason}
            job.running = [i for i in job.running if i not in ended]
            if not job.running:
                self._finish(job)
        for job in self._running:
            job.emit(updates.get(id(job), []))
        self._running = [job for job in self._running if job.running]

    def _finish_reason(self, job: Job, i: int) -> str | None:
        tokens, sp = job.tokens[i], job.sampling
        last = tokens[-1]
        if last in sp.stop_token_ids:
            return "stop"
        if not sp.ignore_eos and last in self.engine.eos:
            return "eos"
        if sp.stop and self.engine.stops.hits(sp.stop, [tokens])[0]:
            return "stop"
        return "length" if len(tokens) >= job.limit else None

    @staticmethod
    def _top_logprobs(logits: torch.Tensor, wanted: Sequence[int]) -> list[dict[int, float] | None]:
        k = max(wanted, default=0)
        if k == 0:
            return [None] * len(wanted)
        top = logits.float().log_softmax(-1).topk(k, dim=-1)
        values, ids = top.values.cpu().tolist(), top.indices.cpu().tolist()
        return [dict(zip(ids[r][:w], values[r][:w])) if w else None for r, w in enumerate(wanted)]
