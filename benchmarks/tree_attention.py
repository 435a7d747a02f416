"""Tree attention on one GPU: DeFT kernels against per-sequence decoding, SDPA and FlexAttention.

    PYTHONPATH=. python3 benchmarks/tree_attention.py [--sweep] [--markdown PATH]

Per layer, Llama-3-8B heads (32 query heads, 8 KV heads, d=128, bf16), page size 16. Every
timing replays a CUDA graph of one call with the L2 cache flushed before each replay. The floor
is max(unique K/V + Q + O bytes / copy bandwidth, useful FLOPs / bf16 matmul rate), both rates
measured in this run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Callable

import torch
from rich.console import Console
from rich.table import Table

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tree_baselines import flex_tree, sdpa_gathered  # noqa: E402
from tree_workloads import DTYPE, H_KV, H_Q, HEAD_DIM, PAGE_SIZE, WORKLOADS, make_plan, node_slot_arrays, unique_bytes_and_flops  # noqa: E402

from thoughttree.kernels import WorkConfig, deft_tree_attention, per_sequence_attention  # noqa: E402
from thoughttree.kernels.deft import deft_work, run_work  # noqa: E402

FLEX_BUDGET_S = 60.0  # stop compiling FlexAttention for new shapes after this much wall time
SWEEP = (
    WorkConfig(),
    WorkConfig(waves=1.0),
    WorkConfig(waves=4.0),
    WorkConfig(min_chunk=256),
    WorkConfig(merge_block=4),
    WorkConfig(tiles=((16, 64, 4, 5), (64, 64, 4, 5), (128, 64, 8, 5))),
    WorkConfig(tiles=((16, 64, 4, 1), (64, 64, 4, 1), (128, 64, 8, 1))),  # register prefetch
)


class Timer:
    """Median GPU time of a call: CUDA-graph replay after an L2 flush (eager if capture fails)."""

    def __init__(self, reps: int = 25) -> None:
        self.reps = reps
        self.flush = torch.empty(512 * 2**20, dtype=torch.uint8, device="cuda")

    def __call__(self, fn: Callable[[], object]) -> tuple[float, bool]:
        fn()
        torch.cuda.synchronize()
        run, graphed = fn, False
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                fn()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                fn()
            run, graphed = graph.replay, True
        except Exception:  # noqa: BLE001 - a baseline that cannot be captured is timed eagerly
            torch.cuda.synchronize()
        events = []
        for _ in range(self.reps):
            self.flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            events.append((start, end))
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in events) * 1e3, graphed


def roofs() -> tuple[float, float]:
    """(copy bandwidth bytes/s counting read + write, bf16 matmul FLOP/s), measured now."""
    def best(fn: Callable[[], object], reps: int = 10) -> float:
        fn()
        out = []
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b) * 1e-3)
        return min(out)

    src = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    copy = 2 * src.numel() / best(lambda: dst.copy_(src))
    del src, dst
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    mm = 2 * n**3 / best(lambda: a @ b)
    return copy, mm


def plan_ms(w, node_slots) -> float:  # noqa: ANN001
    times = []
    for _ in range(7):
        t = time.perf_counter()
        plan = make_plan(w, node_slots, "cuda")
        deft_work(plan, H_Q, H_KV, HEAD_DIM)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sweep", action="store_true", help="also time our kernel under a few work configs")
    ap.add_argument("--markdown", help="write the table as Markdown to this path")
    ap.add_argument("--no-flex", action="store_true", help="skip FlexAttention (its compiles are slow)")
    args = ap.parse_args()
    console = Console(width=200)
    props = torch.cuda.get_device_properties(0)
    import triton

    console.print(f"device: {props.name}, {props.multi_processor_count} SMs; torch {torch.__version__}, triton {triton.__version__}")
    console.print("command: PYTHONPATH=. python3 " + " ".join(sys.argv))
    copy_bw, mm_rate = roofs()
    console.print(f"roofs measured now: copy {copy_bw / 1e12:.2f} TB/s, bf16 matmul {mm_rate / 1e12:.0f} TFLOP/s")
    try:
        import flashinfer  # noqa: F401

        flashinfer_note = "installed but not wired in"
    except ImportError:
        flashinfer_note = "n/a: not installed"
    compiled_flex = None
    if not args.no_flex:
        from torch.nn.attention.flex_attention import flex_attention

        compiled_flex = torch.compile(flex_attention, dynamic=False)
    timer = Timer()
    flex_spent = 0.0
    cols = ["workload", "ours µs", "ours partial+merge µs", "per-seq µs", "SDPA µs", "Flex µs", "FlashInfer", "plan ms", "unique TB/s", "floor µs", "% floor", "× per-seq", "targets", "max |Δ|"]
    table = Table(title=f"tree attention per layer on {props.name} (bf16, 32/8 heads, d=128, page 16, L2 flushed)")
    for c in cols:
        table.add_column(c, justify="right" if c != "workload" else "left")
    rows, sweep_rows = [], []
    for w in WORKLOADS:
        node_slots, num_pages = node_slot_arrays(w)
        gen = torch.Generator(device="cuda").manual_seed(0)
        k = torch.randn(num_pages, PAGE_SIZE, H_KV, HEAD_DIM, device="cuda", dtype=DTYPE, generator=gen)
        v = torch.randn(num_pages, PAGE_SIZE, H_KV, HEAD_DIM, device="cuda", dtype=DTYPE, generator=gen)
        q = torch.randn(len(w.query_nodes), H_Q, HEAD_DIM, device="cuda", dtype=DTYPE, generator=gen)
        plan = make_plan(w, node_slots, "cuda")
        ours, _ = timer(lambda: deft_tree_attention(q, k, v, plan))
        work = deft_work(plan, H_Q, H_KV, HEAD_DIM)
        partial_only, _ = timer(lambda: run_work(q, k, v, work, None, merge=False))
        seq, _ = timer(lambda: per_sequence_attention(q, k, v, plan))
        diff = (deft_tree_attention(q, k, v, plan).float() - per_sequence_attention(q, k, v, plan).float()).abs().max().item()
        sdpa = sdpa_gathered(q, k, v, plan)
        sdpa_cell = sdpa if isinstance(sdpa, str) else "%.1f%s" % (lambda r: (r[0], "" if r[1] else " (eager)"))(timer(sdpa))
        if compiled_flex is None:
            flex_cell = "skipped"
        elif flex_spent > FLEX_BUDGET_S:
            flex_cell = "skipped: compile budget"
        else:
            t = time.perf_counter()
            try:
                us, graphed = timer(flex_tree(q, k, v, plan, compiled_flex))
                flex_cell = f"{us:.1f}" + ("" if graphed else " (eager)")
            except Exception as e:  # noqa: BLE001 - report, keep benchmarking the rest
                flex_cell = f"error: {type(e).__name__}"
                console.print(f"Flex on {w.name}: {type(e).__name__}: {str(e).strip().splitlines()[-1][:300]}")
            flex_spent += time.perf_counter() - t
        nbytes, flops = unique_bytes_and_flops(plan)
        floor = max(nbytes / copy_bw, flops / mm_rate) * 1e6
        frac, speed = floor / ours, seq / ours
        ok = frac >= 0.5 and (not w.star_16k or speed >= 3.0)
        target = "met" if ok else ("miss: %.0f%% of floor" % (100 * frac) if frac < 0.5 else "miss: %.1f× < 3×" % speed)
        row = [w.name, f"{ours:.1f}", f"{partial_only:.1f}+{ours - partial_only:.1f}", f"{seq:.1f}", sdpa_cell, flex_cell, flashinfer_note, f"{plan_ms(w, node_slots):.2f}",
               f"{nbytes / ours / 1e6:.2f}", f"{floor:.1f}", f"{100 * frac:.0f}%", f"{speed:.1f}×", target, f"{diff:.1e}"]
        table.add_row(*row)
        rows.append(row)
        if args.sweep:
            sweep_rows.append([w.name] + [f"{timer(lambda c=c: deft_tree_attention(q, k, v, plan, config=c))[0]:.1f}" for c in SWEEP])
        del k, v, q, plan
        torch.cuda.empty_cache()
    console.print(table)
    console.print(f"FlashInfer: {flashinfer_note} on this machine (no network), so not measured. Flex is timed on the unique KV pre-gathered depth-first.")
    if args.sweep:
        st = Table(title="ours under other work configs (µs)")
        st.add_column("workload")
        for c in SWEEP:
            name = ", ".join(f"{f}={getattr(c, f)}" for f in ("waves", "min_chunk", "merge_block", "tiles") if getattr(c, f) != getattr(WorkConfig(), f))
            st.add_column(name or "default", justify="right")
        for r in sweep_rows:
            st.add_row(*r)
        console.print(st)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n")
            for r in rows:
                f.write("| " + " | ".join(r) + " |\n")


if __name__ == "__main__":
    main()
