"""What an engine has done: counters of steps, tokens, graphs and drafts (:class:`EngineStats`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .graphs import DecodeArena


@dataclass
class EngineStats:
    """Running counters; read before and after a call to get its cost."""

    forward_steps: int = 0
    prefill_tokens: int = 0  # tokens of given text whose KV was computed
    generated_tokens: int = 0
    attended_tokens: int = 0  # KV tokens read, summed over query rows (what per-sequence attention reads)
    unique_tokens: int = 0  # distinct KV tokens in each step's tree, summed over steps
    fast_steps: int = 0  # decode steps run on fixed buffers (graph replays among them)
    graph_replays: int = 0
    overlapped_steps: int = 0  # fast steps queued before the host had read the draws of the step before
    graphs: int = 0  # CUDA graphs held now
    graph_captures: int = 0  # graphs captured (a bucket's first step, and again after the buffers grow)
    graph_bytes: int = 0  # device memory held by them and their buffers
    graph_failures: int = 0  # captures that raised (their buckets run eagerly)
    plan_builds: int = 0  # decode-run plans built (once per batch and each time its rows change)
    plans_ahead: int = 0  # of those, built while the step before ran and used
    speculative_steps: int = 0  # forwards that verified drafts (or could have: see speculative/)
    draft_tokens: int = 0  # draft tokens verified
    accepted_tokens: int = 0  # draft tokens kept (equal to the target's draws)
    draft_seconds: float = 0.0  # time the drafters took

    @property
    def acceptance_rate(self) -> float:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else 0.0

    @property
    def tokens_per_forward(self) -> float:
        return self.generated_tokens / self.forward_steps if self.forward_steps else 0.0

    @property
    def reuse_factor(self) -> float:
        return self.attended_tokens / self.unique_tokens if self.unique_tokens else 1.0

    def note_graphs(self, arena: DecodeArena, held: int | None = None) -> None:
        """Record the graphs ``arena`` holds and their memory. ``held``: how many it held before
        a step (the rest that step captured; nothing to record when it captured none)."""
        self.graph_failures = arena.failures.count
        if held is not None:
            if arena.num_graphs == held:
                return
            self.graph_captures += arena.num_graphs - held
        self.graphs, self.graph_bytes = arena.num_graphs, arena.graph_bytes + arena.buffer_bytes
