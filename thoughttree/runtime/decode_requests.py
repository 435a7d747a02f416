"""A decode call's requests, their results, and how each request ends."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import AbstractSet, Sequence

from ..config import Sampling
from .kv_tree import Segment


@dataclass(frozen=True)
class DecodeRequest:
    """One continuation to sample: from the end of ``parent``, drawn as ``sampling`` says with ``seed``."""

    parent: Segment
    sampling: Sampling
    seed: int


@dataclass
class Decoded:
    """A request's continuation: its segment (the generated tokens and their KV), the tokens, their
    log-probabilities, the text, and why it ended ("stop", "eos" or "length")."""

    segment: Segment
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    text: str = ""
    finish_reason: str = ""


class Ends:
    """How each request of one decode call can end, worked out once for all its steps.

    A request's generated tokens reach its length limit at ``limit[i]`` tokens (its
    ``max_tokens``, or the room left in the model's context after its parent). ``on_token[i]``
    maps a token that ends it to the reason (EOS unless ignored, then its stop tokens); requests
    with the same Sampling share one map. ``stops[i]`` are its stop strings.
    """

    def __init__(self, requests: Sequence[DecodeRequest], eos: AbstractSet[int], max_context: int) -> None:
        self.limit = [min(r.sampling.max_tokens, max_context - r.parent.end) for r in requests]
        maps: dict[int, dict[int, str]] = {}
        for r in requests:
            sp = r.sampling
            if id(sp) not in maps:
                maps[id(sp)] = {t: "stop" for t in sp.stop_token_ids} | (
                    {} if sp.ignore_eos else dict.fromkeys(eos, "eos")
                )
        self.on_token = [maps[id(r.sampling)] for r in requests]
        self.stops = [r.sampling.stop for r in requests]
