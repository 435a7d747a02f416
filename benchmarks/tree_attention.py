"""Tree attention on one GPU: DeFT kernels against per-sequence decoding, SDPA, FlexAttention and FlashInfer.

    PYTHONPATH=. python3 benchmarks/tree_attention.py [--sweep] [--wide-sms LIST] [--rounds N] [--markdown PATH] [--backends LIST]
        [--only-flashinfer] [--trees ten|family|levels] [--workloads NAMES] [--flashinfer-cache DIR] [--jit-only] [--smoke]

Per layer, Llama-3-8B heads (32 query heads, 8 KV heads, d=128, bf16), page size 16. Every
timing replays a CUDA graph of one call with the L2 cache flushed before each replay. The floor
is max(unique K/V + Q + O bytes / copy bandwidth, useful FLOPs / bf16 matmul rate), both rates
measured in this run. When FlashInfer is importable its batch decode and multi-level cascade
(FA2, FA3) run on the same pool (tree_flashinfer_run.py), each checked against per-sequence
attention; its kernels are JIT-compiled on first use into $FLASHINFER_WORKSPACE_BASE/.cache/
flashinfer (--flashinfer-cache), in a warm-up before any timing, so keep that folder between runs.
--smoke runs rows 64x shorter on the CPU through the Triton interpreter (wall clock, no floor;
minutes per row: pick one with --workloads, and leave out --sweep, which adds a run per config).
--trees family runs prompt-and-leaves stars instead of the ten workloads, --trees levels
three-level trees (tree_workloads.py); --wide-sms times ours with the 128-row class sized for each
of those SM counts (WorkConfig.wide_sms; 0: the whole GPU); --rounds times those configs and the
default alternated, for A/B tables.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch
from rich.console import Console
from rich.table import Table

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
if not torch.cuda.is_available():  # the smoke run: Triton decides at decoration time, before the kernel imports
    os.environ.setdefault("TRITON_INTERPRET", "1")

from tree_baselines import flex_tree, sdpa_gathered  # noqa: E402
from tree_flashinfer_run import FLASHINFER_BACKENDS, TOLERANCE, WORKSPACE_BYTES, best, failed, load_flashinfer, time_rows, warm_up  # noqa: E402
from floor import measure_roofs  # noqa: E402
from tree_timing import Timer, config_label, host_probe, median_ms  # noqa: E402
from tree_workloads import DTYPE, H_KV, H_Q, HEAD_DIM, PAGE_SIZE, TREES, Workload, make_plan, node_slot_arrays, unique_bytes_and_flops  # noqa: E402

from thoughttree.kernels import WorkConfig, deft_tree_attention, per_sequence_attention  # noqa: E402
from thoughttree.kernels.deft import deft_work, run_work  # noqa: E402
from thoughttree.kernels.plan.workplan import WorkPlan  # noqa: E402

FLEX_BUDGET_S = 60.0  # stop compiling FlexAttention for new shapes after this much wall time
BACKENDS = ("sdpa", "flex") + FLASHINFER_BACKENDS  # optional columns; ours and per-sequence always run
PLAN_REPS = 51  # the plan column's median: the host's load moves it more than the kernels' columns
SMOKE_SCALE = 64  # --smoke divides every node length by this (at least one token)
WARM_UP = Workload("warm-up", (-1, 0, 0, 1), (40, 16, 5, 3), (2, 3, 1), (5, 2, 16))  # leaves at two depths
SWEEP = (
    WorkConfig(warp_specialized=False),  # the Triton tiles for the 64- and 128-row classes on Hopper too
    WorkConfig(side_by_side=False),  # tile classes launched one after another on one stream
    WorkConfig(early_merge=False),  # the merge launched after the partials end, not while they finish
    WorkConfig(waves=2.0),  # one chunk size for every class, two programs per SM (the sizing before rounds)
    WorkConfig(wide_tiles=(256, 8192)),  # 128-row tiles only from 256 query rows and 8192 keys
    WorkConfig(max_block_m=64),  # no 128-row tiles
    WorkConfig(fold_own=0),  # own keys as partial items instead of in the merge
    WorkConfig(fold_unshared=False),  # a node only one query sees gets partial items like the others
    WorkConfig(own_block=32),  # the merge reads own keys 32 per step even where 16 hold every range
    WorkConfig(merge_heads=1),  # one KV head per merge program whatever the query count
    WorkConfig(wide_sms=0),  # a 128-row launch sized for every SM even beside other launches
)
COLS = ["workload", "ours µs", "ours partial+merge µs", "per-seq µs", "SDPA µs", "Flex µs", "FlashInfer best µs", "plan ms", "unique TB/s", "floor µs", "% floor", "× per-seq", "targets", "max |Δ|"]
FI_COLS = ["workload", "FlashInfer backend", "µs", "plan() ms", "tables ms", "copied tokens", "max |Δ| to per-seq"]


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sweep", action="store_true", help="also time our kernel under a few work configs")
    ap.add_argument("--markdown", help="write the tables as Markdown to this path")
    ap.add_argument("--no-flex", action="store_true", help="skip FlexAttention (its compiles are slow)")
    ap.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated optional backends, from: " + ", ".join(BACKENDS) + " (ours and per-sequence always run)")
    ap.add_argument("--only-flashinfer", action="store_true", help="short run: ours, per-sequence and the FlashInfer backends only")
    ap.add_argument("--wide-sms", default="", help="comma-separated SM counts to size the 128-row class for where other launches share the call (0: all SMs)")
    ap.add_argument("--rounds", type=int, default=1, help="time the configs of --sweep and --wide-sms, with the default, this many times alternated (medians)")
    ap.add_argument("--trees", choices=sorted(TREES), default="ten", help="the ten workloads, the prompt-and-leaves family, or three-level trees")
    ap.add_argument("--workloads", help="comma-separated workload names (default: all of --trees)")
    ap.add_argument("--flashinfer-cache", help="FlashInfer's JIT cache base; sets FLASHINFER_WORKSPACE_BASE (default: that variable, else $HOME)")
    ap.add_argument("--jit-only", action="store_true", help="build FlashInfer's kernels into its cache, then stop")
    ap.add_argument("--smoke", action="store_true", help="CPU smoke run: rows 64x shorter, Triton interpreter, wall clock")
    args = ap.parse_args()
    chosen = [b.strip() for b in args.backends.split(",") if b.strip()]
    bad = [b for b in chosen if b not in BACKENDS]
    if bad:
        ap.error(f"unknown backend {bad[0]!r}; choose from {', '.join(BACKENDS)}")
    if args.only_flashinfer:
        chosen = [b for b in chosen if b in FLASHINFER_BACKENDS]
    if args.no_flex or args.smoke:
        chosen = [b for b in chosen if b != "flex"]
    args.chosen = chosen
    if args.rounds < 1:
        ap.error(f"--rounds must be at least 1, got {args.rounds}")
    try:
        args.wide = [WorkConfig(wide_sms=int(n)) for n in args.wide_sms.split(",") if n.strip()]
    except ValueError as e:
        ap.error(f"--wide-sms takes non-negative integers: {e}")
    trees = TREES[args.trees]
    names = [w.name for w in trees]
    want = [n.strip() for n in args.workloads.split(",") if n.strip()] if args.workloads else names
    missing = [n for n in want if n not in names]
    if missing:
        ap.error(f"unknown workload {missing[0]!r} in --trees {args.trees}; choose from {', '.join(names)}")
    args.rows = [w for w in trees if w.name in want]
    extra = (SWEEP if args.sweep else ()) + tuple(args.wide)
    args.configs = (WorkConfig(),) + extra if extra else ()
    if args.smoke:
        args.rows = [Workload(w.name, w.parents, tuple(max(1, n // SMOKE_SCALE) for n in w.lengths), w.query_nodes, w.query_visible) for w in args.rows]
    if not args.smoke and not torch.cuda.is_available():
        ap.error("no CUDA device: run on a GPU, or pass --smoke for the CPU interpreter smoke run")
    return args


def launches(work: WorkPlan) -> str:
    """A work plan's partial launches in launch order, as items per KV head @ query rows."""
    return " + ".join(f"{c.num_items}@{c.tile.block_m}" for c in work.classes) or "none"


