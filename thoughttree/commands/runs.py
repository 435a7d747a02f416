"""Subcommands over saved run files: ``show``, ``stats`` and ``export``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from ..search.run_output import lock_run_file, unlock_run_file
from ..view.live import format_stat
from ..tree.export import graphml_text, to_dot
from ..view.render import legend, one_line, show
from ..tree.serialize import RunFile, RunFileError, holds_run_file, load_run, tree_from_dict, tree_to_dict
from ..tree.summary import TreeSummary, combine, summarize
from ..tree.node import Node
from ..tree.thought_tree import ThoughtTree
from .common import CliError, at_least

if TYPE_CHECKING:
    from .common import Subparsers


def _add_run_file(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_file", type=Path, help="a run file written by a search command (JSON)")
    parser.add_argument("--problem", type=at_least(0), metavar="N", help="only problem N (counting from 0)")


def _select(run: RunFile, index: int | None, path: Path) -> list[tuple[int, dict[str, Any], ThoughtTree]]:
    """(index, entry, tree) of the chosen problem, or of every problem when ``index`` is None."""
    if index is not None and index >= len(run.problems):
        count = len(run.problems)
        valid = f"0..{count - 1}" if count else "none"
        raise CliError(f"problem {index} is out of range: {path} has {count} problem(s) ({valid})")
    chosen = range(len(run.problems)) if index is None else [index]
    out = []
    for i in chosen:
        try:
            out.append((i, run.problems[i], tree_from_dict(run.problems[i]["tree"])))
        except RunFileError as exc:
            raise RunFileError(f"{path}, problem {i}: {exc}") from exc
    return out


def _seconds(source: Any, key: str) -> float | None:
    """``source[key]`` when ``source`` is a dict and that is a number (not a bool), else None."""
    value = source.get(key) if isinstance(source, dict) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _wall_time(result: Any) -> float | None:
    """Seconds the problem took: ``wall_time`` in the result's "statistics" or "stats", or at its top."""
    if not isinstance(result, dict):
        return None
    sources = [result.get(k) for k in ("statistics", "stats")] + [result]
    for source in sources:
        value = _seconds(source, "wall_time")
        if value is not None:
            return value
    return None


def _round_seconds(result: Any) -> tuple[float, float] | None:
    """Seconds a search spent expanding and evaluating, summed over its rounds (``per_round`` in
    the result's "statistics"); None when the run file does not record them."""
    stats = result.get("statistics") if isinstance(result, dict) else None
    rounds = stats.get("per_round") if isinstance(stats, dict) else None
    if not isinstance(rounds, list) or not rounds:
        return None
    expand = [_seconds(r, "expand_seconds") for r in rounds]
    evaluate = [_seconds(r, "evaluate_seconds") for r in rounds]
    if any(v is None for v in expand) or any(v is None for v in evaluate):
        return None
    return sum(v for v in expand if v is not None), sum(v for v in evaluate if v is not None)


# -- show ----------------------------------------------------------------------------------------
def add_show(sub: Subparsers) -> None:
    p = sub.add_parser("show", help="draw the searched trees of a run file")
    _add_run_file(p)
    p.add_argument("--depth", type=at_least(0), metavar="N", help="draw down to depth N (the prompt is 0)")
    p.add_argument("--children", type=at_least(1), metavar="N", help="at most N children per node, best first")
    p.add_argument("--best", action="store_true", help="only the best path")
    p.add_argument("--solved", action="store_true", help="only paths that end in a solution")
    p.add_argument("--width", type=at_least(20), metavar="COLS", help="draw at this width (default: terminal)")
    p.set_defaults(run=run_show)


def run_show(args: argparse.Namespace) -> int:
    run = load_run(args.run_file)
    console = Console()
    for i, entry, tree in _select(run, args.problem, args.run_file):
        title = f"problem {i}"
        if entry.get("problem") is not None:
            title += f": {one_line(str(entry['problem']), 60)}"
        result: dict[str, Any] = entry["result"] if isinstance(entry.get("result"), dict) else {}
        if result.get("stopped") == "interrupted":
            title += " (interrupted: the tree so far)"
        elif result.get("error"):
            title += " (failed: the tree so far)"
        console.print(Rule(Text(title), align="left"), width=args.width)  # text, never markup
        show(
            tree,
            console=console,
            max_depth=args.depth,
            max_children=args.children,
            best_only=args.best,
            solved_only=args.solved,
            width=args.width,
            with_legend=False,
            best=_result_best(entry, tree),
        )
    console.print(legend(), width=args.width)
    return 0


