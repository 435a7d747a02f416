"""Recording a step's forward once and replaying it: CUDA graphs, behind a small interface.

:class:`graphs.DecodeArena` asks a :class:`GraphCapture` for a memory pool and for graphs of
its step functions. :class:`CudaGraphs` is the real one; another object with the same methods
can stand in for it (a test's emulation on the CPU, or one that fails on purpose). When a
capture raises, :class:`CaptureFailures` remembers the bucket, which then runs eagerly for
the rest of the engine's life; the first failure warns once, the others are counted.
"""

from __future__ import annotations

import gc
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Protocol, cast

import torch


class Graph(Protocol):
    def replay(self) -> None: ...


class GraphCapture(Protocol):
    """Makes graphs of step functions: each replay redoes the recorded work on the same buffers."""

    def pool(self) -> object:
        """A memory pool shared by the graphs of one arena (they never run at the same time)."""
        ...

    def warm_up(self, forward: Callable[[], object]) -> None:
        """Run ``forward()`` once eagerly where a capture can follow it (kernels compiled, libraries loaded)."""
        ...

    def capture(self, forward: Callable[[], torch.Tensor], pool: object) -> tuple[Graph, torch.Tensor, int]:
        """(graph, the output tensor its replays rewrite, device bytes the capture took)."""
        ...


class CudaGraphs:
    """:class:`GraphCapture` of CUDA graphs on the current device."""

    def pool(self) -> object:
        return torch.cuda.graph_pool_handle()

    def warm_up(self, forward: Callable[[], object]) -> None:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            forward()
        torch.cuda.current_stream().wait_stream(stream)

    def capture(self, forward: Callable[[], torch.Tensor], pool: object) -> tuple[Graph, torch.Tensor, int]:
        torch.cuda.empty_cache()  # capture empties the cache too: measure the graph's pool alone
        before = torch.cuda.memory_reserved()
        graph = torch.cuda.CUDAGraph()
        # No cycle collection while capturing: a dead graph it freed (say, of a dropped LM still
        # held by a reference cycle with its trees) would be destroyed mid-capture, which CUDA
        # forbids, and that invalidates this capture.
        collecting = gc.isenabled()
        gc.disable()
        try:
            with torch.cuda.graph(graph, pool=cast(Any, pool)):  # the handle graph_pool_handle() made
                out = forward()
        finally:
            if collecting:
                gc.enable()
        return graph, out, torch.cuda.memory_reserved() - before


@dataclass
class CaptureFailures:
    """Buckets whose capture failed, by (kind of step, bucket); one engine's, shared by its arenas."""

    keys: set[tuple[str, Hashable]] = field(default_factory=set)
    count: int = 0

    def failed(self, kind: str, key: Hashable) -> bool:
        return (kind, key) in self.keys

    def record(self, kind: str, key: Hashable, error: BaseException) -> None:
        """Remember a failed capture; the first one of the engine warns."""
        if not self.keys:
            warnings.warn(
                f"capturing a CUDA graph of a {kind} (bucket {key}) failed ({type(error).__name__}: {error}); "
                "that bucket runs eagerly from now on (same results, more host time per step). Further "
                "failures are counted in LM.stats.graph_failures without a warning; RuntimeConfig(cuda_graphs=False) "
                "turns graphs off.",
                RuntimeWarning,
                stacklevel=4,
            )
        self.keys.add((kind, key))
        self.count += 1