def markdown(path: str, tables: list[tuple[list[str], list[list[str]]]]) -> None:
    with open(path, "w") as f:
        for header, body in tables:
            if body:
                f.write("| " + " | ".join(header) + " |\n|" + "---|" * len(header) + "\n")
                f.writelines("| " + " | ".join(r) + " |\n" for r in body)
                f.write("\n")


def main() -> int:
    args = parse_args()
    if args.flashinfer_cache:
        os.environ["FLASHINFER_WORKSPACE_BASE"] = os.path.abspath(args.flashinfer_cache)
    dev = torch.device("cpu" if args.smoke else "cuda")
    console = Console(width=200)
    import triton

    name = torch.cuda.get_device_properties(0).name if dev.type == "cuda" else "CPU (Triton interpreter)"
    console.print(f"device: {name}; torch {torch.__version__}, triton {triton.__version__}")
    console.print("command: PYTHONPATH=. python3 " + " ".join(sys.argv))
    rates = measure_roofs(dev)
    if rates:
        console.print(rates.describe())
    fi_names = [b for b in args.chosen if b in FLASHINFER_BACKENDS]
    fi, fi_note = load_flashinfer(dev) if fi_names else (None, "not run (--backends)")
    console.print(f"FlashInfer: {fi_note}")
    workspace = None
    if fi is not None:
        console.print(f"FlashInfer JIT cache: {os.environ.get('FLASHINFER_WORKSPACE_BASE', os.path.expanduser('~'))}/.cache/flashinfer")
        warm_slots, warm_pages = node_slot_arrays(WARM_UP)
        warm_up(fi, fi_names, make_plan(WARM_UP, warm_slots, dev), warm_pages, console.print)
        workspace = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=dev)
    if args.jit_only:
        return 0
    compiled_flex = None
    if "flex" in args.chosen:
        from torch.nn.attention.flex_attention import flex_attention

        compiled_flex = torch.compile(flex_attention, dynamic=False)
    timer = Timer(dev, reps=1 if args.smoke else 25)
    if rates:
        console.print(f"timer: an empty kernel reads {timer.empty_us():.1f} µs here; every column includes that fixed cost")
    flex_spent = 0.0
    table = Table(title=f"tree attention per layer on {name} (bf16, 32/8 heads, d=128, page 16" + (", L2 flushed)" if rates else ", smoke run: 64x shorter rows)"))
    for c in COLS:
        table.add_column(c, justify="right" if c != "workload" else "left")
    rows, sweep_rows, fi_rows, wrong = [], [], [], []
    for w in args.rows:
        node_slots, num_pages = node_slot_arrays(w)
        gen = torch.Generator(device=dev).manual_seed(0)
        k = torch.randn(num_pages, PAGE_SIZE, H_KV, HEAD_DIM, device=dev, dtype=DTYPE, generator=gen)
        v = torch.randn(num_pages, PAGE_SIZE, H_KV, HEAD_DIM, device=dev, dtype=DTYPE, generator=gen)
        q = torch.randn(len(w.query_nodes), H_Q, HEAD_DIM, device=dev, dtype=DTYPE, generator=gen)
        plan = make_plan(w, node_slots, dev)
        ours, _ = timer(lambda: deft_tree_attention(q, k, v, plan))
        work = deft_work(plan, H_Q, H_KV, HEAD_DIM)
        partial_only, _ = timer(lambda: run_work(q, k, v, work, None, merge=False))
        seq, _ = timer(lambda: per_sequence_attention(q, k, v, plan))
        ref = per_sequence_attention(q, k, v, plan)
        diff = (deft_tree_attention(q, k, v, plan).float() - ref.float()).abs().max().item()
        sdpa_cell = "skipped"
        if "sdpa" in args.chosen:
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
        fi_cell = fi_note
        if fi is not None:
            mine = time_rows(fi, fi_names, w.name, plan, num_pages, q, k, v, ref, timer, workspace)
            fi_rows += mine
            fi_cell = best(mine)
        plan_ms = median_ms(lambda: deft_work(make_plan(w, node_slots, dev), H_Q, H_KV, HEAD_DIM), dev, reps=PLAN_REPS)
        nbytes, flops = unique_bytes_and_flops(plan)
        speed = seq / ours
        if rates:
            floor = rates.floor_s(nbytes, flops) * 1e6
            frac = floor / ours
            ok = frac >= 0.5 and (not w.star_16k or speed >= 3.0)
            target = "met" if ok else ("miss: %.0f%% of floor" % (100 * frac) if frac < 0.5 else "miss: %.1f× < 3×" % speed)
            floor_cells = [f"{floor:.1f}", f"{100 * frac:.0f}%"]
        else:
            floor_cells, target = ["n/a", "n/a"], "n/a"
        row = [w.name, f"{ours:.1f}", f"{partial_only:.1f}+{ours - partial_only:.1f}", f"{seq:.1f}", sdpa_cell, flex_cell, fi_cell, f"{plan_ms:.2f}",
               f"{nbytes / ours / 1e6:.2f}", *floor_cells, f"{speed:.1f}×", target, f"{diff:.1e}"]
        table.add_row(*row)
        rows.append(row)
        if diff > TOLERANCE:
            wrong.append(f"{w.name}: {diff:.1e}")
        if args.configs:
            cells = [w.name, launches(work)]
            times: list[list[float]] = [[] for _ in args.configs]
            for _ in range(args.rounds):  # the configs alternated, so a drift of the GPU's clocks hits each alike
                for c, ts in zip(args.configs, times):
                    ts.append(timer(lambda c=c: deft_tree_attention(q, k, v, plan, config=c))[0])
            for c, ts in zip(args.configs, times):
                d = (deft_tree_attention(q, k, v, plan, config=c).float() - ref.float()).abs().max().item()
                cell = f"{statistics.median(ts):.1f}" + (f" ({launches(deft_work(plan, H_Q, H_KV, HEAD_DIM, c))})" if c.wide_sms is not None else "")
                cells.append(cell if d <= TOLERANCE else f"{cell} (max |Δ| {d:.1e})")
                if d > TOLERANCE:
                    wrong.append(f"{w.name} with {c}: {d:.1e}")
            sweep_rows.append(cells)
        del k, v, q, plan, ref
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    console.print(table)
    probe = host_probe(PLAN_REPS)
    console.print(f"host probe at the end (100 small numpy operations, as in tree_plan_time.py): {probe[0] * 1e6:.0f} µs median, "
                  f"{probe[1] * 1e6:.0f} fastest; the plan column moves with it")
    if fi_rows:
        ft = Table(title=f"{fi_note} on the same pool (plan() and page tables timed apart, as ours)")
        for c in FI_COLS:
            ft.add_column(c, justify="left" if c in FI_COLS[:2] else "right")
        for r in fi_rows:
            ft.add_row(*r)
        console.print(ft)
    console.print("Flex is timed on the unique KV pre-gathered depth-first.")
    if args.configs:
        st = Table(title=f"ours under other work configs (µs, medians of {args.rounds} alternated round(s), with the launches where the 128-row sizing is set; each checked against "
                         f"per-sequence attention, max |Δ| ≤ {TOLERANCE}); launches: items per KV head @ query rows, in launch order")
        st.add_column("workload")
        st.add_column("ours' launches")
        for c in args.configs:
            st.add_column(config_label(c), justify="right")
        for r in sweep_rows:
            st.add_row(*r)
        console.print(st)
    if args.markdown:
        markdown(args.markdown, [(COLS, rows), (FI_COLS, fi_rows), (["workload", "ours' launches", *map(config_label, args.configs)], sweep_rows)])
    bad = failed(fi_rows)
    if bad:
        console.print(f"[red]{len(bad)} FlashInfer result(s) failed or differ from per-sequence attention by more than {TOLERANCE}[/red]")
    if wrong:
        console.print(f"[red]ours differs from per-sequence attention by more than {TOLERANCE}: {'; '.join(wrong)}[/red]")
    return 1 if bad or wrong else 0


if __name__ == "__main__":
    sys.exit(main())