def _result_best(entry: dict[str, Any], tree: ThoughtTree) -> Node | None:
    """The node a search reported as best (``result.best``), so ``show`` marks the same path."""
    best = entry.get("result", {}).get("best") if isinstance(entry.get("result"), dict) else None
    return tree[best] if isinstance(best, int) and 0 <= best < len(tree) else None


# -- stats ---------------------------------------------------------------------------------------
def add_stats(sub: Subparsers) -> None:
    p = sub.add_parser("stats", help="tables of tree shape, tokens, solutions and time per problem")
    _add_run_file(p)
    p.add_argument("--total", action="store_true", help="only the totals over all problems")
    p.set_defaults(run=run_stats)


_STATS_COLUMNS = ("nodes", "depths", "branch", "prompt", "gen", "solved", "pruned", "best", "time", "expand", "eval")


def _stats_row(summary: TreeSummary, seconds: float | None, rounds: tuple[float, float] | None) -> list[str]:
    def opt(value: float | None) -> str:
        return "–" if value is None else format_stat(value)

    def secs(value: float | None) -> str:
        return "–" if value is None else f"{value:.2f}s"

    return [
        format_stat(summary.nodes),
        " ".join(str(c) for c in summary.per_depth),
        opt(summary.branching),
        format_stat(summary.prompt_tokens),
        format_stat(summary.generated_tokens),
        format_stat(summary.solved),
        format_stat(summary.pruned),
        opt(summary.best_value),
        secs(seconds),
        *(secs(v) for v in rounds or (None, None)),
    ]


def _stats_table(title: str, rows: list[tuple[str, list[str]]], console: Console) -> Table:
    """One row per problem when the terminal is wide enough, else one block of metric rows per problem."""
    caption = ("prompt, gen: tokens of roots, of other nodes; branch: mean children of expanded nodes; "
               "expand, eval: seconds of the search's expansions and evaluations")
    wide = Table(
        title=Text(title), title_justify="left", caption=caption, caption_justify="left",
        box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True, show_edge=False,
    )  # fmt: skip
    wide.add_column("problem", max_width=20, overflow="ellipsis", no_wrap=True)
    for name in _STATS_COLUMNS:
        wide.add_column(name, justify="left" if name == "depths" else "right", no_wrap=True)
    for name, cells in rows:
        wide.add_row(Text(name), *cells, style="bold" if name.startswith("total") else None)
    # Measure unclamped: rich limits a measurement to the width it is given.
    if Measurement.get(console, console.options.update_width(10_000), wide).maximum <= console.width:
        return wide
    tall = Table(title=Text(title), title_justify="left", caption=caption, caption_justify="left", box=box.SIMPLE)
    tall.add_column("metric", style="dim")
    tall.add_column("value", overflow="fold")
    for name, cells in rows:
        tall.add_row(Text(name), "", style="bold")
        for metric, cell in zip(_STATS_COLUMNS, cells):
            tall.add_row(metric, cell)
        tall.add_section()
    return tall


def run_stats(args: argparse.Namespace) -> int:
    run = load_run(args.run_file)
    chosen = _select(run, args.problem, args.run_file)
    rows: list[tuple[str, list[str]]] = []
    summaries, times, halves = [], [], []
    for i, entry, tree in chosen:
        summary, seconds, rounds = summarize(tree), _wall_time(entry.get("result")), _round_seconds(entry.get("result"))
        summaries.append(summary)
        times.append(seconds)
        halves.append(rounds)
        if not args.total:
            problem = f"{i}: {one_line(str(entry['problem']), 20)}" if entry.get("problem") is not None else str(i)
            rows.append((problem, _stats_row(summary, seconds, rounds)))
    if len(chosen) > 1 or args.total:
        known = [t for t in times if t is not None]
        split = [h for h in halves if h is not None]
        total_halves = (sum(a for a, _ in split), sum(b for _, b in split)) if split else None
        rows.append((f"total ({len(chosen)})", _stats_row(combine(summaries), sum(known) if known else None,
                                                          total_halves)))
    console = Console()
    console.print(_stats_table(one_line(str(args.run_file), 200), rows, console))
    speculation = _speculation_line([entry for _, entry, _ in chosen])
    if speculation:
        console.print(speculation)
    if run.meta or run.totals:
        meta = Table(title="run", title_justify="left", show_header=False, box=box.SIMPLE)
        meta.add_column("key", style="dim")
        meta.add_column("value", overflow="fold")
        for key, value in {**run.meta, **run.totals}.items():
            text = json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else format_stat(value)
            meta.add_row(Text(one_line(key, 60)), Text(one_line(text, 10_000)))
        console.print(meta)
    return 0


