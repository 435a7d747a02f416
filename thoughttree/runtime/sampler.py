"""Batched sampling where each row's randomness depends only on its own seed and step.

Noise comes from a counter-based hash of (seed, step, token id) instead of a shared generator,
so a request draws the same tokens whatever else is in the batch and in whatever order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from ..config import Sampling

_M32 = 0xFFFFFFFF


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """(x * c) mod 2**32 for x < 2**32 without overflowing int64."""
    lo, hi = x & 0xFFFF, x >> 16
    return (lo * c + (((hi * c) & 0xFFFF) << 16)) & _M32


def _hash32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer finaliser (xorshift-multiply) applied elementwise to int64 in [0, 2**32)."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def uniform_noise(seeds: torch.Tensor, steps: torch.Tensor, vocab: int) -> torch.Tensor:
    """[R, vocab] float32 in (0, 1), a pure function of (seed, step, token id) per row."""
    lo, hi = seeds & _M32, (seeds >> 32) & _M32
    key = _hash32(_hash32(lo ^ _hash32(hi + 0x9E3779B9)) ^ (steps & _M32))  # [R]
    ids = torch.arange(vocab, device=seeds.device, dtype=torch.int64)
    bits = _hash32((key[:, None] + _hash32(ids)[None, :] * 2654435761) & _M32)
    return ((bits >> 8).float() + 0.5) / float(1 << 24)


@dataclass(frozen=True)
class Draw:
    tokens: list[int]
    logprobs: list[float]  # log-probability of each chosen token under the model (temperature 1, unfiltered)


def sample(logits: torch.Tensor, params: Sequence[Sampling], seeds: Sequence[int], steps: Sequence[int]) -> Draw:
    """Choose one token per row of ``logits`` [R, vocab] (float32) under each row's own Sampling."""
    vocab, dev = logits.shape[1], logits.device
    logprobs = torch.log_softmax(logits, dim=-1)
    temp = torch.tensor([p.temperature for p in params], device=dev, dtype=torch.float32)
    greedy = temp == 0
    scaled = logits / torch.where(greedy, torch.ones_like(temp), temp)[:, None]
    if any(p.top_k > 0 or p.top_p < 1 or p.min_p > 0 for p in params):
        filtered = _filter(scaled, params)
    else:
        filtered = scaled
    seed_t = torch.tensor([s & ((1 << 63) - 1) for s in seeds], device=dev, dtype=torch.int64)
    step_t = torch.tensor(list(steps), device=dev, dtype=torch.int64)
    gumbel = -torch.log(-torch.log(uniform_noise(seed_t, step_t, vocab)))
    chosen = torch.where(greedy, logits.argmax(dim=-1), (filtered + gumbel).argmax(dim=-1))
    picked = logprobs.gather(1, chosen[:, None])[:, 0]
    return Draw(chosen.tolist(), picked.tolist())


def _filter(scaled: torch.Tensor, params: Sequence[Sampling]) -> torch.Tensor:
    """Set logits outside each row's top-k / top-p / min-p set to -inf (the best token always stays)."""
    vocab, dev = scaled.shape[1], scaled.device
    top_k = torch.tensor([p.top_k if p.top_k > 0 else vocab for p in params], device=dev)
    top_p = torch.tensor([p.top_p for p in params], device=dev, dtype=torch.float32)
    min_p = torch.tensor([p.min_p for p in params], device=dev, dtype=torch.float32)
    sorted_logits, order = scaled.sort(dim=-1, descending=True)
    probs = sorted_logits.softmax(dim=-1)
    rank = torch.arange(vocab, device=dev)[None, :]
    # Keep a token when it is inside top-k, when the mass before it is below top-p, and when it
    # clears min-p of the best token's probability.
    keep = rank < top_k[:, None]
    keep &= (probs.cumsum(dim=-1) - probs) < top_p[:, None]
    keep &= probs >= min_p[:, None] * probs[:, :1]
    keep[:, 0] = True
    return torch.full_like(scaled, float("-inf")).scatter(1, order, sorted_logits.masked_fill(~keep, float("-inf")))
