"""What a thought tree needs from a model runtime (a Protocol, so the tree stays free of torch)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, Sequence

if TYPE_CHECKING:
    from ..config import Sampling
    from .node import Node


@dataclass(frozen=True)
class Generation:
    """One sampled continuation of a node.

    ``kv`` is the handle of the continuation's own KV segment (the caller owns one reference).
    ``finish_reason`` is "stop" (stop string or token), "eos" or "length". ``extra`` holds what a
    sampler adds (distinct sampling: the sample's log-probability under the sampling distribution,
    its perturbed value, the threshold and its inclusion probability).
    """

    tokens: list[int]
    text: str
    logprob: float
    token_logprobs: list[float]
    finish_reason: str
    kv: Any
    extra: dict[str, float] = field(default_factory=dict)


def inclusion_probability(sample_logprob: float, threshold: float) -> float:
    """``P(G > kappa)`` for a Gumbel ``G`` around ``sample_logprob``: ``1 - exp(-exp(phi - kappa))``,
    the chance that a sequence of this log-probability is among distinct samples whose threshold is
    ``kappa`` (-inf: every sequence was taken)."""
    if threshold == -math.inf:
        return 1.0
    return -math.expm1(-math.exp(min(sample_logprob - threshold, 700.0)))


class TreeBackend(Protocol):
    """A model runtime that can hold KV for tree nodes and sample continuations of them."""

    @property
    def max_context(self) -> int:
        """The longest root-to-leaf token path the model accepts."""
        ...

    def encode(self, text: str, *, add_bos: bool) -> list[int]: ...

    def encode_batch(self, texts: Sequence[str], *, add_bos: bool) -> list[list[int]]:
        """``[encode(t) for t in texts]``, in one call where the tokenizer can batch."""
        ...

    def decode(self, tokens: Sequence[int]) -> str: ...

    def materialize(self, nodes: Sequence[Node]) -> None:
        """Give every node on these nodes' paths a KV segment, prefilling all missing ones at once."""
        ...

    def generate(
        self, nodes: Sequence[Node], samples: Sequence[int], sampling: Sampling, seeds: Sequence[Sequence[int]]
    ) -> list[list[Generation]]:
        """Sample ``samples[i]`` continuations under ``nodes[i]`` (seeds[i][j] for the j-th), all batched."""
        ...

    def release(self, kv: Any) -> None:
        """Drop one reference to a KV segment handle."""
        ...
