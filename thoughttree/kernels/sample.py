"""Seeded Gumbel-max sampling over the vocabulary on the device, each row split over many programs.

Each row draws ``argmax(logits / temperature + g)`` where ``g`` is Gumbel noise made from a
counter-based hash of (seed, step, token id), the same hash as
:func:`thoughttree.kernels.reference.uniform_noise`: a row's token depends only on its own seed
and step, whatever else is in the batch. The same pass reduces the row's log-sum-exp, so the
chosen token's log-probability (temperature 1, unfiltered) comes out with it. A row's vocabulary
is cut into parts read by separate programs (a few rows of a 128k vocabulary would otherwise
leave most of the GPU idle); a second kernel joins each row's parts in a fixed order. Tokens and
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


@triton.jit(do_not_specialize=["chunk"])  # chunk follows the row count: one compiled kernel for all
def _sample_part_kernel(
    LOGITS, SCORES, TEMP, SEED, STEP, PART_F, PART_I, vocab, chunk, stride_l, stride_s,
    HAS_SCORES: tl.constexpr, BLOCK: tl.constexpr,
):
    row = tl.program_id(0)
    part = tl.program_id(1)
    parts = tl.num_programs(1)
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
    first = part * chunk
    stop = tl.minimum(first + chunk, vocab)
    for v0 in range(first, stop, BLOCK):
        ids = v0 + offs
        ok = ids < stop
        x = tl.load(base + ids, mask=ok, other=float("-inf")).to(tl.float32)
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
    mx = tl.max(m, axis=0)
    mx_safe = tl.where(mx == float("-inf"), 0.0, mx)
    out = (row * parts + part) * 3
    tl.store(PART_F + out, top)
    tl.store(PART_F + out + 1, mx)
    tl.store(PART_F + out + 2, tl.sum(s * tl.exp(m - mx_safe), axis=0))
    tl.store(PART_I + row * parts + part, tl.min(tl.where(best == top, best_id, 2147483647), axis=0))


@triton.jit(do_not_specialize=["parts"])
def _sample_join_kernel(LOGITS, PART_F, PART_I, OUT, parts, stride_l, PARTS: tl.constexpr):
    """Join a row's parts in a fixed order: the best draw (earliest id on ties) and the log-sum-exp."""
    row = tl.program_id(0)
    p = tl.arange(0, PARTS)
    ok = p < parts
    at = (row * parts + p) * 3
    top = tl.load(PART_F + at, mask=ok, other=float("-inf"))
    mx = tl.load(PART_F + at + 1, mask=ok, other=float("-inf"))
    total = tl.load(PART_F + at + 2, mask=ok, other=0.0)
    ids = tl.load(PART_I + row * parts + p, mask=ok, other=2147483647)
    best = tl.max(top, axis=0)
    chosen = tl.min(tl.where(top == best, ids, 2147483647), axis=0)
    big = tl.max(mx, axis=0)
    lse = big + tl.log(tl.sum(total * tl.exp(mx - big), axis=0))
    picked = tl.load(LOGITS + row.to(tl.int64) * stride_l + chosen).to(tl.float32)
    tl.store(OUT + row * 2, chosen.to(tl.float64))
    tl.store(OUT + row * 2 + 1, (picked - lse).to(tl.float64))


def vocab_parts(rows: int, vocab: int, block: int) -> int:
    """How many programs share a row's vocabulary: about 512 programs in all, each at least 4 blocks."""
    return max(1, min(-(-512 // max(rows, 1)), -(-vocab // (4 * block))))


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
        logits: [R, V] raw logits, float32 or the model's bfloat16/float16 (read as float32; the
            log-probability is taken under them).
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
    if logits.dtype not in (torch.float32, torch.bfloat16, torch.float16) or logits.stride(1) != 1:
        raise ValueError(f"logits must be float32, bfloat16 or float16 with contiguous rows, got {logits.dtype} "
                         f"strides {logits.stride()}")
    if scores is not None and (scores.shape != logits.shape or scores.dtype != torch.float32 or scores.stride(1) != 1):
        raise ValueError("scores must be float32 like logits, with contiguous rows")
    if out is None:
        out = torch.empty(r, 2, dtype=torch.float64, device=logits.device)
    if r == 0:
        return out
    block = min(1024, triton.next_power_of_2(vocab))
    per_part = -(-vocab // vocab_parts(r, vocab, block))
    chunk = -(-per_part // block) * block  # whole blocks per program
    parts = -(-vocab // chunk)
    part_f = torch.empty(r, parts, 3, dtype=torch.float32, device=logits.device)
    part_i = torch.empty(r, parts, dtype=torch.int32, device=logits.device)
    src = scores if scores is not None else logits
    _sample_part_kernel[(r, parts)](
        logits, src, temperature, seeds, steps, part_f, part_i, vocab, chunk, logits.stride(0), src.stride(0),
        HAS_SCORES=scores is not None, BLOCK=block, num_warps=4,
    )
    most = vocab_parts(1, vocab, block)  # the join's width depends on the vocabulary only
    _sample_join_kernel[(r,)](logits, part_f, part_i, out, parts, logits.stride(0),
                              PARTS=max(2, triton.next_power_of_2(most)))
    return out
