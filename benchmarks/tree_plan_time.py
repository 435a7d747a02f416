"""Plan time per tree-attention workload: the numpy part and the upload, apart.

    PYTHONPATH=. python3 benchmarks/tree_plan_time.py [--device cuda] [--reps 200]

For each of the ten workloads of tree_attention.py: the median wall time of
``plan_tree_attention`` alone, of it plus the DeFT host work items (all numpy), and of the whole
step as the runtime pays it (plan, work items, upload of the metadata and workspaces, waited for).

Plan time is set by the host as much as by the code (GPU machines of one kind read up to 2x
apart), so the run also times a fixed host probe: 100 small numpy operations of the kind a plan
is made of (sorts, searches, gathers, cumulative sums, elementwise arithmetic on a few hundred
elements). The last column is the whole step in units of the probe, comparable across hosts.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
from rich.console import Console
from rich.table import Table

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tree_timing import host_probe, timed  # noqa: E402
from tree_workloads import H_KV, H_Q, HEAD_DIM, WORKLOADS, make_plan, node_slot_arrays  # noqa: E402

from thoughttree.kernels import WorkConfig  # noqa: E402
from thoughttree.kernels.plan.tree_work import tree_host_work, tree_work  # noqa: E402


def ms(times: tuple[float, float]) -> str:
    return " / ".join(f"{t * 1e3:.3f}" for t in times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--reps", type=int, default=200)
    args = ap.parse_args()
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        ap.error("no CUDA device here; pass --device cpu")
    cfg = WorkConfig(num_sms=torch.cuda.get_device_properties(dev).multi_processor_count if dev.type == "cuda" else 132)
    probe = host_probe(args.reps)
    table = Table(title=f"plan time per step on {args.device} (ms, median / fastest of {args.reps}); "
                        f"host probe {probe[0] * 1e6:.0f} / {probe[1] * 1e6:.0f} µs")
    for c in ("workload", "plan_tree_attention", "+ host work (numpy)", "+ upload (whole step)", "whole step ÷ probe"):
        table.add_column(c, justify="left" if c == "workload" else "right")
    for w in WORKLOADS:
        slots, _ = node_slot_arrays(w)
        plan_only = timed(lambda: make_plan(w, slots, dev), args.reps, dev)
        host = timed(lambda: tree_host_work(make_plan(w, slots, dev), H_Q, H_KV, HEAD_DIM, cfg), args.reps, dev)
        step = timed(lambda: tree_work(make_plan(w, slots, dev), H_Q, H_KV, HEAD_DIM, cfg), args.reps, dev)
        ratio = " / ".join(f"{t / p:.1f}" for t, p in zip(step, probe))
        table.add_row(w.name, ms(plan_only), ms(host), ms(step), ratio)
    Console(width=170).print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
