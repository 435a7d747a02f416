"""Code subcommands: ``apps`` and ``humaneval`` (search for programs, score them on hidden tests), ``check-program``."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..runtime.ranks import is_main_process
from ..search.runner import Problem, Record, RunOptions, RunOutcome, finish, model_meta
from ..tasks import apps, humaneval
from ..tasks.code import CodeTask, template_renderer
from ..view.render import show
from ..tree.serialize import RunFile, tree_from_dict
from ..search.code_methods import METHODS, CodeSearch, apps_totals, humaneval_totals, problem_seed, search_problem
from .common import CliError, at_least, method_options
from .launch import add_data_parallel, add_tensor_parallel, join_launch
from .model import ATTENTION, add_remote_arguments, add_speculative, check_device, load_model, remote_options

if TYPE_CHECKING:
    from ..search.data_parallel import Layout
    from .common import Subparsers

TESTS_FAILED = 1
DEFAULT_SAMPLES = 8


def _add_search(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="a local Hugging Face model directory (no code model ships), or "
                                                   "an OpenAI-compatible server's URL (http://host:port/v1)")
    add_remote_arguments(p)
    p.add_argument("--device", help="cuda or cpu (default: cuda when available)")
    p.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), help="weights and KV dtype")
    p.add_argument("--attention", choices=ATTENTION, default="auto",
                   help="tree-attention backend (auto: Triton kernels on a GPU with 16-bit weights, else reference)")
    add_speculative(p)
    add_tensor_parallel(p)
    add_data_parallel(p)
    p.add_argument("--method", choices=METHODS, default="bon",
                   help="io: sample without tests; bon: best of N by public tests; beam/mcts: search over lines")
    p.add_argument("--prompts", choices=("base", "chat"),
                   help="base-model prompt or the model's chat template (default: chat when the tokenizer has one)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", type=Path, help="write the run file (trees, programs, verdicts, totals) here")
    p.add_argument("--resume", type=Path, metavar="RUN.json",
                   help="continue a stopped run from its run file (written to --output, default the same file)")
    p.add_argument("--samples", type=at_least(1),
                   help=f"programs (io, bon) or lines per expansion (beam, mcts) (default 1 for io, else "
                        f"{DEFAULT_SAMPLES})")
    p.add_argument("--width", type=at_least(1), help="beam width (default 4)")
    p.add_argument("--iterations", type=at_least(1), help="MCTS iterations (default 32)")
    p.add_argument("--max-tokens", type=at_least(1), default=512, help="tokens per program (default 512)")
    p.add_argument("--max-lines", type=at_least(1), help="beam, mcts: lines per program (default 48)")
    p.add_argument("--show", action="store_true", help="draw each searched tree")
    p.add_argument("--live", action="store_true", help="watch each search in the terminal")


APPLIES = {"width": ("beam",), "iterations": ("mcts",), "max_lines": ("beam", "mcts")}


def _method(args: argparse.Namespace, samples: int | None = None) -> CodeSearch:
    given = method_options(args, APPLIES)
    if samples is not None and args.samples is not None and samples != args.samples:
        raise CliError(f"--samples {args.samples} and --k {samples} disagree (--k sets the samples); give one of them")
    samples = samples or args.samples or (1 if args.method == "io" else DEFAULT_SAMPLES)
    try:
        return CodeSearch(method=args.method, samples=samples, max_tokens=args.max_tokens, **given)
    except ValueError as exc:
        raise CliError(str(exc)) from exc


def _style(args: argparse.Namespace, lm: Any) -> tuple[str, Any]:
    style = args.prompts or ("chat" if getattr(lm.tokenizer, "chat_template", None) else "base")
    if style == "base":
        return style, None
    try:
        return style, template_renderer(lm.tokenizer)
    except ValueError as exc:
        raise CliError(f"--prompts chat: {exc}") from exc


def _ready(args: argparse.Namespace) -> None:
    """Fail early, in one line, before loading any model: the device, the output path, the sandbox."""
    from ..sandbox import SandboxUnavailable, run_tests

    check_device(args.device)
    RunOptions(output=args.output, resume=args.resume).check()

    try:
        run_tests("", [("", None)])
    except SandboxUnavailable as exc:
        raise CliError(f"the sandbox cannot run programs here: {exc}") from exc


def _run(task: CodeTask, keys: list[str], lm: Any, method: CodeSearch, args: argparse.Namespace, meta: dict,
         totals: Callable[[Sequence[Record]], dict[str, Any]], *, layout: Layout | None = None,
         all_samples: bool = False) -> RunOutcome:
    from ..search.data_parallel import run_problem_set

    try:
        method.check_fits(lm, "--k" if getattr(args, "k", 1) > 1 else "--samples")
    except ValueError as exc:
        raise CliError(str(exc)) from exc
    console = Console(quiet=not is_main_process())
    options = RunOptions(output=args.output, resume=args.resume, label=f"{meta['task']} {method.method}",
                         progress=not args.live and is_main_process())

    def solve(problem: Problem) -> Record:
        return search_problem(task, problem.data, lm, method, seed=problem_seed(args.seed, problem.data),
                              live=args.live, all_samples=all_samples)

    def report(record: Record, so_far: RunFile) -> str:
        if args.show:
            show(tree_from_dict(record["tree"]), console=console, max_children=4)
        passed = sum(bool(r["result"].get("passed")) for r in so_far.problems)
        return f"passed {passed}/{len(so_far.problems)}"

    problems = [Problem(id=key, data=key) for key in keys]
    return run_problem_set(problems, solve, meta, options, layout=layout, totals=totals, on_record=report,
                           console=console)


def _totals_table(title: str, totals: dict[str, Any]) -> Table:
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in totals.items():
        shown = f"{value:.1%}" if ("accuracy" in key or "average" in key or key.startswith("pass@")) else (
            f"{value:.1f}s" if key == "wall_time" else str(value))
        table.add_row(key, shown)
    return table


# -- apps ----------------------------------------------------------------------------------------
def add_apps(sub: Subparsers) -> None:
    p = sub.add_parser("apps", help="APPS: search for programs, score them on the hidden tests")
    _add_search(p)
    p.add_argument("--data", default="bundled",
                   help="'bundled' (87 APPS train-split problems), an APPS .jsonl file or a split folder")
    p.add_argument("--difficulty", choices=(*apps.DIFFICULTIES, "all"), default="all",
                   help="only the problems of this difficulty (default all)")
    p.add_argument("--start", type=at_least(0), default=0, help="first problem position in the data (default 0)")
    p.add_argument("--end", type=at_least(1), help="one past the last position (default: the end of the data)")
    p.set_defaults(run=run_apps)


def _load_apps(data: str, selection: apps.Selection) -> list[Any]:
    try:
        return apps.load(data, selection)
    except apps.AppsDataError as exc:
        raise CliError(f"--data {data}: {exc}") from exc


def run_apps(args: argparse.Namespace) -> int:
    try:
        selection = apps.Selection(args.difficulty, args.start, args.end)
    except ValueError as exc:
        raise CliError(f"--start/--end: {exc}") from exc
    method = _method(args)
    _ready(args)
    problems = _load_apps(args.data, selection)
    layout = join_launch(args)
    lm = load_model(args.model, str(layout.device) if layout else args.device, args.dtype, args.attention,
                    args.tensor_parallel, args.collective_timeout, speculative=args.speculative,
                    **remote_options(args))
    style, render = _style(args, lm)
    task = apps.Apps(problems, method.task_config(), style=style, render=render)
    bundled = args.data == apps.BUNDLED
    split = f"APPS {apps.BUNDLED_SPLIT} split (bundled sample)" if bundled else f"APPS from {args.data}"
    meta = {"task": "apps", "data": split, "difficulty": args.difficulty, "start": args.start, "end": args.end,
            "method": asdict(method), "prompts": style, "seed": args.seed, **model_meta(lm),
            "public_tests": "examples shown in each statement, else its first test "
                            "(see thoughttree.tasks.code.split_public)",
            "hidden_tests": "every other test; used only for the final score"}
    outcome = _run(task, [p.key for p in problems], lm, method, args, meta, apps_totals, layout=layout)
    Console(quiet=not is_main_process()).print(
        _totals_table(f"{split}, {len(problems)} problems, method {method.method}", outcome.run.totals))
    return finish(outcome, "apps") if is_main_process() else outcome.exit_code


# -- humaneval -----------------------------------------------------------------------------------
def add_humaneval(sub: Subparsers) -> None:
    p = sub.add_parser("humaneval", help="HumanEval: complete 164 functions, pass@1 and pass@k in the sandbox")
    _add_search(p)
    p.add_argument("--k", type=at_least(1), default=1,
                   help="io: samples per problem for pass@k (pass@1 and pass@k are reported); other methods: "
                        "the same as --samples")
    p.add_argument("--start", type=at_least(0), default=0, help="first problem (default 0)")
    p.add_argument("--end", type=at_least(1), default=humaneval.NUM_PROBLEMS, help="one past the last (default 164)")
    p.set_defaults(run=run_humaneval)


def run_humaneval(args: argparse.Namespace) -> int:
    if not args.start < args.end <= humaneval.NUM_PROBLEMS:
        raise CliError(f"--start/--end must satisfy 0 <= start < end <= {humaneval.NUM_PROBLEMS}, "
                       f"got {args.start}, {args.end}")
    method = _method(args, samples=args.k if args.k > 1 else None)
    _ready(args)
    try:
        problems = humaneval.load()[args.start:args.end]
    except humaneval.HumanEvalDataError as exc:
        raise CliError(str(exc)) from exc
    layout = join_launch(args)
    lm = load_model(args.model, str(layout.device) if layout else args.device, args.dtype, args.attention,
                    args.tensor_parallel, args.collective_timeout, speculative=args.speculative,
                    **remote_options(args))
    style, render = _style(args, lm)
    task = humaneval.HumanEval(problems, method.task_config(), style=style, render=render)
    meta = {"task": "humaneval", "start": args.start, "end": args.end, "method": asdict(method), "k": args.k,
            "prompts": style, "seed": args.seed, **model_meta(lm),
            "public_tests": "examples in each docstring", "hidden_tests": "the problem's check function"}
    outcome = _run(task, [p.key for p in problems], lm, method, args, meta,
                   lambda records: humaneval_totals(records, args.k), layout=layout, all_samples=method.method == "io")
    Console(quiet=not is_main_process()).print(
        _totals_table(f"HumanEval {args.start}..{args.end - 1}, method {method.method}", outcome.run.totals))
    return finish(outcome, "humaneval") if is_main_process() else outcome.exit_code


# -- check-program -------------------------------------------------------------------------------
def add_check_program(sub: Subparsers) -> None:
    p = sub.add_parser("check-program", help="run one program on one APPS problem's tests in the sandbox")
    p.add_argument("program", type=Path, metavar="PROGRAM.py")
    p.add_argument("--data", default="bundled", help="'bundled' (APPS train-split sample), a .jsonl file or a folder")
    p.add_argument("--problem", required=True, help="the problem id (problem_id in the data)")
    p.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    p.set_defaults(run=run_check_program)


def run_check_program(args: argparse.Namespace) -> int:
    try:
        program = args.program.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"{args.program}: cannot read the program ({exc})") from exc
    try:
        problem = apps.find(args.data, args.problem)
        ids = sorted(apps.problem_ids(args.data), key=lambda k: (len(k), k)) if problem is None else []
    except apps.AppsDataError as exc:
        raise CliError(f"--data {args.data}: {exc}") from exc
    if problem is None:
        raise CliError(f"--problem {args.problem}: no such problem in {args.data}; ids run {ids[0]}..{ids[-1]}")
    from ..sandbox import SandboxUnavailable, run_tests

    tests = [("public", t) for t in problem.public] + [("hidden", t) for t in problem.hidden]
    try:
        results = run_tests(program, [t for _, t in tests], fn_name=problem.fn_name)
    except SandboxUnavailable as exc:
        raise CliError(f"the sandbox cannot run programs here: {exc}") from exc
    rows = [{"test": i, "set": kind, "status": r.status, "seconds": round(r.time_s, 3), "stderr": r.stderr}
            for i, ((kind, _), r) in enumerate(zip(tests, results))]
    passed = sum(r["status"] == "passed" for r in rows)
    if args.json:
        print(json.dumps({"problem": problem.key, "data": args.data, "passed": passed, "tests": len(rows),
                          "verdicts": rows}, indent=1))
    else:
        table = Table(title=f"problem {problem.key} ({problem.difficulty or 'unknown difficulty'}): "
                      f"{passed}/{len(rows)} tests passed", title_justify="left", box=box.SIMPLE_HEAD)
        for col in ("test", "set", "status", "seconds", "stderr"):
            table.add_column(col)
        for r in rows:
            table.add_row(str(r["test"]), str(r["set"]), str(r["status"]), f"{r['seconds']:.3f}",
                          Text(str(r["stderr"])[-80:]))  # the program's text, shown as it is (never as markup)
        Console().print(table)
    return 0 if passed == len(rows) else TESTS_FAILED
