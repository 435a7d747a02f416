"""Writing new keys and values into their slots of the paged KV cache."""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from .reference import store_kv_reference


@triton.jit
def _store_kv_kernel(
    K, V, KC, VC, SLOTS, page_size,
    stride_kt, stride_kh, stride_vt, stride_vh,
    stride_cp, stride_cs, stride_ch, stride_dp, stride_ds, stride_dh,
    H: tl.constexpr, H_PAD: tl.constexpr, D: tl.constexpr, D_PAD: tl.constexpr,
):
    t = tl.program_id(0)
    slot = tl.load(SLOTS + t).to(tl.int64)
    page = slot // page_size
    off = slot - page * page_size
    h = tl.arange(0, H_PAD)
    d = tl.arange(0, D_PAD)
    mask = (h < H)[:, None] & (d < D)[None, :]
    k = tl.load(K + t.to(tl.int64) * stride_kt + h[:, None] * stride_kh + d[None, :], mask=mask)
    v = tl.load(V + t.to(tl.int64) * stride_vt + h[:, None] * stride_vh + d[None, :], mask=mask)
    tl.store(KC + page * stride_cp + off * stride_cs + h[:, None] * stride_ch + d[None, :], k.to(KC.dtype.element_ty),
             mask=mask)
    tl.store(VC + page * stride_dp + off * stride_ds + h[:, None] * stride_dh + d[None, :], v.to(VC.dtype.element_ty),
             mask=mask)


def store_kv(k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             slots: torch.Tensor) -> None:
    """Write new keys and values into their cache slots, in place.

    Args:
        k_cache, v_cache: [num_pages, page_size, H_kv, D] paged caches.
        k, v: [T, H_kv, D] new keys and values (cast to the cache dtype).
        slots: [T] int64 slot ids (page * page_size + offset), distinct.
    CPU tensors use the PyTorch reference unless TRITON_INTERPRET=1 is set.
    """
    if k_cache.dim() != 4 or k_cache.shape != v_cache.shape:
        raise ValueError(f"k_cache, v_cache must both be [num_pages, page_size, H_kv, D]; got {tuple(k_cache.shape)}, "
                         f"{tuple(v_cache.shape)}")
    want = (slots.shape[0], k_cache.shape[2], k_cache.shape[3])
    if slots.dim() != 1 or tuple(k.shape) != want or tuple(v.shape) != want:
        raise ValueError(f"expected k, v {want} for {slots.shape[0]} slots; got k {tuple(k.shape)}, v "
                         f"{tuple(v.shape)}, slots {tuple(slots.shape)}")
    if slots.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"slots must be int64 (or int32), got {slots.dtype}")
    if len({t.device for t in (k_cache, v_cache, k, v, slots)}) != 1:
        raise ValueError("k_cache, v_cache, k, v and slots must be on one device")
    if slots.numel() == 0:
        return
    if k_cache.device.type == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        store_kv_reference(k_cache, v_cache, k, v, slots)
        return
    if any(t.stride(-1) != 1 for t in (k_cache, v_cache, k, v)):
        raise ValueError("the head dimension of every tensor must be contiguous (stride 1)")
    h, d = k_cache.shape[2], k_cache.shape[3]
    _store_kv_kernel[(slots.shape[0],)](
        k, v, k_cache, v_cache, slots, k_cache.shape[1],
        k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        H=h, H_PAD=triton.next_power_of_2(h), D=d, D_PAD=triton.next_power_of_2(d), num_warps=4,
    )
