"""The Game of 24 results table: every method on the same puzzles with the same model.

    python benchmarks/game24_table.py [--model bundled] [--start 900 --end 1000] [--out runs/]

Runs each method with `thoughttree game24`'s code path, saves each run file under ``--out`` and
prints a Markdown table: success rate (the returned answer is correct), the average share of
correct samples for the sampling baselines, generated and prefilled tokens per puzzle, time,
and for each search the baselines at equal generated tokens: IO best-of-k with k chosen so that
IO generates as many tokens per puzzle as the search, picked by the exact checker (an oracle)
and by the model's own log-probability, and CoT best-of-k picked by the checker. Those are read
off one IO and one CoT run with enough samples (see ``thoughttree.tasks.game24.compare``).

The model directory's ``training.json`` says how its training data was split; a model without
one is the earlier model trained on the loose split, and the table says so.

``--range validation`` (or ``test``, or ``800-899``) runs a named range instead of
``--start/--end``; ``--token-budget`` gives every search that many generated tokens per puzzle
(restarting a search that ends unsolved), ``--distinct`` samples distinct thoughts, and
``--png`` adds the curves of success against generated tokens per puzzle for every row (a table
in the terminal and the PNG; see ``benchmarks/game24_curves.py``).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import shlex
import sys
from pathlib import Path
from typing import Any

import torch
from rich.console import Console

from thoughttree.commands.model import load_model
from thoughttree.tasks.game24.curve_view import markdown, plot, table
from thoughttree.tasks.game24.curves import budgets, run_curves
from thoughttree.tasks.game24.ranges import puzzle_range
from thoughttree.tasks.game24.compare import best_of, matching_k, pool_size, tokens_per_sample
from thoughttree.search.game24_methods import Game24Run, run_game24

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
    ("MCTS with the model's priors (PUCT), 32 iterations", dict(method="mcts", iterations=32, rule="puct")),
)
SEARCHES = ("bfs", "dfs", "beam", "mcts")
LOOSE = ("earlier model, loose split: only the test puzzles' starting states held out, "
         "so its search numbers overstate generalisation")


def split_label(model_path: str) -> str:
    """How the model's training data was split, from its ``training.json``."""
    info = Path(model_path) / "training.json"
    if not info.is_file():
        return LOOSE
    return str(json.loads(info.read_text()).get("split", LOOSE))


