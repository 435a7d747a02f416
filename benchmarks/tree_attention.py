"""Tree attention on one GPU: DeFT kernels against per-sequence decoding, SDPA, FlexAttention and FlashInfer.

    PYTHONPATH=. python3 benchmarks/tree_attention.py [--sweep] [--markdown PATH] [--backends LIST]
        [--workloads NAMES] [--flashinfer-cache DIR]

Per layer, Llama-3-8B heads (32 query heads, 8 KV heads, d=128, bf16), page size 16. Every
timing replays a CUDA graph of one call with the L2 cache flushed before each replay. The floor
is max(unique K/V + Q + O bytes / copy bandwidth, useful FLOPs / bf16 matmul rate), both rates
measured in this run. When FlashInfer is importable its batch decode and multi-level cascade
(FA2, FA3) run on the same pool (tree_flashinfer.py); its kernels are JIT-compiled on first use
into $FLASHINFER_WORKSPACE_BASE/.cache/flashinfer (--flashinfer-cache), in a warm-up before any
timing, so keep that folder between runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import torch
from rich.console import Console
from rich.table import Table

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tree_baselines import flex_tree, sdpa_gathered  # noqa: E402
from tree_flashinfer import FLASHINFER_BACKENDS, LABELS, WORKSPACE_BYTES, load_flashinfer, page_tree, paged_pool, runners  # noqa: E402
from tree_workloads import DTYPE, H_KV, H_Q, HEAD_DIM, PAGE_SIZE, WORKLOADS, Workload, make_plan, node_slot_arrays, unique_bytes_and_flops  # noqa: E402

from thoughttree.kernels import WorkConfig, deft_tree_attention, per_sequence_attention  # noqa: E402
from thoughttree.kernels.deft import deft_work, run_work  # noqa: E402

FLEX_BUDGET_S = 60.0  # stop compiling FlexAttention for new shapes after this much wall time
BACKENDS = ("sdpa", "flex") + FLASHINFER_BACKENDS  # optional columns; ours and per-sequence always run
FI_TOLERANCE = 2e-2  # max |Δ| to per-sequence attention above which a FlashInfer result is a failure
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


def median_ms(fn: Callable[[], object], reps: int = 7) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def plan_ms(w: Workload, node_slots: list) -> float:
    return median_ms(lambda: deft_work(make_plan(w, node_slots, "cuda"), H_Q, H_KV, HEAD_DIM))


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sweep", action="store_true", help="also time our kernel under a few work configs")
    ap.add_argument("--markdown", help="write the tables as Markdown to this path")
    ap.add_argument("--no-flex", action="store_true", help="skip FlexAttention (its compiles are slow)")
    ap.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated optional backends to run, from: " + ", ".join(BACKENDS) + " (ours and per-sequence always run)")
    ap.add_argument("--only-flashinfer", action="store_true", help="short run: ours, per-sequence and the FlashInfer backends only")
    ap.add_argument("--jit-only", action="store_true", help="build FlashInfer's kernels into its cache, then stop")
    ap.add_argument("--workloads", help="comma-separated workload names to run (default: all ten)")
    ap.add_argument("--flashinfer-cache", help="FlashInfer's JIT cache base (sets FLASHINFER_WORKSPACE_BASE; default: that variable, else $HOME)")
    args = ap.parse_args()
    chosen = [b.strip() for b in args.backends.split(",") if b.strip()]
    bad = [b for b in chosen if b not in BACKENDS]
    if bad:
        ap.error(f"unknown backend {bad[0]!r}; choose from {', '.join(BACKENDS)}")
    if args.only_flashinfer:
        chosen = [b for b in chosen if b in FLASHINFER_BACKENDS]
    if args.no_flex and "flex" in chosen:
        chosen.remove("flex")
    args.chosen = chosen
    names = [w.name for w in WORKLOADS]
    args.rows = WORKLOADS
    if args.workloads:
        want = [n.strip() for n in args.workloads.split(",") if n.strip()]
        missing = [n for n in want if n not in names]
        if missing:
            ap.error(f"unknown workload {missing[0]!r}; choose from {', '.join(names)}")
        args.rows = tuple(w for w in WORKLOADS if w.name in want)
    return args


def warm_flashinfer(fi, names: list[str], console: Console) -> None:  # noqa: ANN001
    """Build or load every FlashInfer kernel the rows use, on a small tree, before any timing.

    Each backend warms up in its own thread with its own workspace, so JIT builds of different
    modules overlap (FlashInfer serialises builds of one module with a file lock).
    """
    w = Workload("warm-up", (-1, 0, 0, 1), (40, 16, 5, 3), (2, 3, 1), (5, 2, 16))
    node_slots, num_pages = node_slot_arrays(w)
    plan = make_plan(w, node_slots, "cuda")
    tree = page_tree(plan, num_pages)
    k = torch.randn(num_pages, PAGE_SIZE, H_KV, HEAD_DIM, device="cuda", dtype=DTYPE)
    kf, vf = paged_pool(k, torch.randn_like(k), tree)
    q = torch.randn(plan.num_queries, H_Q, HEAD_DIM, device="cuda", dtype=DTYPE)[torch.as_tensor(tree.order, device="cuda")]
    console.print(f"FlashInfer: building or loading the kernels of {', '.join(names)} (a first build JIT-compiles for minutes)...")
    start = time.perf_counter()

    def warm(name: str) -> str:
        made = runners(fi, [name], tree, q, kf, vf, torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device="cuda"))[name]
        if isinstance(made, str):
            return made
        made[1]()
        torch.cuda.synchronize()
        return f"ready after {time.perf_counter() - start:.0f} s"

    with ThreadPoolExecutor(len(names)) as pool:
        for name, result in zip(names, pool.map(warm, names)):
            console.print(f"  {name}: {result}")


def time_flashinfer(fi, names, w, plan, num_pages, q, k, v, ref, timer, workspace) -> list[list[str]]:  # noqa: ANN001
    """Rows [workload, backend, µs, plan() ms, tables ms, copied tokens, max |Δ|] of each FlashInfer backend."""
    t = time.perf_counter()
    tree = page_tree(plan, num_pages)
    tables_ms = (time.perf_counter() - t) * 1e3
    order = torch.as_tensor(tree.order, device="cuda")
    qf = q[order].contiguous()
    kf, vf = paged_pool(k, v, tree)
    rows = []
    for name, made in runners(fi, names, tree, qf, kf, vf, workspace).items():
        if isinstance(made, str):
            rows.append([w.name, LABELS[name], made, "", f"{tables_ms:.2f}", str(tree.copied_tokens), ""])
            continue
        plan_fn, run = made
        try:
            us, graphed = timer(run)
            diff = (run().float() - ref[order].float()).abs().max().item()
            cell = f"{us:.1f}" + ("" if graphed else " (eager)")
            check = f"{diff:.1e}" + ("" if diff <= FI_TOLERANCE else " FAIL")
            plan_cell = f"{median_ms(plan_fn):.2f}"  # last: re-planning replaces the buffers a graph saw
        except Exception as e:  # noqa: BLE001 - report, keep benchmarking the rest
            cell, check, plan_cell = f"error: {type(e).__name__}: {str(e).strip()[:160]}", "", ""
        rows.append([w.name, LABELS[name], cell, plan_cell, f"{tables_ms:.2f}", str(tree.copied_tokens), check])
    return rows


def best_flashinfer(rows: list[list[str]]) -> str:
    ok = [(float(r[2].split()[0]), r[1]) for r in rows if r[6] and not r[6].endswith("FAIL")]
    return "%.1f %s" % min(ok) if ok else "no valid result"


def main() -> None:
    args = parse_args()
    if args.flashinfer_cache:
        os.environ["FLASHINFER_WORKSPACE_BASE"] = os.path.abspath(args.flashinfer_cache)
    console = Console(width=200)
    props = torch.cuda.get_device_properties(0)
    import triton

    console.print(f"device: {props.name}, {props.multi_processor_count} SMs; torch {torch.__version__}, triton {triton.__version__}")
    console.print("command: PYTHONPATH=. python3 " + " ".join(sys.argv))
    copy_bw, mm_rate = roofs()
    console.print(f"roofs measured now: copy {copy_bw / 1e12:.2f} TB/s, bf16 matmul {mm_rate / 1e12:.0f} TFLOP/s")
    fi_names = [b for b in args.chosen if b in FLASHINFER_BACKENDS]
    fi, fi_note = load_flashinfer() if fi_names else (None, "not run (--backends)")
    workspace = None
    if fi is not None:
        cache = os.environ.get("FLASHINFER_WORKSPACE_BASE", os.path.expanduser("~"))
        console.print(f"{fi_note}; JIT cache under {cache}/.cache/flashinfer")
        workspace = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device="cuda")
        warm_flashinfer(fi, fi_names, console)
    if args.jit_only:
        return
    compiled_flex = None
    if "flex" in args.chosen:
        from torch.nn.attention.flex_attention import flex_attention

        compiled_flex = torch.compile(flex_attention, dynamic=False)
    timer = Timer()
    flex_spent = 0.0
    cols = ["workload", "ours µs", "ours partial+merge µs", "per-seq µs", "SDPA µs", "Flex µs", "FlashInfer best µs", "plan ms", "unique TB/s", "floor µs", "% floor", "× per-seq", "targets", "max |Δ|"]
    fi_cols = ["workload", "FlashInfer backend", "µs", "plan() ms", "tables ms", "copied tokens", "max |Δ| to per-seq"]
    table = Table(title=f"tree attention per layer on {props.name} (bf16, 32/8 heads, d=128, page 16, L2 flushed)")
    for c in cols:
        table.add_column(c, justify="right" if c != "workload" else "left")
    rows, sweep_rows, fi_rows = [], [], []
    for w in args.rows:
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
        ref = per_sequence_attention(q, k, v, plan)
        diff = (deft_tree_attention(q, k, v, plan).float() - ref.float()).abs().max().item()
        if "sdpa" in args.chosen:
            sdpa = sdpa_gathered(q, k, v, plan)
            sdpa_cell = sdpa if isinstance(sdpa, str) else "%.1f%s" % (lambda r: (r[0], "" if r[1] else " (eager)"))(timer(sdpa))
        else:
            sdpa_cell = "skipped"
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
        fi_cell = fi_note
        if fi is not None:
            mine = time_flashinfer(fi, fi_names, w, plan, num_pages, q, k, v, ref, timer, workspace)
            fi_rows += mine
            fi_cell = best_flashinfer(mine)
        nbytes, flops = unique_bytes_and_flops(plan)
        floor = max(nbytes / copy_bw, flops / mm_rate) * 1e6
        frac, speed = floor / ours, seq / ours
        ok = frac >= 0.5 and (not w.star_16k or speed >= 3.0)
        target = "met" if ok else ("miss: %.0f%% of floor" % (100 * frac) if frac < 0.5 else "miss: %.1f× < 3×" % speed)
        row = [w.name, f"{ours:.1f}", f"{partial_only:.1f}+{ours - partial_only:.1f}", f"{seq:.1f}", sdpa_cell, flex_cell, fi_cell, f"{plan_ms(w, node_slots):.2f}",
               f"{nbytes / ours / 1e6:.2f}", f"{floor:.1f}", f"{100 * frac:.0f}%", f"{speed:.1f}×", target, f"{diff:.1e}"]
        table.add_row(*row)
        rows.append(row)
        if args.sweep:
            sweep_rows.append([w.name] + [f"{timer(lambda c=c: deft_tree_attention(q, k, v, plan, config=c))[0]:.1f}" for c in SWEEP])
        del k, v, q, plan, ref
        torch.cuda.empty_cache()
    console.print(table)
    if fi is not None:
        ft = Table(title=f"{fi_note} on the same pool (plan() and page tables timed apart, as ours)")
        for c in fi_cols:
            ft.add_column(c, justify="left" if c in fi_cols[:2] else "right")
        for r in fi_rows:
            ft.add_row(*r)
        console.print(ft)
    else:
        console.print(f"FlashInfer: {fi_note}, so not measured.")
    console.print("Flex is timed on the unique KV pre-gathered depth-first.")
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
            for header, body in ((cols, rows), (fi_cols, fi_rows)):
                if body:
                    f.write("| " + " | ".join(header) + " |\n|" + "---|" * len(header) + "\n")
                    f.writelines("| " + " | ".join(r) + " |\n" for r in body)
                    f.write("\n")
    failed = [r for r in fi_rows if r[6].endswith("FAIL") or r[2].startswith("error")]
    if failed:
        console.print(f"[red]{len(failed)} FlashInfer result(s) failed or differ from per-sequence attention by more than {FI_TOLERANCE}[/red]")
        sys.exit(1)


if __name__ == "__main__":
    main()
