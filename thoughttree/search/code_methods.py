"""Searching for programs (APPS, HumanEval) with one method, and scoring the result on hidden tests.

Methods, all through :func:`thoughttree.search` and the built-in strategies:

- ``io``: ``samples`` whole programs sampled at once, no tests used; the first is the answer
  (``samples`` = 1 is APPS's top-1; HumanEval's pass@k scores every sample).
- ``bon``: ``samples`` whole programs, each run on the public tests in the sandbox (in parallel);
  the one passing most is the answer.
- ``beam``: beam search over lines; a partial program's value is the public-test pass rate of a
  rollout that completes it.
- ``mcts``: MCTS over lines with the same rollout value (as PG-TD).

For the tree searches the answer is the program with the best public pass rate that any
evaluation ran (a finished path or a rollout; earliest on ties). The hidden tests are run once,
on the answer (and, for HumanEval pass@k, on every sample), after the search has finished.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ..config import Sampling
from .driver import SearchError, search
from .results import SearchResult, Statistics
from .runner import branch_room
from ..strategies import MCTS, Beam, BestOfN, Strategy
from ..tasks.apps.metrics import Scored, summarize
from ..tasks.code import CodeConfig, CodeTask, best_program, mean_pass_at_k
from ..tree import ThoughtTree, TreeError, derive_seed

METHODS = ("io", "bon", "beam", "mcts")


@dataclass(frozen=True)
class CodeSearch:
    """One method's settings. ``samples``: programs (io, bon) or lines per expansion (beam, mcts)."""

    method: str = "bon"
    samples: int = 8
    width: int = 4
    iterations: int = 32
    max_tokens: int = 512
    max_lines: int = 48
    temperature: float = 0.8

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}; choose one of {', '.join(METHODS)}")
        for name in ("samples", "width", "iterations", "max_tokens", "max_lines"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature!r}")

    def task_config(self) -> CodeConfig:
        program = Sampling(max_tokens=self.max_tokens, temperature=self.temperature)
        line = Sampling(max_tokens=min(self.max_tokens, 128), temperature=self.temperature, stop=("\n",))
        unit = "program" if self.method in ("io", "bon") else "line"
        return CodeConfig(unit=unit, sampling=program, line_sampling=line, rollout=program, max_lines=self.max_lines,
                          dedupe=self.method != "io", public_tests=self.method != "io")

    def check_fits(self, lm: Any, samples_flag: str = "--samples") -> None:
        """ValueError, before any search, when one expansion would sample more branches than the
        model's KV pool holds beside a prompt of the whole context (each branch of up to its
        sampling's tokens keeps pages of its own), giving the largest value that fits. A remote
        model (no KV pool here) is the server's business."""
        config = self.task_config()
        sampling = config.sampling if config.unit == "program" else config.line_sampling
        room = branch_room(lm, lm.max_context, sampling.max_tokens)
        if room is None:
            return
        free, tokens, per_branch, fits = room.free, room.tokens, room.per_branch, room.fits
        count = self.samples * (self.width if self.method == "beam" else 1)
        if count <= fits:
            return
        if self.method == "beam":
            fix = f"--width x {samples_flag} must be at most {fits}"
        else:
            fix = f"the largest {samples_flag} that fits is {fits}"
        raise ValueError(f"{count} branches per expansion, each of up to {tokens} tokens, need "
                         f"{count * per_branch} KV pages; the model's KV pool holds {free} beside a prompt of the "
                         f"whole context; {fix}")

    def strategy(self) -> Strategy:
        if self.method in ("io", "bon"):
            return BestOfN(n=self.samples)
        if self.method == "beam":
            return Beam(width=self.width, samples=self.samples, score="value", max_steps=self.max_lines)
        return MCTS(iterations=self.iterations, samples=self.samples, max_depth=self.max_lines, stop_on_solution=False)