def _speculation_line(entries: list[dict[str, Any]]) -> str:
    """Speculative decoding over these problems: drafts verified and kept, tokens per forward ("" without)."""
    totals: dict[str, float] = dict.fromkeys(
        ("draft_tokens", "accepted_tokens", "generated_tokens", "forward_steps", "draft_seconds"), 0
    )
    for entry in entries:
        stats = entry.get("result", {}).get("statistics") if isinstance(entry.get("result"), dict) else None
        if isinstance(stats, dict):
            for key in totals:
                value = stats.get(key, 0)
                totals[key] += value if isinstance(value, (int, float)) and not isinstance(value, bool) else 0
    if not totals["draft_tokens"]:
        return ""
    return (f"speculation: {format_stat(int(totals['draft_tokens']))} draft tokens verified, "
            f"{format_stat(int(totals['accepted_tokens']))} kept "
            f"({totals['accepted_tokens'] / totals['draft_tokens']:.1%}); "
            f"{totals['generated_tokens'] / max(1, totals['forward_steps']):.2f} tokens per forward; "
            f"drafting {totals['draft_seconds']:.2f} s")


# -- export --------------------------------------------------------------------------------------
def add_export(sub: Subparsers) -> None:
    p = sub.add_parser("export", help="one problem's tree as GraphML, Graphviz DOT or JSON")
    _add_run_file(p)
    p.add_argument("--format", required=True, choices=("graphml", "dot", "json"), help="file format to write")
    p.add_argument("--output", type=Path, metavar="PATH", help="write here instead of to stdout")
    p.add_argument("--force", action="store_true",
                   help="replace an --output file that is not an export of this --format (never a run file)")
    p.set_defaults(run=run_export)


EXPORT_HEADS = {  # what an export of each format begins with (its first bytes, read up to PEEK_BYTES)
    "json": lambda head: b'"format": "thoughttree.tree"' in head,
    "graphml": lambda head: head.startswith(b"<?xml") and b"<graphml" in head,
    "dot": lambda head: head.lstrip().startswith(b"digraph thoughttree {"),
}
PEEK_BYTES = 1 << 16


def _check_export_output(path: Path, fmt: str, run_file: Path, force: bool) -> None:
    """Refuse an --output that would lose a file: a directory, the run file being exported, any
    run file, or (without ``force``) a file that is not an export of ``fmt``, an empty one included."""
    if path.is_dir():
        raise CliError(f"--output {path} is a directory; give a file path such as {path / f'tree.{fmt}'}")
    if not path.parent.is_dir():
        raise CliError(f"--output {path}: the directory {path.parent} does not exist; create it first")
    if not path.exists():
        return
    if not path.is_file():
        raise CliError(f"--output {path} exists and is not a file; choose another path")
    if path.samefile(run_file) or holds_run_file(path):
        which = "the run file being exported" if path.samefile(run_file) else "a thoughttree run file"
        raise CliError(f"--output {path} is {which}; write the export to another path")
    try:
        with path.open("rb") as handle:
            head = handle.read(PEEK_BYTES)
    except OSError as exc:
        raise CliError(f"--output {path}: cannot read the file there ({exc.strerror or exc})") from None
    if not force and not EXPORT_HEADS[fmt](head):
        what = "an empty file" if not head.strip() else f"a file that is not a {fmt} export of thoughttree"
        raise CliError(f"--output {path} holds {what}, which the export would replace; choose another path, "
                       "or add --force to replace it")


def run_export(args: argparse.Namespace) -> int:
    run = load_run(args.run_file)
    if args.problem is None and len(run.problems) != 1:
        raise CliError(f"{args.run_file} has {len(run.problems)} problems; choose one with --problem N")
    [(_, entry, tree)] = _select(run, args.problem if args.problem is not None else 0, args.run_file)
    if args.format == "graphml":
        text = graphml_text(tree)
    elif args.format == "dot":
        text = to_dot(tree, best=_result_best(entry, tree))  # the path show marks
    else:
        try:
            text = json.dumps(tree_to_dict(tree), indent=1, sort_keys=True, allow_nan=False) + "\n"
        except ValueError as exc:  # NaN in a node's metadata: readable here, not valid JSON
            raise CliError(
                f"{args.run_file}: the tree holds a value JSON cannot write ({exc}); export it as graphml or dot"
            ) from None
    if args.output is None:
        sys.stdout.write(text)
        return 0
    _check_export_output(args.output, args.format, args.run_file, args.force)
    lock_run_file(args.output, "--output")
    try:
        _check_export_output(args.output, args.format, args.run_file, args.force)  # as it is now we own it
        tmp = args.output.with_name(f".{args.output.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(args.output)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise CliError(f"cannot write {args.output}: {exc.strerror or exc}") from exc
    finally:
        unlock_run_file(args.output)
    return 0
