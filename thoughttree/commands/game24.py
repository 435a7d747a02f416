"""Subcommands that run the Game of 24: ``game24`` and ``demo`` (a short search with the bundled model)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console
from rich.table import Table

from ..view.live import format_stat
from ..runtime.ranks import is_main_process
from ..search.runner import Record, RunOptions, finish, is_partial
from ..tasks.game24.dataset import training_roots
from ..tasks.game24.puzzles import NUM_PUZZLES
from ..tasks.game24.split import RANGES, TEST, VALIDATION, model_held_out
from ..tasks.game24.steps import make_state
from ..tasks.game24.task import VALUES, as_puzzle
from ..view.render import show
from ..tree.serialize import RunFile, tree_from_dict
from .common import CliError, at_least, method_options
from ..search.game24_methods import METHODS, Game24Run, check_prompts_fit, check_sizes_fit, run_game24
from .launch import add_data_parallel, join_launch
from .model import (
    ATTENTION, add_model_arguments, add_speculative, check_device, is_bundled, is_remote, load_model, remote_options,
)

if TYPE_CHECKING:
    from .common import Subparsers


# -- game24 --------------------------------------------------------------------------------------
def add_game24(sub: Subparsers) -> None:
    p = sub.add_parser("game24", help="solve Game of 24 puzzles with a search method")
    add_model_arguments(p)
    p.add_argument("--method", choices=METHODS, default="bfs", help="io, cot, bon (k samples) or a tree search")
    p.add_argument("--start", type=at_least(0), default=900, help="first puzzle index (default 900)")
    p.add_argument("--end", type=at_least(1), default=1000, help="one past the last puzzle index (default 1000)")
    p.add_argument("--puzzle", action="append", default=[], metavar="'A B C D'",
                   help="solve this puzzle instead of the index range (repeatable)")
    p.add_argument("--range", choices=sorted(RANGES), dest="held_out",
                   help=f"a held-out range instead of --start/--end: val (validation puzzles {VALIDATION.label}, "
                        f"for choosing settings) or test ({TEST.label}, for reporting)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", type=Path, help="write the run file (trees, answers, success_rate) here, "
                                               "after every puzzle")
    p.add_argument("--resume", type=Path, metavar="RUN.json",
                   help="continue a stopped run from its run file (written to --output, default the same file)")
    p.add_argument("--prompts", choices=("compact", "few_shot"),
                   help="compact formats (default for the bundled model) or few-shot Tree-of-Thoughts prompts "
                        "(default for other models)")
    p.add_argument("--value", choices=VALUES,
                   help="value states by label probabilities (probs), by the best label-probability value one "
                        "sampled step ahead (lookahead, compact default), or by sampled verdicts (samples, few-shot "
                        "default)")
    p.add_argument("--show", action="store_true", help="draw each searched tree")
    add_data_parallel(p)
    p.add_argument("--live", action="store_true", help="watch each search in the terminal")
    for name, default, text in (
        ("breadth", 5, "BFS: states kept per level"),
        ("samples", None, "propose completions per expanded state (compact: 23 for bfs, 30 with --no-distinct; "
                           "20 for mcts and beam, 10 with --no-distinct; 1 few-shot)"),
        ("evaluations", None, "value samples per state: sampled verdicts (3) or look-ahead proposals (20); "
                              "none with --value probs"),
        ("k", 10, "io/cot/bon: answers sampled per puzzle"),
        ("width", 5, "beam width"),
        ("iterations", 32, "MCTS iterations"),
    ):
        shown = f" (default {default})" if default is not None else ""
        p.add_argument(f"--{name}", type=at_least(1), help=text + shown)
    p.add_argument("--rule", choices=("uct", "puct"),
                   help="MCTS selection: uct, or puct with the model's proposal probabilities as priors (default: "
                        "puct with distinct proposals, else uct)")
    p.add_argument("--token-budget", "--max-tokens-per-problem", dest="max_tokens_per_problem", type=at_least(1),
                   default=None, metavar="N",
                   help="generated tokens per puzzle: a search stops before its next round once they are spent, "
                        "and one that ends unsolved before starts again")
    p.add_argument("--no-restarts", dest="restarts", action="store_false",
                   help="with --token-budget, end a puzzle when its first search ends")
    p.add_argument("--distinct", action=argparse.BooleanOptionalAction, default=None,
                   help="sample the proposals of one expansion (and look-ahead proposals, io/cot answers) "
                        "without replacement: distinct thoughts (default: on for bfs, beam and mcts with compact "
                        "prompts on a local model without --speculative, the setting chosen on the validation "
                        "puzzles; off otherwise)")
    p.add_argument("--temperature", type=float, help="proposal / answer temperature (default 1.0)")
    p.add_argument("--c", type=float, help="MCTS exploration constant (default 1.0)")
    p.add_argument("--widening", type=float,
                   help="MCTS progressive widening exponent A: a node visited N times is asked for --samples more "
                        "proposals once N^A reaches its number of expansions + 1 (default: one expansion per node)")
    p.set_defaults(run=run_game24_command)


TREE_METHODS = ("bfs", "dfs", "beam", "mcts")
APPLIES = {"breadth": ("bfs",), "width": ("beam",), "iterations": ("mcts",), "rule": ("mcts",),
           "c": ("mcts",), "widening": ("mcts",),
           "k": ("io", "cot", "bon"), "samples": TREE_METHODS, "evaluations": TREE_METHODS, "value": TREE_METHODS}


def default_distinct(args: argparse.Namespace) -> bool | None:
    """``--distinct`` as given; unset, off where distinct decoding cannot run or would leave the option
    given unused: a server samples each completion independently, and speculation drafts for sampled
    decoding only (None: the run's own default)."""
    if args.distinct is not None:
        return args.distinct
    return False if is_remote(args.model) or args.speculative != "off" else None


def run_game24_command(args: argparse.Namespace) -> int:
    check_device(args.device)
    given = method_options(args, APPLIES)
    try:
        run = Game24Run(
            method=args.method, start=args.start, end=args.end, seed=args.seed, puzzles=tuple(args.puzzle),
            held_out=args.held_out,
            max_tokens_per_problem=args.max_tokens_per_problem, restarts=args.restarts,
            distinct=default_distinct(args),
            temperature=args.temperature,
            prompts=args.prompts or ("compact" if is_bundled(args.model) else "few_shot"), **given,
        )
    except ValueError as exc:
        raise CliError(str(exc)) from exc
    options = RunOptions(output=args.output, resume=args.resume, label=f"game24 {run.method}",
                         progress=not args.live and is_main_process())
    options.check()
    layout = join_launch(args)
    lm = load_model(args.model, str(layout.device) if layout else args.device, args.dtype, args.attention,
                    args.tensor_parallel, args.collective_timeout, num_pages=args.kv_pages,
                    speculative=args.speculative, **remote_options(args))
    try:
        check_prompts_fit(lm, run)
        check_sizes_fit(lm, run)
    except ValueError as exc:
        raise CliError(str(exc)) from exc
    console = Console(quiet=not is_main_process())

    def report(record: Record, so_far: RunFile) -> str:
        if args.show:
            show(tree_from_dict(record["tree"]), console=console, max_children=4)
        return f"solved {so_far.totals['solved']}/{so_far.totals['finished']}"

    outcome = run_game24(lm, run, options, live=args.live, on_record=report, layout=layout)
    console.print(summary_table(outcome.run))
    return finish(outcome, "game24") if is_main_process() else outcome.exit_code


def summary_table(result: RunFile) -> Table:
    meta, run = result.totals, result.meta["run"]
    which = run_puzzles_label(result)
    table = Table(title=f"Game of 24, {which}, method {run['method']}",
                  title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("metric")
    table.add_column("value", justify="right")
    rows = [("success rate", f"{meta['success_rate']:.1%}"), ("solved", f"{meta['solved']} / {meta['puzzles']}")]
    if meta["finished"] < meta["problem_count"]:
        rows.append(("puzzles searched", f"{meta['finished']} of {meta['problem_count']} (the run was stopped)"))
    if "held_out_puzzles" in meta:
        rows += split_rows(result)
    if "average_sample_accuracy" in meta:
        rows.append(("average sample accuracy", f"{meta['average_sample_accuracy']:.1%}"))
    if meta.get("errors"):
        rows.append(("searches that failed", f"{meta['errors']} (see result.error in the run file)"))
    rows += [
        ("generated tokens", format_stat(meta["generated_tokens"])),
        ("prefilled tokens", format_stat(meta["prefill_tokens"])),
        ("wall time", f"{meta['wall_time']:.1f}s"),
        ("device", result.meta.get("device", "")),
        ("dtype, attention", f"{result.meta.get('dtype', '?')}, {result.meta.get('attention', '?')}"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table


def run_puzzles_label(result: RunFile) -> str:
    """Which puzzles a run searched, naming the held-out range when they are all from one."""
    run, totals = result.meta["run"], result.totals
    if run["puzzles"]:
        which = f"{len(run['puzzles'])} given puzzles"
    elif run.get("held_out"):
        held_out = RANGES[run["held_out"]]
        which = f"puzzles {held_out.label}"
    else:
        which = f"puzzles {run['start']}..{run['end'] - 1}"
    count = totals.get("puzzles", 0)
    if count and totals.get("held_out_puzzles") == count:
        which += " (test)"
    elif count and totals.get("validation_puzzles") == count:
        which += " (validation)"
    return which


def split_rows(result: RunFile) -> list[tuple[str, str]]:
    """How many of the run's puzzles are held-out test and validation puzzles and, for a model whose
    ``training.json`` records how its data was made (the bundled one), how many were in that data."""
    held, puzzles = result.totals["held_out_puzzles"], result.totals["puzzles"]
    rows = [("held-out test puzzles", f"{held} of {puzzles} ({TEST.label}, in any order)")]
    if "validation_puzzles" in result.totals:  # run files written before the validation range lack it
        rows.append(("validation puzzles",
                     f"{result.totals['validation_puzzles']} of {puzzles} ({VALIDATION.label}, in any order)"))
    model = result.meta.get("model")
    held_out = model_held_out(model) if model else None
    if held_out is not None:
        roots = set(training_roots(held_out))
        seen = sum(make_state(as_puzzle(r["problem"])) in roots for r in result.problems if not is_partial(r))
        rows.append(("in the model's training data", f"{seen} of {puzzles}"))
    return rows


# -- demo ----------------------------------------------------------------------------------------
DEMO_START = 900


def add_demo(sub: Subparsers) -> None:
    p = sub.add_parser("demo", help="a short Tree-of-Thoughts search on a few puzzles with the bundled model")
    p.add_argument("--puzzles", type=at_least(1), default=3,
                   help=f"how many puzzles from index {DEMO_START} (default 3, at most {NUM_PUZZLES - DEMO_START})")
    p.add_argument("--device", help="cuda or cpu (default: cuda when available)")
    p.add_argument("--attention", choices=ATTENTION, default="auto", help="tree-attention backend (default auto)")
    add_speculative(p)
    p.set_defaults(run=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    if DEMO_START + args.puzzles > NUM_PUZZLES:
        raise CliError(f"--puzzles {args.puzzles}: the data has {NUM_PUZZLES - DEMO_START} puzzles from index "
                       f"{DEMO_START}; use --puzzles {NUM_PUZZLES - DEMO_START} or fewer")
    lm = load_model("bundled", args.device, None, args.attention, speculative=args.speculative)
    run = Game24Run(method="bfs", start=DEMO_START, end=DEMO_START + args.puzzles)
    console = Console()
    console.print(f"Tree-of-Thoughts BFS (breadth {run.breadth}) with the bundled model on puzzles "
                  f"{run.start}..{run.end - 1}, {lm.device}")
    shown = False

    def report(entry: Record, so_far: RunFile) -> None:
        nonlocal shown
        res = entry["result"]
        console.print(f"puzzle {entry['index']} ({entry['problem']}): {answer_line(res)}", highlight=False)
        if res["correct"] and not shown:
            show(tree_from_dict(entry["tree"]), console=console, max_children=4)
            shown = True

    outcome = run_game24(lm, run, on_record=report)
    console.print(summary_table(outcome.run))
    return finish(outcome, "demo", resume=demo_resume(args, run))


def demo_resume(args: argparse.Namespace, run: Game24Run) -> str:
    """The game24 command line that continues a stopped demo from its run file (the demo takes no --resume)."""
    words = ["thoughttree game24", f"--start {run.start} --end {run.end}"]
    if args.device is not None:
        words.append(f"--device {args.device}")
    if args.attention != "auto":
        words.append(f"--attention {args.attention}")
    return " ".join([*words, "--resume"])


def answer_line(result: dict[str, Any]) -> str:
    """A puzzle's outcome in one line; a wrong answer is never shown as if it were an equation that holds."""
    if result["correct"]:
        return f"{result['answer']} ✓"
    if result["answer"] is None:
        return "not solved ✗ (no answer)"
    return f"not solved ✗ (best attempt {result['answer']!r}: {result.get('check', 'wrong')})"
