"""Seeded Gumbel-max sampling over the vocabulary in one pass per row, on the device.

Each row draws ``argmax(logits / temperature + g)`` where ``g`` is Gumbel noise made from a
counter-based hash of (seed, step, token id), the same hash as
:func:`thoughttree.kernels.reference.uniform_noise`: a row's token depends only on its own seed
and step, whatever else is in the batch. The same pass reduces the row's log-sum-exp, so the
chosen token's log-probability (temperature 1, unfiltered) comes out with it. Tokens and
log-probabilities land in one float64 tensor so the host reads them with one transfer.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

_M32 = tl.constexpr(0xFFFFFFFF)


@triton.jit
def _hash32(x):
    """The xorshift-multiply finaliser on int64 values; products wrap, their low 32 bits are exact."""
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _M32
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & _M32
    return x ^ (x >> 16)


@triton.jit
def _sample_kernel(
    LOGITS, SCORES, TEMP, SEED, STEP, OUT, vocab, stride_l, stride_s,
    HAS_SCORES: tl.constexpr, BLOCK: tl.constexpr,
):
    row = tl.program_id(0)
    temp = tl.load(TEMP + row)
    greedy = temp == 0.0
    inv_t = tl.where(greedy, 1.0, 1.0 / tl.where(greedy, 1.0, temp))
    seed = tl.load(SEED + row)
    step = tl.load(STEP + row)
    lo = seed & _M32
    hi = (seed >> 32) & _M32
    key = _hash32(_hash32(lo ^ _hash32(hi + 0x9E3779B9)) ^ (step & _M32))
    offs = tl.arange(0, BLOCK)
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    best = tl.full([BLOCK], float("-inf"), tl.float32)
    best_id = tl.full([BLOCK], 2147483647, tl.int32)
    base = LOGITS + row.to(tl.int64) * stride_l
    for v0 in range(0, vocab, BLOCK):
        ids = v0 + offs
        ok = ids < vocab
        x = tl.load(base + ids, mask=ok, other=float("-inf"))
        # Online log-sum-exp of the raw logits, one running (max, sum) per lane.
        m_new = tl.maximum(m, x)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        s = s * tl.exp(m - m_safe) + tl.where(ok, tl.exp(x - m_safe), 0.0)
        m = m_new
        if HAS_SCORES:
            score = tl.load(SCORES + row.to(tl.int64) * stride_s + ids, mask=ok, other=float("-inf"))
        else:
            score = x * inv_t
        bits = _hash32((key + _hash32(ids.to(tl.int64)) * 2654435761) & _M32)
        u = ((bits >> 8).to(tl.float32) + 0.5) / 16777216.0
        noisy = tl.where(greedy, x, score - tl.log(-tl.log(u)))
        noisy = tl.where(ok, noisy, float("-inf"))
        # Strictly greater keeps the earliest id on ties, as torch.argmax does.
        take = noisy > best
        best = tl.where(take, noisy, best)
        best_id = tl.where(take, ids, best_id)
    top = tl.max(best, axis=0)
    chosen = tl.min(tl.where(best == top, best_id, 2147483647), axis=0)
    mx = tl.max(m, axis=0)
    total = tl.sum(s * tl.exp(m - mx), axis=0)
    picked = tl.load(base + chosen)
    tl.store(OUT + row * 2, chosen.to(tl.float64))
    tl.store(OUT + row * 2 + 1, (picked - mx - tl.log(total)).to(tl.float64))


def gumbel_sample(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    seeds: torch.Tensor,
    steps: torch.Tensor,
    scores: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """One seeded draw per row.

    Args:
        logits: [R, V] float32 raw logits (the log-probability is taken under them).
        temperature: [R] float32, 0 = greedy (argmax of ``logits``).
        seeds, steps: [R] int64 (seeds non-negative, below 2**63).
        scores: optional [R, V] float32 already temperature-scaled and filtered (top-k/p, min-p:
            -inf outside the kept set); the draw is ``argmax(scores + g)`` instead of
            ``argmax(logits / temperature + g)``.
        out: optional [R, 2] float64 to write into.
    Returns:
        [R, 2] float64: the chosen token id and its log-probability per row.
    """
    r, vocab = logits.shape
    for name, t in (("temperature", temperature), ("seeds", seeds), ("steps", steps)):
        if t.shape != (r,) or t.device != logits.device:
            raise ValueError(f"{name} must be [{r}] on {logits.device}, got {tuple(t.shape)} on {t.device}")
    if logits.dtype != torch.float32 or logits.stride(1) != 1:
        raise ValueError(f"logits must be float32 with contiguous rows, got {logits.dtype} strides {logits.stride()}")
    if scores is not None and (scores.shape != logits.shape or scores.dtype != torch.float32 or scores.stride(1) != 1):
        raise ValueError("scores must be float32 like logits, with contiguous rows")
    if out is None:
        out = torch.empty(r, 2, dtype=torch.float64, device=logits.device)
    if r == 0:
        return out
    _sample_kernel[(r,)](
        logits, scores if scores is not None else logits, temperature, seeds, steps, out, vocab,
        logits.stride(0), (scores if scores is not None else logits).stride(0),
        HAS_SCORES=scores is not None, BLOCK=1024, num_warps=4,
    )
    return out
