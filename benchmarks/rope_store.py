"""The rotary + KV store kernel alone, by heads per program, against the eager PyTorch reference.

    PYTHONPATH=. python3 benchmarks/rope_store.py [--rows 1,8,16,64,256] [--heads 1,4,8]

Llama-3-8B heads (32 query, 8 KV, d=128, bf16), a KV pool of 16-token pages, each row's slot in
a shuffled page. One call per CUDA-graph replay with the L2 cache flushed before each (median of
50). Each column fixes the kernel's heads per program (``fused.rope_heads``); "shipped" is the
runtime's own choice for that row count. max |Δ| is each output's largest difference from
``reference.rope_store_reference`` (rotated q and the written K cache; V is copied and must be
equal). Exits non-zero when any result is further than two bf16 units from the reference.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
from rich.console import Console
from rich.table import Table

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tree_timing import Timer  # noqa: E402
from tree_workloads import H_KV, H_Q, HEAD_DIM, PAGE_SIZE  # noqa: E402

from thoughttree.kernels import fused, reference  # noqa: E402

DTYPE = torch.bfloat16
POOL_PAGES = 4096


def inputs(rows: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """(q, k, v views of one fused QKV output, positions, inv_freq, k_cache, v_cache, slots)."""
    g = torch.Generator(device=device).manual_seed(rows)
    qkv = torch.randn(rows, (H_Q + 2 * H_KV) * HEAD_DIM, device=device, dtype=DTYPE, generator=g)
    q, k, v = (x.view(rows, -1, HEAD_DIM) for x in qkv.split([H_Q * HEAD_DIM, H_KV * HEAD_DIM, H_KV * HEAD_DIM], dim=-1))
    positions = torch.randint(0, 32768, (rows,), device=device, generator=g)
    inv_freq = 1.0 / 500000.0 ** (torch.arange(0, HEAD_DIM, 2, device=device).float() / HEAD_DIM)
    caches = [torch.zeros(POOL_PAGES, PAGE_SIZE, H_KV, HEAD_DIM, device=device, dtype=DTYPE) for _ in range(2)]
    slots = torch.randperm(POOL_PAGES * PAGE_SIZE, device=device, generator=g)[:rows]
    return q, k, v, positions, inv_freq, caches[0], caches[1], slots


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", default="1,8,16,64,256")
    ap.add_argument("--heads", default="1,4,8")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        ap.error("this benchmark times CUDA kernels; run it on a GPU machine")
    dev = torch.device("cuda")
    import triton

    console = Console(width=160)
    console.print(f"device: {torch.cuda.get_device_properties(0).name}; torch {torch.__version__}, triton {triton.__version__}")
    console.print("command: PYTHONPATH=. python3 " + " ".join(sys.argv))
    heads = [int(h) for h in args.heads.split(",")]
    timer = Timer(dev, reps=50)
    shipped = fused.rope_heads
    table = Table(title="rotary + KV store per call (µs, L2 flushed); max |Δ| to the reference: q / K cache")
    for c in ["rows", *(f"{h} heads" for h in heads), "shipped (heads)", "max |Δ|"]:
        table.add_column(c, justify="right")
    wrong = []
    for rows in (int(r) for r in args.rows.split(",")):
        q, k, v, pos, inv, kc, vc, slots = inputs(rows, dev)
        want_kc, want_vc = kc.clone(), vc.clone()
        want = reference.rope_store_reference(q, k, v, pos, inv, want_kc, want_vc, slots)
        tol = 2 * torch.finfo(DTYPE).eps * max(1.0, want.float().abs().max().item(), want_kc.float().abs().max().item())
        cells, diffs = [str(rows)], []
        for h in [*heads, shipped(rows)]:
            fused.rope_heads = lambda _rows, h=h: h
            try:
                us, _ = timer(lambda: fused.rope_store(q, k, v, pos, inv, kc, vc, slots))
                got = fused.rope_store(q, k, v, pos, inv, kc, vc, slots)
            finally:
                fused.rope_heads = shipped
            dq = (got.float() - want.float()).abs().max().item()
            dk = (kc.float() - want_kc.float()).abs().max().item()
            diffs.append(f"{dq:.1e}/{dk:.1e}")
            if max(dq, dk) > tol or not torch.equal(vc, want_vc):
                wrong.append(f"{rows} rows, {h} heads: q {dq:.1e}, K {dk:.1e}, V equal {torch.equal(vc, want_vc)}")
            cells.append(f"{us:.1f}")
        cells[-1] += f" ({shipped(rows)})"
        table.add_row(*cells, "  ".join(sorted(set(diffs))))
    console.print(table)
    if wrong:
        console.print(f"[red]further from the reference than two bf16 units: {'; '.join(wrong)}[/red]")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