def search_problem(task: CodeTask, key: str, lm: Any, method: CodeSearch, *, seed: int, live: bool = False,
                   all_samples: bool = False) -> dict[str, Any]:
    """Search one problem and score its answer on the hidden tests; the run-file entry.

    ``entry["result"]`` gains ``program`` (the answer, or None), ``public_pass_rate``, ``hidden``
    (the answer's status on each hidden test) and ``passed`` (every hidden test passed). With
    ``all_samples`` (HumanEval pass@k) ``sample_passed`` lists, per root child, whether its
    program passes the hidden tests.
    """
    strategy = method.strategy()
    try:
        result = search(task, strategy, lm, problem=key, seed=seed, live=live)
        entry = result.to_entry()
    except SearchError as exc:  # keep what was searched; the problem counts as failed
        result = exc.partial_result
        entry = result.to_entry()
        entry["result"]["error"] = str(exc.__cause__ or exc)
    except TreeError as exc:  # the root could not be made (a statement longer than the model's context)
        result = SearchResult(key, ThoughtTree(lm, seed=seed), None, (), None, "error", Statistics())
        entry = result.to_entry()
        entry["result"]["error"] = str(exc)
    nodes = result.tree.nodes
    if method.method == "io":
        program, public = result.answer, None
        node_id = None if result.best is None else result.best.id
    else:
        program, public, node_id = best_program(nodes)
        if program is None:
            program = result.answer
    statuses: tuple[str, ...] = ()
    if program:
        statuses = task.hidden_verdicts(key, [program])[0].statuses
    problem = task.get(key)
    entry.update(difficulty=problem.difficulty, public_tests=len(problem.public), hidden_tests=len(problem.hidden))
    entry["result"].update(program=program, program_node=node_id, public_pass_rate=public, hidden=list(statuses),
                           passed=bool(statuses) and all(s == "passed" for s in statuses))
    if all_samples:
        samples = [task.answer(key, n) or "" for root in result.tree.roots[:1] for n in root.children]
        entry["result"]["sample_passed"] = [v.all_passed for v in task.hidden_verdicts(key, samples)]
    result.tree.release_kv()
    return entry


def problem_seed(run_seed: int, key: str) -> int:
    return derive_seed(run_seed, key)


def apps_totals(entries: Sequence[dict[str, Any]]) -> dict[str, float | int]:
    """Strict accuracy and test-case average on the hidden tests, overall and per difficulty (flat keys).

    The runner adds ``finished`` (the problems scored) and ``problem_count``.
    """
    scored = [Scored(e["difficulty"], tuple(e["result"]["hidden"]), e["hidden_tests"]) for e in entries]
    totals: dict[str, float | int] = {}
    for group, values in summarize(scored).items():
        suffix = "" if group == "all" else f"_{group}"
        totals[f"strict_accuracy{suffix}"] = values["strict_accuracy"]
        totals[f"test_case_average{suffix}"] = values["test_case_average"]
        if suffix:
            totals[f"problems{suffix}"] = values["problems"]
    return totals


def humaneval_totals(entries: Sequence[dict[str, Any]], k: int) -> dict[str, float | int]:
    """pass@1 of the answers; for io also the unbiased pass@1 and pass@k over every problem's samples.

    A problem with fewer than ``k`` samples (its search failed part way or before any) counts the
    samples it lacks as failed ones, so it passes at no k when it has none.
    """
    totals: dict[str, float | int] = {
        "passed": sum(bool(e["result"]["passed"]) for e in entries),
    }
    totals["pass@1"] = totals["passed"] / len(entries) if entries else 0.0
    counts = [(max(k, len(e["result"]["sample_passed"])), sum(e["result"]["sample_passed"])) for e in entries
              if "sample_passed" in e["result"]]
    if counts and len(counts) == len(entries):
        n_min = min(n for n, _ in counts)
        for kk in sorted({1} | {kk for kk in (k, 10, 100) if kk <= n_min}):
            totals[f"pass@{kk}"] = mean_pass_at_k(counts, kk)
    return totals
