"""The few-row projection against its reference, and where ``linear`` takes it.

On CPU the kernel runs in the Triton interpreter (float16 and float32); the ``gpu`` tests repeat
it in bfloat16 on CUDA, at Llama-3-8B's projection shapes too.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from thoughttree.kernels import linear as few
from thoughttree.kernels.fused import add_rms_norm, rope_store, silu_mul
from thoughttree.kernels.reference import (
    linear_reference,
    normed_linear_reference,
    rms_norm_reference,
    rope_store_reference,
    silu_mul_reference,
)

DEV = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = [torch.float16, torch.float32] + ([torch.bfloat16] if DEV == "cuda" else [])
pytestmark = [pytest.mark.gpu] if DEV == "cuda" else []
# Small tiles, so that the interpreter's shapes still take several programs and K steps.
SMALL = [few.Tiling(block_n=32, block_k=64, stages=2, swap=False), few.Tiling(block_n=64, block_k=32, stages=2, swap=True)]


def _inputs(t: int, n_in: int, n_out: int, dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(t, n_in, generator=g).to(DEV, dtype)
    w = (torch.randn(n_out, n_in, generator=g) / n_in**0.5).to(DEV, dtype)
    b = torch.randn(n_out, generator=g).to(DEV, dtype)
    return x, w, b


def _close(a: torch.Tensor, b: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> None:
    # Float32 sums of K products in different orders (each within K roundings of float32 of the
    # sum of magnitudes), then one rounding each to the output dtype: two units at its scale.
    sums = (x.float().abs() @ w.float().abs().T).max().item()
    tol = 2 * torch.finfo(b.dtype).eps * max(1.0, b.float().abs().max().item()) + x.shape[1] * 2**-24 * sums
    assert a.dtype == b.dtype and a.shape == b.shape
    assert (a.float() - b.float()).abs().max().item() <= tol


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tile", SMALL, ids=["narrow", "swapped"])
@pytest.mark.parametrize("t,n_in,n_out", [(1, 64, 32), (5, 96, 40), (16, 300, 130), (32, 128, 64), (64, 40, 72)])
def test_few_rows_linear_matches_reference(dtype, tile, t, n_in, n_out) -> None:
    x, w, b = _inputs(t, n_in, n_out, dtype, t + n_in)
    _close(few.few_rows_linear(x, w, None, tile), linear_reference(x, w), x, w)
    _close(few.few_rows_linear(x, w, b, tile), linear_reference(x, w, b), x, w)


def test_rows_of_a_wider_tensor_and_no_rows() -> None:
    x, w, _ = _inputs(6, 96, 40, torch.float32, 0)
    wide = torch.zeros(6, 200, device=DEV)
    wide[:, 50:146] = x
    _close(few.few_rows_linear(wide[:, 50:146], w, None, SMALL[0]), linear_reference(x, w), x, w)
    assert few.few_rows_linear(x[:0], w, None, SMALL[0]).shape == (0, 40)


def test_products_written_into_a_given_tensor_equal_fresh_ones(monkeypatch) -> None:
    x, w, b = _inputs(5, 96, 40, torch.float16, 3)
    out = torch.full((5, 40), 7.0, dtype=torch.float16, device=DEV)
    fresh = few.few_rows_linear(x, w, b, SMALL[0])
    assert few.few_rows_linear(x, w, b, SMALL[0], out=out) is out and torch.equal(out, fresh)
    with pytest.raises(ValueError, match=r"out must be a contiguous \(5, 40\) torch.float16 tensor"):
        few.few_rows_linear(x, w, b, SMALL[0], out=out[:, :20])
    monkeypatch.setattr(few, "MIN_PROGRAMS", 1)
    for rows, bias in ((5, None), (5, b), (40, None), (40, b)):  # the kernel's rows, then cuBLAS's
        xs = torch.randn(rows, 96, dtype=torch.float16, generator=torch.Generator().manual_seed(rows)).to(DEV)
        into = torch.empty(rows, 40, dtype=torch.float16, device=DEV)
        assert few.linear(xs, w, bias, max_rows=8, out=into) is into
        assert torch.equal(into, few.linear(xs, w, bias, max_rows=8))


def test_bad_inputs_name_the_problem() -> None:
    x, w, b = _inputs(4, 96, 40, torch.float32, 1)
    with pytest.raises(ValueError, match="agree on K and N"):
        few.few_rows_linear(x[:, :64], w)
    with pytest.raises(ValueError, match="agree on K and N"):
        few.few_rows_linear(x, w, b[:8])
    with pytest.raises(ValueError, match="at most 64 rows"):
        few.few_rows_linear(torch.zeros(65, 96, device=DEV), w)
    with pytest.raises(ValueError, match="unit stride"):
        few.few_rows_linear(x.T.contiguous().T, w)


def test_tiling_by_weight_width() -> None:
    assert few.tiling(128256) == few.tiling(6144) == few.WIDE  # LM head, q/k/v of Llama-3-8B
    assert few.tiling(4096) == few.NARROW  # its attention output and MLP down
    assert few.tiling(3072) == few.NARROW and few.tiling(3040) is None
    assert few.tiling(256) is None  # a small model's: cuBLAS


def test_linear_takes_the_kernel_only_for_few_rows_of_wide_weights(monkeypatch) -> None:
    calls = []
    real = few.few_rows_linear
    monkeypatch.setattr(few, "few_rows_linear", lambda *a, **k: calls.append(a[3]) or real(*a, **k))
    monkeypatch.setattr(few, "MIN_PROGRAMS", 2)  # interpreter-sized weights count as wide
    x, w, b = _inputs(40, 96, 128, torch.float32, 2)
    _close(few.linear(x[:8], w, b), linear_reference(x[:8], w, b), x, w)
    assert calls == [few.WIDE]
    assert torch.equal(few.linear(x, w, b), F.linear(x, w, b))  # more than MAX_ROWS rows
    assert torch.equal(few.linear(x[:8], w, b, max_rows=4), F.linear(x[:8], w, b))
    assert torch.equal(few.linear(x[:8].repeat(9, 1), w, b, max_rows=100), F.linear(x[:8].repeat(9, 1), w, b))  # past ROW_LIMIT
    assert torch.equal(few.linear(x[:8], w[:32]), F.linear(x[:8], w[:32]))  # 32 outputs: one program, too few
    assert torch.equal(few.linear(x[:8, ::2], w[:, :48]), F.linear(x[:8, ::2], w[:, :48]))  # strided rows
    assert len(calls) == 1


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tile", SMALL, ids=["narrow", "swapped"])
@pytest.mark.parametrize("t,n_in,inter", [(1, 64, 16), (5, 96, 20), (16, 300, 65), (32, 128, 32), (64, 40, 36)])
def test_gated_projection_is_silu_mul_of_the_projection(dtype, tile, t, n_in, inter) -> None:
    x, w, b = _inputs(t, n_in, 2 * inter, dtype, t + inter)
    for bias in (None, b):
        got = few.few_rows_linear(x, w, bias, tile, gated=True)
        assert got.shape == (t, inter) and got.dtype == dtype
        # The same products as the plain projection, then silu_mul's steps (within a rounding of the order).
        _gated_close(got, few.few_rows_linear(x, w, bias, tile))
        # Against float32 references: the projections within _close's bound e, silu's slope
        # below 1.1, then three roundings at the output's scale.
        gate, up = linear_reference(x.float(), w.float(), None if bias is None else bias.float()).chunk(2, dim=-1)
        ref = silu_mul_reference(torch.cat([gate, up], dim=-1))
        sums = (x.float().abs() @ w.float().abs().T).max().item()
        e = 2 * torch.finfo(dtype).eps * max(1.0, gate.abs().max().item(), up.abs().max().item()) + n_in * 2**-24 * sums
        tol = e * (1.1 * up.abs().max().item() + F.silu(gate).abs().max().item() + e) + 3 * torch.finfo(dtype).eps * max(1.0, ref.abs().max().item())
        assert (got.float() - ref).abs().max().item() <= tol


def test_gated_projection_needs_pairs_of_rows() -> None:
    x, w, _ = _inputs(4, 96, 41, torch.float32, 3)
    with pytest.raises(ValueError, match="even count"):
        few.few_rows_linear(x, w, None, SMALL[1], gated=True)
    with pytest.raises(ValueError, match="silu_mul needs"):
        few.linear_silu_mul(x, w)


def test_linear_silu_mul_takes_the_kernel_where_linear_does(monkeypatch) -> None:
    calls = []
    real = few.few_rows_linear
    monkeypatch.setattr(few, "few_rows_linear",  # kernel options given, not an ``out`` left to the kernel
                        lambda *a, **k: calls.append((a[3], {n: v for n, v in k.items() if v is not None}))
                        or real(*a, **k))
    monkeypatch.setattr(few, "MIN_PROGRAMS", 2)
    x, w, b = _inputs(40, 96, 128, torch.float32, 4)
    _gated_close(few.linear_silu_mul(x[:8], w, b), few.linear(x[:8], w, b))
    assert calls == [(few.WIDE, {"gated": True}), (few.WIDE, {})]
    calls.clear()
    for args in ((x, w, b), (x[:8], w, b, 4), (x[:8], w[:32]), (x[:8, ::2], w[:, :48])):  # rows, cap, width, stride
        assert torch.equal(few.linear_silu_mul(*args), silu_mul(F.linear(*args[:3])))
    assert calls == []


def _rope_inputs(t: int, hq: int, hkv: int, d: int, dtype: torch.dtype, seed: int):
    """Positions, inv_freq, caches of 16-token pages holding noise, and distinct slots (the last
    row's -1: it writes nothing)."""
    g = torch.Generator().manual_seed(seed)
    positions = torch.randint(0, 5000, (t,), generator=g).to(DEV)
    inv_freq = (1.0 / 10000 ** (torch.arange(0, d, 2).float() / d)).to(DEV)
    pages = -(-(t + 3) // 16) + 1
    k_cache = torch.randn(pages, 16, hkv, d, generator=g).to(DEV, dtype)
    slots = torch.randperm(pages * 16, generator=g)[:t].to(DEV)
    slots[-1:] = -1
    return positions, inv_freq, k_cache, torch.randn(k_cache.shape, generator=g).to(DEV, dtype), slots


def _unfused_rope_store(x, w, bias, positions, inv_freq, k_cache, v_cache, slots, hq, hkv, tile):
    d = w.shape[0] // (hq + 2 * hkv)
    q, k, v = few.few_rows_linear(x, w, bias, tile).split([hq * d, hkv * d, hkv * d], dim=-1)
    t = x.shape[0]
    return rope_store(q.view(t, hq, d), k.view(t, hkv, d), v.view(t, hkv, d), positions, inv_freq, k_cache, v_cache, slots)


def _one_rounding(a: torch.Tensor, b: torch.Tensor, units: float = 2) -> None:
    """``a`` equals ``b`` within one rounding step of the dtype at ``b``'s scale: a fused and an
    unfused kernel multiply the same tiles in shapes of their own, and a dot of another shape may
    sum its products in another order (the compiled kernels on a GPU, numpy's matrix product
    under the interpreter)."""
    assert a.shape == b.shape and a.dtype == b.dtype
    tol = units * torch.finfo(a.dtype).eps * max(1.0, b.float().abs().max().item())
    assert (a.float() - b.float()).abs().max().item() <= tol


def _same_rotation(got: tuple[torch.Tensor, ...], want: tuple[torch.Tensor, ...]) -> None:
    """q and both caches as the unfused projection + rope_store leave them: a projection one
    rounding off in each of a rotated pair (cos + sin at most sqrt 2), then the rotation's own
    rounding (an angle's cosine may round the other way, or normed rows' squares sum in another
    order)."""
    for a, b in zip(got, want):
        _one_rounding(a, b, units=3)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tile", SMALL, ids=["narrow", "swapped"])
@pytest.mark.parametrize("t,n_in,hq,hkv", [(1, 48, 2, 1), (5, 96, 4, 2), (16, 130, 3, 3), (37, 64, 8, 2)])
def test_rotary_projection_is_rope_store_of_the_projection(dtype, tile, t, n_in, hq, hkv) -> None:
    d = 64
    x, w, b = _inputs(t, n_in, (hq + 2 * hkv) * d, dtype, t + n_in)
    bias = b if t % 2 else None  # a bias for odd row counts: every dtype and tile is run with and without
    positions, inv_freq, k_cache, v_cache, slots = _rope_inputs(t, hq, hkv, d, dtype, t)
    k_want, v_want = k_cache.clone(), v_cache.clone()
    want = _unfused_rope_store(x, w, bias, positions, inv_freq, k_want, v_want, slots, hq, hkv, tile)
    got = few.few_rows_rope_store(x, w, bias, positions, inv_freq, k_cache, v_cache, slots, hq, hkv, tile)
    assert got.shape == (t, hq, d) and got.dtype == dtype
    _same_rotation((got, k_cache, v_cache), (want, k_want, v_want))
    # Against the references: the projection within _close's bound e, the rotation of two
    # such values by a cosine and a sine within 2e, then a few roundings at the scale.
    _, _, k_ref, v_ref, _ = _rope_inputs(t, hq, hkv, d, dtype, t)
    qkv = linear_reference(x, w, bias)
    q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
    q_ref = rope_store_reference(q.reshape(t, hq, d), k.reshape(t, hkv, d), v.reshape(t, hkv, d), positions, inv_freq, k_ref, v_ref, slots)
    sums = (x.float().abs() @ w.float().abs().T).max().item()
    e = 2 * torch.finfo(dtype).eps * max(1.0, qkv.float().abs().max().item()) + n_in * 2**-24 * sums
    for a, b_ in ((got, q_ref), (k_cache, k_ref), (v_cache, v_ref)):
        tol = 2 * e + 4 * torch.finfo(dtype).eps * max(1.0, b_.float().abs().max().item())
        assert (a.float() - b_.float()).abs().max().item() <= tol
    if t > 1:  # the rows of the slots written are new
        assert not torch.equal(k_cache, _rope_inputs(t, hq, hkv, d, dtype, t)[2])


def test_rotary_projection_bad_inputs_and_where_it_is_taken(monkeypatch) -> None:
    hq, hkv, d = 4, 2, 64
    x, w, b = _inputs(6, 96, (hq + 2 * hkv) * d, torch.float32, 5)
    pos, inv, kc, vc, slots = _rope_inputs(6, hq, hkv, d, torch.float32, 5)
    with pytest.raises(ValueError, match="are not 4 [+] 2 x 2 heads"):
        few.few_rows_rope_store(x, w[:-2], None, pos, inv, kc, vc, slots, hq, hkv, SMALL[0])
    with pytest.raises(ValueError, match="whole blocks of 32 rotary pairs"):
        few.few_rows_rope_store(x, w[: 8 * 32], None, pos, inv[:16], kc[..., :32], vc[..., :32], slots, hq, hkv, SMALL[1])
    with pytest.raises(ValueError, match="must fit 6 rows"):
        few.few_rows_rope_store(x, w, None, pos[:5], inv, kc, vc, slots, hq, hkv, SMALL[0])
    with pytest.raises(ValueError, match="agree on K and N"):
        few.few_rows_rope_store(x, w, b[:8], pos, inv, kc, vc, slots, hq, hkv, SMALL[0])
    calls = []
    real = few.few_rows_rope_store
    monkeypatch.setattr(few, "few_rows_rope_store", lambda *a, **kw: calls.append(a[-1]) or real(*a, **kw))
    monkeypatch.setattr(few, "MIN_PROGRAMS", 2)
    # Taken; more rows than the cap; strided rows; a head dim of 32, whose halves hold no whole
    # block of the 64-row tiling's 32 pairs (the few-row projection, then rope_store).
    cases = [(x, w, 32, inv, kc, vc), (x, w, 4, inv, kc, vc), (x[:, ::2], w[:, :48], 32, inv, kc, vc),
             (x, w[: 8 * 32], 32, inv[:16], kc[..., :32], vc[..., :32])]
    for xs, ws, cap, inv_freq, k_cache, v_cache in cases:
        got_k, got_v = k_cache.clone(), v_cache.clone()
        got = few.linear_rope_store(xs, ws, None, pos, inv_freq, got_k, got_v, slots, hq, hkv, cap)
        d2 = ws.shape[0] // (hq + 2 * hkv)
        q, k, v = F.linear(xs, ws).split([hq * d2, hkv * d2, hkv * d2], dim=-1)
        want_k, want_v = k_cache.clone(), v_cache.clone()
        want = rope_store(q.view(6, hq, d2), k.view(6, hkv, d2), v.view(6, hkv, d2), pos, inv_freq, want_k, want_v, slots)
        for a, b_ in ((got, want), (got_k, want_k), (got_v, want_v)):
            _close(a.reshape(a.shape[0], -1), b_.reshape(b_.shape[0], -1), xs, ws)
    assert calls == [few.WIDE]


EPS = 1e-5


def _residual(t: int, n: int, dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A residual stream [t, n] and a norm weight [n] near 1."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(t, n, generator=g).to(DEV, dtype), (1 + 0.2 * torch.randn(n, generator=g)).to(DEV, dtype)


def _normed(h: torch.Tensor, norm_weight: torch.Tensor, blocks: int) -> few.NormedRows:
    """h's norm as a projection leaves it, its squares summed by torch in ``blocks`` blocks of columns."""
    squares = h.float().pow(2)
    sums = torch.stack([part.sum(-1) for part in squares.tensor_split(blocks, dim=1)])
    return few.NormedRows((h.float() * norm_weight.float()).to(h.dtype), sums, h, norm_weight, EPS)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tile", SMALL, ids=["narrow", "swapped"])
@pytest.mark.parametrize("t,n_in,n_out", [(1, 64, 32), (5, 96, 40), (16, 300, 130), (37, 64, 72)])
def test_add_norm_projection_is_add_rms_norm_of_the_projection(dtype, tile, t, n_in, n_out) -> None:
    x, w, b = _inputs(t, n_in, n_out, dtype, t + n_out)
    residual, norm_weight = _residual(t, n_out, dtype, t)
    for bias in (None, b):
        weighted, sums, h = few.few_rows_add_norm(x, w, bias, residual, norm_weight, tile)
        normed, want_h = add_rms_norm(few.few_rows_linear(x, w, bias, tile), residual, norm_weight, EPS)
        # The new residual is add_rms_norm's, bit for bit; its rows times the weight, rounded once.
        assert torch.equal(h, want_h)
        assert torch.equal(weighted, (h.float() * norm_weight.float()).to(dtype))
        assert sums.shape == (-(-n_out // tile.block_n), t) and sums.dtype == torch.float32
        torch.testing.assert_close(sums.sum(0), h.float().pow(2).sum(-1), rtol=1e-5, atol=0)
        assert torch.equal(few.NormedRows(weighted, sums, h, norm_weight, EPS).dense(), normed)
        _close(h, (linear_reference(x, w, bias).float() + residual.float()).to(dtype), x, w)


def _normed_close(got: torch.Tensor, h: torch.Tensor, norm_weight: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> None:
    """got within two rounding units of the folded reference, and within one rounding of each
    normed input (RMSNorm's own) of the projection of RMSNorm(h)."""
    normed = rms_norm_reference(h, norm_weight, EPS)
    _close(got, normed_linear_reference(h, norm_weight, EPS, w, b), normed, w)
    sums = (normed.float().abs() @ w.float().abs().T).max().item()
    unit = torch.finfo(got.dtype).eps
    tol = 2 * unit * sums + 2 * unit * max(1.0, got.float().abs().max().item())
    assert (got.float() - linear_reference(normed, w, b).float()).abs().max().item() <= tol


def _gated_close(gated: torch.Tensor, got: torch.Tensor) -> None:
    """The gated projection of normed rows against silu_mul of the plain one, ``got``. The two
    kernels may sum a row's squares or a tile's products in another order (compiled on the GPU;
    numpy's matrix product of another shape under the interpreter), so a projection may round one
    step the other way: each of gate and up within a unit, silu's slope below 1.1, then the two
    roundings of the product."""
    want = silu_mul(got)
    unit = torch.finfo(got.dtype).eps
    g, u = got.float().chunk(2, dim=-1)
    tol = unit * (2.1 * g.abs() * u.abs()).max().item() + 2 * unit * max(1.0, want.float().abs().max().item())
    assert (gated.float() - want.float()).abs().max().item() <= tol


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tile", SMALL, ids=["narrow", "swapped"])
@pytest.mark.parametrize("t,n_in,blocks", [(1, 64, 2), (5, 96, 3), (16, 300, 130), (37, 64, 64)])
def test_projections_of_normed_rows_finish_the_norm(dtype, tile, t, n_in, blocks) -> None:
    """The plain, gated and rotary projections of normed rows (squares summed in 2-130 blocks:
    one or three passes of the kernel's 64-block loop)."""
    hq, hkv, d = 2, 1, 64
    h, norm_weight = _residual(t, n_in, dtype, t + blocks)
    rows = _normed(h, norm_weight, blocks)
    _, w, b = _inputs(t, n_in, (hq + 2 * hkv) * d, dtype, t + n_in)
    bias = b if t % 2 else None  # a bias for odd row counts: every dtype and tile is run with and without
    norm = {"row_sums": rows.sums, "eps": EPS}
    got = few.few_rows_linear(rows.weighted, w, bias, tile, **norm)
    _normed_close(got, h, norm_weight, w, bias)
    _gated_close(few.few_rows_linear(rows.weighted, w, bias, tile, gated=True, **norm), got)
    positions, inv_freq, k_cache, v_cache, slots = _rope_inputs(t, hq, hkv, d, dtype, t)
    k_want, v_want = k_cache.clone(), v_cache.clone()
    q, k, v = got.split([hq * d, hkv * d, hkv * d], dim=-1)
    want = rope_store(q.view(t, hq, d), k.view(t, hkv, d), v.view(t, hkv, d), positions, inv_freq, k_want, v_want, slots)
    q = few.few_rows_rope_store(rows.weighted, w, bias, positions, inv_freq, k_cache, v_cache, slots, hq, hkv, tile, **norm)
    _same_rotation((q, k_cache, v_cache), (want, k_want, v_want))


def test_normed_rows_where_the_kernel_is_not_taken_and_bad_inputs(monkeypatch) -> None:
    monkeypatch.setattr(few, "MIN_PROGRAMS", 2)
    hq, hkv, d = 2, 1, 64
    x, w, b = _inputs(6, 96, 128, torch.float32, 6)
    residual, norm_weight = _residual(6, 128, torch.float32, 6)
    _, w2, b2 = _inputs(6, 128, (hq + 2 * hkv) * d, torch.float32, 7)
    normed, h = few.linear_add_norm(x, w, b, residual, norm_weight, EPS, max_rows=0)  # cuBLAS, then add_rms_norm
    want, want_h = add_rms_norm(F.linear(x, w, b), residual, norm_weight, EPS)
    assert torch.equal(normed, want) and torch.equal(h, want_h)
    rows, h = few.linear_add_norm(x, w, b, residual, norm_weight, EPS)
    assert isinstance(rows, few.NormedRows) and rows.residual is h
    _close(h, want_h, x, w)
    dense = rows.dense()
    # A projection that cannot take the kernel (a cap of 4 rows here) gets RMSNorm(h) itself.
    assert torch.equal(few.linear(rows, w2, b2, max_rows=4), F.linear(dense, w2, b2))
    assert torch.equal(few.linear_silu_mul(rows, w2, b2, max_rows=4), silu_mul(F.linear(dense, w2, b2)))
    pos, inv, kc, vc, slots = _rope_inputs(6, hq, hkv, d, torch.float32, 6)
    got_k, got_v, want_k, want_v = kc.clone(), vc.clone(), kc.clone(), vc.clone()
    q = few.linear_rope_store(rows, w2, b2, pos, inv, got_k, got_v, slots, hq, hkv, max_rows=4)
    qkv = F.linear(dense, w2, b2).split([hq * d, hkv * d, hkv * d], dim=-1)
    want_q = rope_store(*(part.reshape(6, -1, d) for part in qkv), pos, inv, want_k, want_v, slots)
    assert torch.equal(q, want_q) and torch.equal(got_k, want_k) and torch.equal(got_v, want_v)
    # Taken: each finishes the norm.
    _normed_close(few.linear(rows, w2, b2), h, norm_weight, w2, b2)
    _gated_close(few.linear_silu_mul(rows, w2, b2), few.linear(rows, w2, b2))
    with pytest.raises(ValueError, match="must fit"):
        few.few_rows_add_norm(x, w, b, residual[:, :64], norm_weight, SMALL[0])
    with pytest.raises(ValueError, match="must fit"):
        few.few_rows_add_norm(x, w, b, residual, norm_weight[:64], SMALL[0])
    with pytest.raises(ValueError, match="row_sums must be float32"):
        few.few_rows_linear(rows.weighted, w2, b2, SMALL[0], row_sums=rows.sums.double(), eps=EPS)
    with pytest.raises(ValueError, match="row_sums must be float32"):
        few.few_rows_linear(rows.weighted, w2, b2, SMALL[0], row_sums=rows.sums[:, :5], eps=EPS)


@pytest.mark.skipif(DEV != "cuda", reason="Llama-3-8B shapes in bfloat16 need the GPU")
@pytest.mark.parametrize("t", [1, 8, 17, 32, 64])
@pytest.mark.parametrize("n_out,n_in", [(6144, 4096), (4096, 4096), (4096, 14336), (28672, 4096)])
def test_llama_shapes_in_bfloat16(t: int, n_out: int, n_in: int) -> None:
    x, w, b = _inputs(t, n_in, n_out, torch.bfloat16, t)
    tile = few.tiling(n_out)
    assert tile is not None
    got = few.few_rows_linear(x, w, None, tile)
    _close(got, linear_reference(x, w), x, w)
    _close(got, F.linear(x, w), x, w)
    _close(few.few_rows_linear(x, w, b, tile), linear_reference(x, w, b), x, w)
    if n_out == 28672:  # gate and up
        assert torch.equal(few.few_rows_linear(x, w, None, tile, gated=True), silu_mul(got))
    if n_out == 6144 and t <= 32:  # q/k/v of 32 + 2 x 8 heads of 128
        positions, inv_freq, k_cache, v_cache, slots = _rope_inputs(t, 32, 8, 128, torch.bfloat16, t)
        k_want, v_want = k_cache.clone(), v_cache.clone()
        want = _unfused_rope_store(x, w, None, positions, inv_freq, k_want, v_want, slots, 32, 8, tile)
        got = few.few_rows_rope_store(x, w, None, positions, inv_freq, k_cache, v_cache, slots, 32, 8, tile)
        _same_rotation((got, k_cache, v_cache), (want, k_want, v_want))
    if n_in == 4096 and n_out == 4096:  # the attention output, whose residual add and norm the next projection finishes
        residual, norm_weight = _residual(t, n_out, torch.bfloat16, t)
        weighted, sums, h = few.few_rows_add_norm(x, w, None, residual, norm_weight, tile)
        assert torch.equal(h, add_rms_norm(got, residual, norm_weight, EPS)[1]) and sums.shape == (128, t)
        _, w2, _ = _inputs(t, n_out, 28672, torch.bfloat16, t + 1)
        rows = few.NormedRows(weighted, sums, h, norm_weight, EPS)
        _normed_close(few.few_rows_linear(weighted, w2, None, few.WIDE, row_sums=sums, eps=EPS), h, norm_weight, w2, None)
        _gated_close(few.linear_silu_mul(rows, w2, None, max_rows=64), few.linear(rows, w2, None, max_rows=64))


def test_a_dependent_launch_needs_a_gpu_that_has_it() -> None:
    x, w, _ = _inputs(4, 64, 32, torch.float32, 0)
    residual, norm_weight = _residual(4, 32, torch.float32, 0)
    if DEV == "cuda" and torch.cuda.get_device_capability()[0] >= 9:
        pytest.skip("this GPU launches kernels behind others")
    with pytest.raises(ValueError, match="dependent launch needs a CUDA GPU of compute capability 9.0"):
        few.few_rows_add_norm(x, w, None, residual, norm_weight, SMALL[0], dependent=True)


@pytest.mark.skipif(DEV != "cuda" or torch.cuda.get_device_capability()[0] < 9, reason="programmatic dependent launch needs Hopper on")
@pytest.mark.parametrize("t", [1, 8, 32])
def test_dependent_launches_in_a_graph_equal_plain_ones(t: int) -> None:
    # A layer's chain at Llama-3-8B shapes: the attention output with the residual add (behind
    # a plain kernel), q/k/v with rotary and the KV store behind it, then the next attention
    # output behind that; replayed from a CUDA graph with fresh inputs, bit for bit the plain
    # launches' outputs and cache writes.
    bf = torch.bfloat16
    _, w_o, _ = _inputs(t, 4096, 4096, bf, 1)
    _, w_qkv, _ = _inputs(t, 4096, 6144, bf, 2)
    residual, norm_weight = _residual(t, 4096, bf, 3)
    positions, inv_freq, k_cache, v_cache, slots = _rope_inputs(t, 32, 8, 128, bf, 4)
    x = torch.empty(t, 4096, dtype=bf, device=DEV)

    def layer(dependent: bool) -> tuple[torch.Tensor, ...]:
        y = x * 2  # a plain kernel before the chain
        weighted, sums, h = few.few_rows_add_norm(y, w_o, None, residual, norm_weight, few.NARROW, dependent=dependent)
        q = few.few_rows_rope_store(weighted, w_qkv, None, positions, inv_freq, k_cache, v_cache, slots, 32, 8, few.WIDE,
                                    row_sums=sums, eps=EPS, dependent=dependent)
        return (h, q) + few.few_rows_add_norm(q.reshape(t, 4096), w_o, None, h, norm_weight, few.NARROW, dependent=dependent)

    x.copy_(torch.randn(t, 4096, device=DEV).to(bf))
    layer(True)  # compiles outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = layer(True)
    for seed in range(3):
        x.copy_(torch.randn(t, 4096, generator=torch.Generator(device=DEV).manual_seed(seed), device=DEV).to(bf))
        graph.replay()
        got = [o.clone() for o in outs] + [k_cache.clone(), v_cache.clone()]
        want = list(layer(False)) + [k_cache, v_cache]
        for a, b in zip(got, want):
            assert torch.equal(a, b)
