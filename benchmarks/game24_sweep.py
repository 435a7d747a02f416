"""Choose the Game of 24 search defaults on the validation range, then run the test range once per choice.

    python benchmarks/game24_sweep.py [--model bundled] [--methods bfs,mcts,beam] [--out runs/sweep]
        [--validation validation] [--test test] [--limit N] [--png docs/game24-curves.png]

For each method a small grid of settings (proposal counts, look-ahead samples, MCTS rule,
constants and widening, distinct thoughts on or off; ``--grid full`` adds more) runs on the
validation puzzles only.
The best setting of each method is the one with the highest validation success among those that
generate at most ``--max-tokens`` per puzzle on validation, fewer tokens breaking ties. BFS goes first; MCTS and beam then run with a token budget equal
to the chosen BFS setting's validation tokens per puzzle (``--no-equal-budget`` leaves them
unbudgeted), restarting searches that end unsolved, so that the methods are compared at equal
generated tokens. Every run of the sweep is recorded in ``OUT/sweep.json`` (settings, success,
tokens, seconds) with the chosen settings; then each chosen setting runs once on the test range,
IO and CoT best-of-k pools large enough to cover the largest budget run as well, and the test
results, the commands that reproduce them and the success-against-tokens curves are printed
(and written as a PNG with ``--png`` when matplotlib is installed).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import shlex
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from rich.console import Console

from thoughttree.search.game24_methods import Game24Run, run_game24
from thoughttree.commands.model import load_model
from thoughttree.tasks.game24.compare import tokens_per_sample
from thoughttree.tasks.game24.curve_view import markdown, plot, table
from thoughttree.tasks.game24.curves import budgets, run_curves
from thoughttree.tasks.game24.ranges import puzzle_range

GRID: dict[str, list[dict[str, Any]]] = {
    "bfs": [
        dict(samples=30, distinct=False),
        dict(samples=20, distinct=True),
        dict(samples=22, distinct=True),
        dict(samples=23, distinct=True),
        dict(samples=25, distinct=True),
    ],
    "mcts": [
        dict(iterations=32, samples=10, distinct=False),
        dict(iterations=32, samples=10, distinct=True, rule="puct"),
        dict(iterations=32, samples=20, distinct=True, rule="puct"),
    ],
    "beam": [
        dict(width=5, samples=10, distinct=False),
        dict(width=5, samples=10, distinct=True),
        dict(width=5, samples=20, distinct=True),
    ],
}
FULL: dict[str, list[dict[str, Any]]] = {
    "bfs": [
        dict(samples=30, distinct=True),
        dict(samples=20, distinct=True, evaluations=30),
        dict(samples=20, distinct=True, breadth=6),
        dict(samples=20, distinct=True, temperature=1.3),
    ],
    "mcts": [
        dict(iterations=48, samples=10, distinct=True, rule="puct", widening=0.5),
        dict(iterations=48, samples=10, distinct=True, rule="puct", c=2.0),
    ],
    "beam": [dict(width=8, samples=10, distinct=True)],
}
# Generated tokens per puzzle that a chosen setting may spend: BFS b=5's before distinct proposals
# (30 sampled proposals per state, 14,779 on the test puzzles), which the defaults must not exceed.
MAX_TOKENS = 14_779
FLAGS = {"max_tokens_per_problem": "token-budget"}


def command(run: Game24Run, spec: str, opts: dict[str, Any], model: str) -> str:
    """The `thoughttree game24` command that runs ``run`` (puzzles named by the range they came from)."""
    parts = ["thoughttree game24", f"--model {shlex.quote(model)}", f"--method {run.method}"]
    for key, value in opts.items():
        flag = FLAGS.get(key, key.replace("_", "-"))
        if isinstance(value, bool):
            parts.append(f"--{flag}" if value else f"--no-{flag}")
        else:
            parts.append(f"--{flag} {value}")
    indices = run.indices
    if indices == tuple(range(indices[0], indices[-1] + 1)):
        parts.append(f"--start {indices[0]} --end {indices[-1] + 1}")
    else:
        parts.append(f"(puzzles of the {spec} range: {len(indices)} indices)")
    return " ".join(parts)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="bundled")
    p.add_argument("--device")
    p.add_argument("--methods", default="bfs,mcts,beam", help="methods to sweep, BFS first (default bfs,mcts,beam)")
    p.add_argument("--validation", default="validation", help="range the settings are chosen on (default validation)")
    p.add_argument("--test", default="test", help="range each chosen setting runs once on (default test)")
    p.add_argument("--limit", type=int, help="only the first LIMIT puzzles of each range (a quick check)")
    p.add_argument("--validation-limit", type=int, help="only the first N validation puzzles (a shorter sweep)")
    p.add_argument(
        "--grid",
        choices=("small", "full"),
        default="small",
        help="small: the settings above; full: adds more look-ahead, breadth and temperature for BFS, widening "
        "and a larger c for MCTS, a wider beam",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-equal-budget", dest="equal_budget", action="store_false")
    p.add_argument(
        "--max-tokens",
        type=int,
        default=MAX_TOKENS,
        help=f"generated tokens per validation puzzle a chosen setting may spend (default {MAX_TOKENS:,})",
    )
    p.add_argument("--out", type=Path, default=Path("runs/sweep"))
    p.add_argument("--png", type=Path, help="write the test curves here (needs matplotlib)")
    args = p.parse_args()
    methods = [m for m in args.methods.split(",") if m]
    unknown = [m for m in methods if m not in GRID]
    if unknown:
        p.error(f"no grid for {', '.join(unknown)}; choose from {', '.join(GRID)}")
    val = puzzle_range(args.validation, args.validation_limit or args.limit)
    test = puzzle_range(args.test, args.limit)
    grid = {m: GRID[m] + (FULL.get(m, []) if args.grid == "full" else []) for m in GRID}
    if set(val) & set(test):
        p.error(f"the validation range {args.validation} overlaps the test range {args.test}")
    args.out.mkdir(parents=True, exist_ok=True)
    lm = load_model(args.model, args.device, None)
    device = torch.cuda.get_device_name() if lm.device.type == "cuda" else f"CPU ({platform.machine()})"
    record: dict[str, Any] = {
        "model": args.model,
        "device": device,
        "seed": args.seed,
        "validation": list(val),
        "test": list(test),
        "command": "python " + " ".join(map(shlex.quote, sys.argv)),
        "sweep": [],
        "chosen": {},
        "test_runs": [],
    }
    save = lambda: (args.out / "sweep.json").write_text(json.dumps(record, indent=1))  # noqa: E731
    budget: int | None = None
    for method in methods:
        rows = []
        for opts in grid[method]:
            opts = dict(opts)
            if method != "bfs" and budget is not None and args.equal_budget:
                opts["max_tokens_per_problem"] = budget
            run = Game24Run(method=method, indices=val, seed=args.seed, **opts)
            t0 = time.perf_counter()
            totals = run_game24(lm, run).run.totals
            row = {
                "method": method,
                "options": opts,
                "success": totals["success_rate"],
                "tokens_per_puzzle": totals["generated_tokens"] / max(1, totals["puzzles"]),
                "seconds": time.perf_counter() - t0,
            }
            rows.append(row)
            record["sweep"].append(row)
            save()
            print(
                f"validation {method} {opts}: {row['success']:.0%}, {row['tokens_per_puzzle']:,.0f} tokens/puzzle, "
                f"{row['seconds']:.0f} s",
                file=sys.stderr,
                flush=True,
            )
        within = [r for r in rows if r["tokens_per_puzzle"] <= args.max_tokens]
        if not within:
            print(
                f"no {method} setting spends at most {args.max_tokens:,} tokens per puzzle; the cheapest is chosen",
                file=sys.stderr,
            )
        best = (
            max(within, key=lambda r: (r["success"], -r["tokens_per_puzzle"]))
            if within
            else min(rows, key=lambda r: r["tokens_per_puzzle"])
        )
        record["chosen"][method] = best["options"]
        if method == "bfs":
            budget = math.ceil(best["tokens_per_puzzle"])
        save()
    done = []
    for method, opts in record["chosen"].items():
        run = Game24Run(method=method, indices=test, seed=args.seed, **opts)
        result = run_game24(lm, run).run
        result.save(args.out / f"test-{method}.json")
        t = result.totals
        record["test_runs"].append(
            {
                "method": method,
                "options": opts,
                "success": t["success_rate"],
                "tokens_per_puzzle": t["generated_tokens"] / max(1, t["puzzles"]),
                "command": command(run, args.test, opts, args.model),
                "run": asdict(run),
            }
        )
        done.append((f"{method} " + " ".join(f"{k}={v}" for k, v in opts.items()), method, result.problems))
        save()
    most = max((r["tokens_per_puzzle"] for r in record["test_runs"]), default=1000.0)
    for method in ("io", "cot"):  # pools for best-of-k at every budget up to the largest search's
        probe = run_game24(lm, Game24Run(method=method, k=4, indices=test[:10], seed=args.seed)).run.problems
        k = max(1, math.ceil(1.2 * most / tokens_per_sample(probe)))
        pool = run_game24(lm, Game24Run(method=method, k=k, indices=test, seed=args.seed)).run
        pool.save(args.out / f"test-{method}-pool.json")
        done.append((method, method, pool.problems))
    print(f"device: {device}; validation {args.validation} ({len(val)} puzzles), test {args.test} ({len(test)})")
    print("| method | chosen on validation | validation | test | generated tokens / puzzle (test) | command |")
    print("|---|---|---|---|---|---|")
    for r in record["test_runs"]:
        v = max(
            (x for x in record["sweep"] if x["method"] == r["method"] and x["options"] == r["options"]),
            key=lambda x: x["success"],
        )
        print(
            f"| {r['method']} | `{r['options']}` | {v['success']:.0%} | **{r['success']:.0%}** | "
            f"{r['tokens_per_puzzle']:,.0f} | `{r['command']}` |"
        )
    spaced = budgets(max(2 * most, 200.0))
    curves = [c for name, method, entries in done for c in run_curves(name, entries, method, spaced)]
    Console().print(table(curves))
    print(markdown(curves))
    record["curves"] = [asdict(c) for c in curves]
    save()
    if args.png:
        try:
            plot(curves, args.png, f"Game of 24, {args.test} puzzles")
            print(f"wrote {args.png}")
        except RuntimeError as exc:
            print(exc, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
