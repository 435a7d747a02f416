"""Plan time per tree-attention workload: the numpy part and the upload, apart.

    PYTHONPATH=. python3 benchmarks/tree_plan_time.py [--device cuda] [--reps 200]

For each of the ten workloads of tree_attention.py: the median wall time of
``plan_tree_attention`` alone, of it plus the DeFT host work items (all numpy), and of the whole
step as the runtime pays it (plan, work items, upload of the metadata and workspaces, waited for).
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

from tree_workloads import H_KV, H_Q, HEAD_DIM, WORKLOADS, make_plan, node_slot_arrays  # noqa: E402

from thoughttree.kernels import WorkConfig  # noqa: E402
from thoughttree.kernels.workplan import tree_host_work, tree_work  # noqa: E402


def median_ms(fn: Callable[[], object], reps: int, device: torch.device) -> str:
    """"median / fastest" of ``reps`` waited-for calls in ms (the fastest shows the cost without other load)."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return f"{statistics.median(times) * 1e3:.3f} / {min(times) * 1e3:.3f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--reps", type=int, default=200)
    args = ap.parse_args()
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        ap.error("no CUDA device here; pass --device cpu")
    cfg = WorkConfig(num_sms=torch.cuda.get_device_properties(dev).multi_processor_count if dev.type == "cuda" else 132)
    table = Table(title=f"plan time per step on {args.device} (ms, median / fastest of {args.reps})")
    for c in ("workload", "plan_tree_attention", "+ host work (numpy)", "+ upload (whole step)"):
        table.add_column(c, justify="left" if c == "workload" else "right")
    for w in WORKLOADS:
        slots, _ = node_slot_arrays(w)
        plan_only = median_ms(lambda: make_plan(w, slots, dev), args.reps, dev)
        host = median_ms(lambda: tree_host_work(make_plan(w, slots, dev), H_Q, H_KV, HEAD_DIM, cfg), args.reps, dev)
        step = median_ms(lambda: tree_work(make_plan(w, slots, dev), H_Q, H_KV, HEAD_DIM, cfg), args.reps, dev)
        table.add_row(w.name, plan_only, host, step)
    Console(width=150).print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
