"""Batched sampling where each row's randomness depends only on its own seed and step.

Noise comes from a counter-based hash of (seed, step, token id) instead of a shared generator,
so a request draws the same tokens whatever else is in the batch and in whatever order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from ..config import Sampling
from ..kernels.reference import gumbel_sample_reference, uniform_noise
from ..kernels.sample import gumbel_sample


@dataclass(frozen=True)
class Draw:
    tokens: list[int]
    logprobs: list[float]  # log-probability of each chosen token under the model (temperature 1, unfiltered)


def sample_packed(
    logits: torch.Tensor, params: Sequence[Sampling], seeds: Sequence[int], steps: Sequence[int], *, fused: bool
) -> torch.Tensor:
    """[R, 2] float64 (token, log-probability) per row of ``logits`` [R, vocab] (float32), on its device.

    ``fused`` draws with the one-pass Triton kernel (the GPU path); otherwise with the PyTorch
    reference. Both compute the same hash noise, so a row's draw depends only on its own seed
    and step.
    """
    temp, seed_t, step_t, scores = _rows(logits, params, seeds, steps)
    if fused:
        return gumbel_sample(logits.contiguous(), temp, seed_t, step_t, scores)
    return gumbel_sample_reference(logits, temp, seed_t, step_t, scores)


def perturbed_scores(
    logits: torch.Tensor, params: Sequence[Sampling], seeds: Sequence[int], steps: Sequence[int]
) -> torch.Tensor:
    """[R, vocab] float32: the values whose argmax :func:`sample_packed` draws for each row of
    ``logits`` [R, vocab] under its Sampling, seed and step: the logits where the temperature is
    0, else the logits over the temperature, filtered, plus the row's Gumbel noise."""
    x = logits.float()
    temp, seed_t, step_t, scores = _rows(x, params, seeds, steps)
    greedy = temp == 0
    if scores is None:
        scores = x / torch.where(greedy, torch.ones_like(temp), temp)[:, None]
    gumbel = -torch.log(-torch.log(uniform_noise(seed_t, step_t, x.shape[1])))
    return torch.where(greedy[:, None], x, scores + gumbel)


def _rows(
    logits: torch.Tensor, params: Sequence[Sampling], seeds: Sequence[int], steps: Sequence[int]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Each row's temperature, seed and step as device tensors, and its filtered logits over the
    temperature where any row filters (else None)."""
    dev = logits.device
    temp = torch.tensor([p.temperature for p in params], device=dev, dtype=torch.float32)
    seed_t = torch.tensor([s & ((1 << 63) - 1) for s in seeds], device=dev, dtype=torch.int64)
    step_t = torch.tensor(list(steps), device=dev, dtype=torch.int64)
    scores = None
    if any(p.top_k > 0 or p.top_p < 1 or p.min_p > 0 for p in params):
        greedy = temp == 0
        scores = _filter(logits / torch.where(greedy, torch.ones_like(temp), temp)[:, None], params)
    return temp, seed_t, step_t, scores


def unpack(packed: torch.Tensor) -> Draw:
    """The host copy of :func:`sample_packed`'s result (one device-to-host transfer)."""
    host = packed.cpu().numpy()
    return Draw(host[:, 0].astype(int).tolist(), host[:, 1].tolist())


def sample(logits: torch.Tensor, params: Sequence[Sampling], seeds: Sequence[int], steps: Sequence[int]) -> Draw:
    """Choose one token per row of ``logits`` [R, vocab] (float32) under each row's own Sampling."""
    return unpack(sample_packed(logits, params, seeds, steps, fused=logits.device.type == "cuda"))


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
