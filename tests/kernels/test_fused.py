"""Fused layer pieces, the sampling kernel and decode-run work items against their references.

On CPU the kernels run in the Triton interpreter (float16 and float32); the ``gpu`` tests repeat
them in bfloat16 on CUDA.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from thoughttree.kernels import WorkConfig, plan_tree_attention, tree_attention
from thoughttree.kernels import fused, reference
from thoughttree.kernels.plan.decode_work import TAIL_PIECE, decode_work
from thoughttree.kernels.deft import run_work
from thoughttree.kernels.sample import gumbel_sample
from thoughttree.kernels.plan.workplan import upload

from tree_cases import assert_close_to_reference, random_cache, tree_shape

DEV = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = [torch.float16, torch.float32] + ([torch.bfloat16] if DEV == "cuda" else [])
# With a GPU every case runs the compiled kernels there, so `pytest -m gpu` selects them.
pytestmark = [pytest.mark.gpu] if DEV == "cuda" else []


def _close(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> None:
    # Each output is one rounding of the same float32 value, or two apart when a reduction's
    # order differs: allow two units in the last place at the output's scale.
    tol = 2 * torch.finfo(dtype).eps * max(1.0, b.float().abs().max().item())
    assert (a.float() - b.float()).abs().max().item() <= tol


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [72, 257])
def test_add_rms_norm(dtype: torch.dtype, n: int) -> None:
    g = torch.Generator().manual_seed(n)
    x, r, w = (torch.randn(s, generator=g).to(DEV, dtype) for s in ((7, n), (7, n), (n,)))
    for residual in (r, None):
        got, got_res = fused.add_rms_norm(x, residual, w, 1e-5)
        want, want_res = reference.add_rms_norm_reference(x, residual, w, 1e-5)
        assert torch.equal(got_res, want_res)
        _close(got, want, dtype)


def test_add_rms_norm_refuses_strided_rows() -> None:
    # A row whose elements are not adjacent (a transposed view, a strided weight) was read as if
    # they were: the norm of other elements, no error.
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(7, 72, generator=g).to(DEV), torch.randn(72, generator=g).to(DEV)
    column_major = x.T.contiguous().T
    strided = torch.randn(144, generator=g).to(DEV)[::2]
    for args in ((column_major, None, w), (x, column_major, w), (x, None, strided)):
        with pytest.raises(ValueError, match="contiguous along N"):
            fused.add_rms_norm(*args, 1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_mul(dtype: torch.dtype) -> None:
    gu = torch.randn(5, 2 * 1100, generator=torch.Generator().manual_seed(0)).to(DEV, dtype)
    _close(fused.silu_mul(gu), reference.silu_mul_reference(gu), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("h_q,h_kv,d", [(4, 2, 32), (6, 1, 64), (3, 3, 16)])
@pytest.mark.parametrize("heads", [1, 4])
def test_rope_store_rotates_and_writes_only_real_slots(
    dtype: torch.dtype, h_q: int, h_kv: int, d: int, heads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fused, "rope_heads", lambda rows: heads)  # heads per program, as for many rows
    g = torch.Generator().manual_seed(d)
    t = 6
    qkv = torch.randn(t, (h_q + 2 * h_kv) * d, generator=g).to(DEV, dtype)
    q, k, v = (x.view(t, -1, d) for x in qkv.split([h_q * d, h_kv * d, h_kv * d], dim=-1))
    positions = torch.tensor([0, 1, 17, 300, 4095, 16000], device=DEV)
    inv_freq = (1.0 / 500000.0 ** (torch.arange(0, d, 2).float() / d)).to(DEV)
    slots = torch.tensor([5, 0, 12, 31, -1, 7], device=DEV)  # row 4 only recomputes
    caches = [torch.randn(4, 8, h_kv, d, generator=g).to(DEV, dtype) for _ in range(2)]
    mine = [c.clone() for c in caches]
    got = fused.rope_store(q, k, v, positions, inv_freq, mine[0], mine[1], slots)
    want = reference.rope_store_reference(q, k, v, positions, inv_freq, caches[0], caches[1], slots)
    _close(got, want, dtype)
    _close(mine[0], caches[0], dtype)
    assert torch.equal(mine[1], caches[1])


@pytest.mark.parametrize("vocab", [3001, 40001])  # one part per row; ten parts of 4,096 ids
def test_gumbel_sample_matches_reference(vocab: int) -> None:
    g = torch.Generator().manual_seed(0)
    r = 8  # vocab: not a multiple of the kernel's block
    logits = (torch.randn(r, vocab, generator=g) * 3).to(DEV)
    temperature = torch.tensor([0, 1, 0.7, 1.5, 1, 2.0, 0.3, 1], device=DEV)
    seeds = torch.tensor([0, 1, 2**62 + 5, 123456789012, 7, 2**63 - 1, 99, 1], device=DEV)
    steps = torch.tensor([0, 3, 5, 2**33, 1, 9, 0, 3], device=DEV)
    scores = logits / temperature.clamp(min=1e-3)[:, None]
    scores[:, ::3] = float("-inf")  # a filtered row keeps only some tokens
    scores[0, : vocab // 2] = float("-inf")  # whole parts filtered out
    for sc in (None, scores):
        got = gumbel_sample(logits, temperature, seeds, steps, sc)
        want = reference.gumbel_sample_reference(logits, temperature, seeds, steps, sc)
        assert torch.equal(got[:, 0], want[:, 0])
        assert torch.allclose(got[:, 1], want[:, 1], atol=1e-5)
    # Rows 1 and 7 share seed and step: the same draw whatever else is in the batch.
    got = gumbel_sample(logits[[1, 1]], temperature[[1, 7]], seeds[[1, 7]], steps[[1, 7]])
    assert got[0, 0] == got[1, 0]


@pytest.mark.parametrize("dtype", [torch.float16] + ([torch.bfloat16] if DEV == "cuda" else []))
def test_gumbel_sample_reads_half_precision_logits(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(1)
    logits = (torch.randn(3, 20000, generator=g) * 3).to(DEV, dtype)
    temperature = torch.tensor([0, 1, 0.5], device=DEV)
    seeds = torch.tensor([4, 5, 6], device=DEV)
    steps = torch.tensor([0, 1, 2], device=DEV)
    got = gumbel_sample(logits, temperature, seeds, steps)
    want = reference.gumbel_sample_reference(logits.float(), temperature, seeds, steps)
    assert torch.equal(got[:, 0], want[:, 0])
    assert torch.allclose(got[:, 1], want[:, 1], atol=1e-5)


def test_gumbel_sample_rejects_bad_shapes() -> None:
    logits = torch.zeros(3, 10, device=DEV)
    with pytest.raises(ValueError, match="temperature"):
        gumbel_sample(logits, torch.zeros(2, device=DEV), torch.zeros(3, dtype=torch.int64, device=DEV),
                      torch.zeros(3, dtype=torch.int64, device=DEV))


@pytest.mark.parametrize("kind", ["star", "random", "lopsided"])
@pytest.mark.parametrize("share", [True, False])
@pytest.mark.parametrize("h_q,h_kv", [(4, 2), (8, 1)])
def test_decode_work_equals_the_tree_with_tails_as_nodes(kind: str, share: bool, h_q: int, h_kv: int) -> None:
    dtype = torch.float16
    d, page_size = 32, 8
    rng = np.random.default_rng(3)
    parents, lengths = tree_shape(kind, rng, lengths=(1, 9, 23, 40))
    q_nodes = [int(x) for x in rng.integers(0, len(parents), size=5)]
    # star: tails longer than one piece (tail items); lopsided: long tails, read by the merge
    tail_cap = {"star": TAIL_PIECE + 20, "lopsided": 300}.get(kind, 13)
    tail_len = [int(x) for x in rng.integers(1, tail_cap + 1, size=len(q_nodes))]
    if kind != "random":
        tail_len[0] = tail_cap
    k, v, perm = random_cache(sum(lengths) + sum(tail_len), page_size, h_kv, d, dtype, "cpu", seed=1)
    k, v = k.to(DEV), v.to(DEV)
    bounds = np.cumsum([0, *lengths, *tail_len])
    node_slots = [perm[bounds[i] : bounds[i + 1]] for i in range(len(lengths) + len(tail_len))]
    shared = plan_tree_attention(parents, node_slots[: len(lengths)], q_nodes, page_size=page_size, device=DEV)
    work = decode_work(shared, node_slots[len(lengths):], tail_cap, h_q, h_kv, d,
                       WorkConfig(waves=4.0, num_sms=16, min_chunk=16), share=share)
    assert work.folded == (kind != "star")
    q = torch.randn(len(q_nodes), h_q, d, generator=torch.Generator().manual_seed(2)).to(DEV, dtype)
    out = run_work(q, k, v, upload(work.host, torch.device(DEV), h_q, d, WorkConfig(merge_block=1)))
    full = plan_tree_attention(
        parents + q_nodes, node_slots, list(range(len(parents), len(parents) + len(q_nodes))),
        page_size=page_size, device=DEV,
    )
    assert_close_to_reference(out, q, k, v, full)
    assert torch.allclose(out.float(), tree_attention(q, k, v, full, backend="reference").float(), atol=2e-2)


@pytest.mark.parametrize("tail_cap", [12, TAIL_PIECE + 9])
def test_queries_sharing_a_tail_window_see_their_own_prefixes(tail_cap: int) -> None:
    """A branch's newest token and its draft tokens read one window, each up to itself: the same
    attention as a tree holding each query's prefix of the window as its own node."""
    dtype, d, h_q, h_kv, page_size = torch.float16, 32, 4, 2, 8
    parents, lengths = [-1, 0, 0], [19, 7, 11]
    branch_nodes = [1, 2, 1]  # three branches: two under node 1, one under node 2
    filled = [3, 5, tail_cap - 4]  # tokens in each branch's window before its drafts
    depth = 4  # each branch's newest token and three draft tokens after it
    k, v, perm = random_cache(sum(lengths) + 3 * tail_cap, page_size, h_kv, d, dtype, "cpu", seed=4)
    k, v = k.to(DEV), v.to(DEV)
    bounds = np.cumsum([0, *lengths])
    node_slots = [perm[bounds[i] : bounds[i + 1]] for i in range(len(lengths))]
    tails = [perm[bounds[-1] + b * tail_cap : bounds[-1] + b * tail_cap + filled[b] + depth - 1] for b in range(3)]
    windows = [b for _ in range(depth) for b in range(3)]  # depth-major rows: row = level * 3 + branch
    seen = [filled[b] + level for level in range(depth) for b in range(3)]
    q_nodes = [branch_nodes[b] for b in windows]
    shared = plan_tree_attention(parents, node_slots, q_nodes, page_size=page_size, device=DEV)
    work = decode_work(shared, tails, tail_cap, h_q, h_kv, d, WorkConfig(waves=4.0, num_sms=16, min_chunk=16),
                       windows=windows, lengths=seen)
    assert work.folded == (tail_cap <= WorkConfig().fold_tail)
    assert len(set(work.tail_base.tolist())) == 3
    q = torch.randn(len(windows), h_q, d, generator=torch.Generator().manual_seed(5)).to(DEV, dtype)
    out = run_work(q, k, v, upload(work.host, torch.device(DEV), h_q, d, WorkConfig(merge_block=1)))
    full = plan_tree_attention(
        parents + q_nodes, node_slots + [tails[b][:n] for b, n in zip(windows, seen)],
        list(range(len(parents), len(parents) + len(windows))), page_size=page_size, device=DEV,
    )
    assert_close_to_reference(out, q, k, v, full)
    with pytest.raises(ValueError, match="at most the tokens its tail window holds"):
        decode_work(shared, tails, tail_cap, h_q, h_kv, d, WorkConfig(), windows=windows, lengths=[tail_cap + 1] * 12)
