"""The Game of 24 results table: every method on the same puzzles with the same model.

    python benchmarks/game24_table.py [--model bundled] [--start 900 --end 1000] [--out runs/]

Runs each method with `thoughttree game24`'s code path, saves each run file under ``--out`` and
prints a Markdown table: success rate (the returned answer is correct), the average share of
correct samples for the sampling baselines, generated and prefilled tokens per puzzle, and time.
"""

from __future__ import annotations

import argparse
import platform
import shlex
import sys
from dataclasses import replace
from pathlib import Path

import torch

from thoughttree.commands.model import load_model
from thoughttree.commands.game24_run import Game24Run, run_game24

ROWS = (
    ("IO, best of 10 by the checker", dict(method="io", k=10)),
    ("IO, best of 100 by the checker", dict(method="io", k=100)),
    ("CoT, best of 10 by the checker", dict(method="cot", k=10)),
    ("CoT, best of 100 by the checker", dict(method="cot", k=100)),
    ("best-of-N CoT, N=100, by log-probability", dict(method="bon", k=100)),
    ("ToT BFS, b=1", dict(method="bfs", breadth=1)),
    ("ToT BFS, b=5", dict(method="bfs", breadth=5)),
    ("beam over thoughts, width 5", dict(method="beam", width=5)),
    ("DFS, value threshold 0.5", dict(method="dfs")),
    ("MCTS, 32 iterations", dict(method="mcts", iterations=32)),
)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="bundled")
    p.add_argument("--device")
    p.add_argument("--start", type=int, default=900)
    p.add_argument("--end", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("runs"))
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    lm = load_model(args.model, args.device, None)
    device = torch.cuda.get_device_name() if lm.device.type == "cuda" else f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"
    print(f"device: {device}, torch {torch.__version__}, model {args.model}, puzzles {args.start}..{args.end - 1}")
    print("command: python " + " ".join(shlex.quote(a) for a in sys.argv))
    print()
    print("| method | `thoughttree game24` options | success | mean sample accuracy | generated tokens / puzzle | prefilled tokens / puzzle | seconds |")
    print("|---|---|---|---|---|---|---|")
    base = Game24Run(start=args.start, end=args.end, seed=args.seed)
    for name, opts in ROWS:
        run = replace(base, **opts)
        result = run_game24(lm, run).run
        flags = " ".join(f"--{k} {v}" for k, v in opts.items())
        result.save(args.out / f"game24-{'-'.join(str(v) for v in opts.values())}.json")
        m, n = result.totals, result.totals["puzzles"]
        avg = f"{m['average_sample_accuracy']:.1%}" if "average_sample_accuracy" in m else "–"
        print(f"| {name} | `{flags}` | **{m['success_rate']:.0%}** | {avg} | {m['generated_tokens'] / n:,.0f} | "
              f"{m['prefill_tokens'] / n:,.0f} | {m['wall_time']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
