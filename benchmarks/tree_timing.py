"""Timing for the tree-attention benchmark: CUDA-graph replay with the L2 flushed, or wall clock on CPU."""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Callable

import numpy as np
import torch
import triton

from floor import measure_roofs


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@triton.jit
def _empty(x):
    pass


class Timer:
    """Median time of a call in µs, and whether it ran as a graph.

    On CUDA: a CUDA graph of one call (eager if capture fails) replayed ``reps`` times, each after
    a 512 MiB write that flushes the L2 cache, timed with events. On CPU (the interpreter smoke
    run): the median wall time of ``reps`` eager calls.
    """

    def __init__(self, device: torch.device, reps: int = 25) -> None:
        self.device, self.reps = device, reps
        self.flush = torch.empty(512 * 2**20, dtype=torch.uint8, device=device) if device.type == "cuda" else None

    def __call__(self, fn: Callable[[], object]) -> tuple[float, bool]:
        fn()
        if self.flush is None:
            return median_ms(fn, self.device, self.reps) * 1e3, False
        torch.cuda.synchronize()
        run, graphed = fn, False
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                fn()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                fn()
            run, graphed = graph.replay, True
        except Exception:  # noqa: BLE001 - a baseline that cannot be captured is timed eagerly
            torch.cuda.synchronize()
        events = []
        for _ in range(self.reps):
            self.flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            events.append((start, end))
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in events) * 1e3, graphed

    def empty_us(self) -> float:
        """What an empty kernel reads in this timer (µs): the fixed cost every timed call includes."""
        x = torch.empty(1, device=self.device)
        return self(lambda: _empty[(1,)](x))[0]


def waited_times(fn: Callable[[], object], reps: int, device: torch.device) -> list[float]:
    """Wall seconds of ``reps`` calls, each waited for (host work plus any upload)."""
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t)
    return times


def median_ms(fn: Callable[[], object], device: torch.device, reps: int = 7) -> float:
    """Median wall time of ``reps`` waited-for calls in ms."""
    return statistics.median(waited_times(fn, reps, device)) * 1e3


def timed(fn: Callable[[], object], reps: int, device: torch.device) -> tuple[float, float]:
    """(median, fastest) seconds of ``reps`` waited-for calls after three warm-up calls (the
    fastest shows the cost without other load)."""
    for _ in range(3):
        fn()
    times = waited_times(fn, reps, device)
    return statistics.median(times), min(times)


def roofs(device: torch.device) -> tuple[float, float] | None:
    """(copy bandwidth bytes/s counting read + write, bf16 matmul FLOP/s) measured now; None on
    CPU (:func:`floor.measure_roofs`)."""
    measured = measure_roofs(device)
    return None if measured is None else (measured.copy_bytes_per_s, measured.matmul_flops_per_s)


def changed_fields(config: object) -> dict[str, object]:
    """A frozen config's fields that differ from its defaults, by name."""
    default = type(config)()
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if getattr(config, f.name) != getattr(default, f.name)}


def config_label(config: object) -> str:
    """:func:`changed_fields` as ``name=value, ...`` ("default" if none)."""
    return ", ".join(f"{name}={value}" for name, value in changed_fields(config).items()) or "default"


def host_probe(reps: int) -> tuple[float, float]:
    """(median, fastest) seconds of 100 small numpy operations on a few hundred elements, the kind
    a plan is made of: a fixed measure of the host, since a GPU machine's host clock moves plan
    times by up to 2x between runs."""
    rng = np.random.default_rng(0)
    ids, weights = rng.integers(0, 4096, 257), rng.random(257)

    def batch() -> None:
        for _ in range(10):
            order = np.argsort(ids, kind="stable")
            keys = ids[order]
            pos = np.searchsorted(keys, ids)
            total = np.cumsum(weights)
            scaled = np.ceil(total / (pos + 1)) * 2.0
            counts = np.bincount(pos % 7, weights=scaled, minlength=7)
            np.maximum(counts[pos % 7], 1.0)
            np.repeat(order[:16], 3)
            np.concatenate([keys, pos])

    return timed(batch, reps, torch.device("cpu"))