def equal_token_cell(tokens: float, io: list[dict[str, Any]], cot: list[dict[str, Any]]) -> str:
    k_io, k_cot = matching_k(tokens, tokens_per_sample(io)), matching_k(tokens, tokens_per_sample(cot))
    a = best_of(io, min(k_io, pool_size(io)))
    c = best_of(cot, min(k_cot, pool_size(cot)))
    return (f"IO k={a.k}: {a.oracle:.0%} checker, {a.by_logprob:.0%} log-prob; "
            f"CoT k={c.k}: {c.oracle:.0%} checker")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="bundled")
    p.add_argument("--device")
    p.add_argument("--start", type=int, default=900)
    p.add_argument("--end", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("runs"))
    p.add_argument("--range", dest="puzzle_range", help="validation, test or A-B (inclusive): replaces --start/--end")
    p.add_argument("--limit", type=int, help="only the first LIMIT puzzles of --range")
    p.add_argument("--token-budget", type=int, help="generated tokens per puzzle for every search (restarts)")
    p.add_argument("--distinct", action=argparse.BooleanOptionalAction, default=None,
                   help="sample distinct thoughts and answers in every row, or none with --no-distinct (default: "
                        "each method's own default, distinct thoughts for bfs, beam and mcts)")
    p.add_argument("--png", type=Path, help="also write the success-vs-tokens curves of every row here")
    p.add_argument("--methods", default=None,
                   help="comma-separated methods to run (io, cot, bon, bfs, dfs, beam, mcts); default all rows")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    lm = load_model(args.model, args.device, None)
    device = torch.cuda.get_device_name() if lm.device.type == "cuda" else f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"
    print(f"device: {device}, torch {torch.__version__}, model {args.model}, puzzles {args.start}..{args.end - 1}")
    print(f"model training split: {split_label(str(getattr(lm, 'path', args.model)))}")
    print("command: python " + " ".join(shlex.quote(a) for a in sys.argv))
    print()
    wanted = set(args.methods.split(",")) if args.methods else None

    extra: dict[str, Any] = {}
    if args.puzzle_range:
        extra["indices"] = puzzle_range(args.puzzle_range, args.limit)
    if args.distinct is not None:
        extra["distinct"] = args.distinct

    def row(**opts: Any) -> Game24Run:  # as `thoughttree game24` builds it: defaults follow the row's method
        search = opts["method"] in SEARCHES
        budget = {"max_tokens_per_problem": args.token_budget} if args.token_budget and search else {}
        return Game24Run(start=args.start, end=args.end, seed=args.seed, **extra, **budget, **opts)

    done: list[tuple[str, dict[str, Any], dict[str, Any], list[dict[str, Any]]]] = []
    for name, opts in ROWS:
        if wanted is not None and opts["method"] not in wanted | {"io", "cot"}:
            continue
        result = run_game24(lm, row(**opts)).run
        result.save(args.out / f"game24-{'-'.join(str(v) for v in opts.values())}.json")
        done.append((name, opts, result.totals, result.problems))
        print(f"{name}: {result.totals['success_rate']:.0%}", file=sys.stderr, flush=True)
    pools = {m: max((r for r in done if r[1]["method"] == m), key=lambda r: r[1]["k"])[3] for m in ("io", "cot")}
    need = max((r[2]["generated_tokens"] / r[2]["puzzles"] for r in done if r[1]["method"] in SEARCHES), default=0)
    for method in ("io", "cot"):
        k = math.ceil(1.1 * need / tokens_per_sample(pools[method])) if need else 0
        if k > pool_size(pools[method]):
            pool = run_game24(lm, row(method=method, k=k)).run
            pool.save(args.out / f"game24-{method}-pool-{k}.json")
            pools[method] = pool.problems
    print("| method | `thoughttree game24` options | success | mean sample accuracy | generated tokens / puzzle "
          "| prefilled tokens / puzzle | seconds | baselines at equal generated tokens |")
    print("|---|---|---|---|---|---|---|---|")
    for name, opts, m, _ in done:
        n = m["puzzles"]
        shown = dict(opts)
        if opts["method"] in SEARCHES:  # the defaults a search row depends on, spelled out
            run = row(**opts)
            shown.update(samples=run.samples, value=run.value)
        flags = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in shown.items())
        avg = f"{m['average_sample_accuracy']:.1%}" if "average_sample_accuracy" in m else "–"
        tokens = m["generated_tokens"] / n
        equal = equal_token_cell(tokens, pools["io"], pools["cot"]) if opts["method"] in SEARCHES else "–"
        print(f"| {name} | `{flags}` | **{m['success_rate']:.0%}** | {avg} | {tokens:,.0f} | "
              f"{m['prefill_tokens'] / n:,.0f} | {m['wall_time']:.0f} | {equal} |", flush=True)
    if args.png:
        largest = max(max(r[2]["generated_tokens"] / r[2]["puzzles"] for r in done), need)
        grid = budgets(max(2 * largest, 200.0))
        curves = [c for name, opts, _, entries in done if opts["method"] in (*SEARCHES, "bon")
                  for c in run_curves(name, entries, opts["method"], grid)]
        curves += [c for m in ("io", "cot") for c in run_curves(f"{m} pool", pools[m], m, grid)]
        Console().print(table(curves))
        print(markdown(curves))
        try:
            plot(curves, args.png)
            print(f"wrote {args.png}")
        except RuntimeError as exc:
            print(exc, file=sys.stderr)


if __name__ == "__main__":
    main()
