"""The search driver: rounds of select -> expand (one batch) -> evaluate (one batch) -> update.

>>> result = search(MyTask(), BFS(breadth=5, samples=3, depth=3), lm, problem="...", seed=0)
>>> result.answer, result.statistics.reuse_factor
>>> result.save("run.json")

A search stops when the strategy is finished, when a :class:`Budget` limit is reached (it then
returns its best so far), or on Ctrl-C (same). If anything raises mid-way, the
:class:`SearchError` carries the tree and a partial result, so the work can be saved.
``search(..., tree=SearchResult.load(path, lm).tree)`` resumes a saved search.

The returned tree keeps the KV of its live nodes, so it can be expanded further by hand; call
``result.tree.release_kv()`` when it is no longer needed (e.g. between problems of a benchmark).
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from typing import Any

from ..runtime.ranks import RankFailure, is_main_process
from .results import Counters, RoundStats, SearchResult, Statistics
from .rounds import RoundRunner
from ..strategies.base import SearchContext, Strategy
from ..tasks.base import Task, TaskError, check_prompt
from ..tree import Status, ThoughtTree


# Steps without model work are fine (MCTS revisiting finished nodes) but not forever.
MAX_IDLE_ROUNDS = 10_000


@dataclass(frozen=True)
class Budget:
    """Limits of one search call; None means no limit. Checked before every round.

    ``max_nodes`` caps the tree's size (a round expands only as many nodes as fit);
    ``max_generated_tokens`` (all tokens the model generated or picked as a top token, evaluation
    included), ``max_rounds`` and ``max_seconds`` stop the search before the next round once reached.
    """

    max_nodes: int | None = None
    max_generated_tokens: int | None = None
    max_rounds: int | None = None
    max_seconds: float | None = None

    def __post_init__(self) -> None:
        for name in ("max_nodes", "max_generated_tokens", "max_rounds"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"Budget {name} must be an integer >= 1 (or None for no limit), got {value!r}")
        if self.max_seconds is not None and not self.max_seconds > 0:
            raise ValueError(f"Budget max_seconds must be > 0 (or None for no limit), got {self.max_seconds!r}")

    def exhausted(self, rounds: int, nodes: int, generated: int, seconds: float) -> str | None:
        """The name of the first limit reached, or None."""
        if self.max_rounds is not None and rounds >= self.max_rounds:
            return "max_rounds"
        if self.max_nodes is not None and nodes >= self.max_nodes:
            return "max_nodes"
        if self.max_generated_tokens is not None and generated >= self.max_generated_tokens:
            return "max_generated_tokens"
        if self.max_seconds is not None and seconds >= self.max_seconds:
            return "max_seconds"
        return None


class SearchError(RuntimeError):
    """A search that failed mid-way; ``tree`` and ``partial_result`` keep everything searched so far."""

    def __init__(self, message: str, tree: ThoughtTree, partial_result: SearchResult) -> None:
        super().__init__(message)
        self.tree = tree
        self.partial_result = partial_result


def search(
    task: Task,
    strategy: Strategy,
    lm: Any,
    *,
    problem: Any,
    seed: int = 0,
    budget: Budget | None = None,
    live: bool | Any = False,
    tree: ThoughtTree | None = None,
) -> SearchResult:
    """Run ``strategy`` on ``problem`` of ``task`` with model ``lm``; see the module docstring.

    ``tree``: continue a saved search (its seed is used; the root must be ``task.prompt(problem)``).
    ``live``: True shows the tree and statistics in the terminal while searching (a
    ``thoughttree.view.live.LiveView`` may be passed instead, e.g. one with its own console); under a
    distributed launch only rank 0 draws it.
    """
    budget = Budget() if budget is None else budget
    if not isinstance(budget, Budget):
        raise TypeError(f"budget must be a thoughttree Budget, got {type(budget).__name__}")
    if not isinstance(task, Task):
        raise TypeError(f"task must be a thoughttree.tasks.Task, got {type(task).__name__}")
    if isinstance(strategy, type):
        name = strategy.__name__
        raise TypeError(f"strategy must be an instance, got the class {name}; e.g. {name}(...)")
    for method in ("start", "step", "update", "best"):
        if not callable(getattr(strategy, method, None)):
            raise TypeError(f"strategy {type(strategy).__name__} has no {method}() method; see thoughttree.strategies")
    tree = _prepare_tree(task, lm, problem, seed, tree)
    ctx = SearchContext(task=task, problem=problem, evaluator=task.evaluator(), seed=tree.seed)
    settings = {
        "task": task.describe(),
        "strategy": _describe(strategy),
        "seed": tree.seed,
        "budget": asdict(budget),
    }
    engine = getattr(lm, "engine", None)
    if engine is not None:  # which attention backend ran, as task run files record it
        settings["attention"] = engine.attention
    run = _Run(lm, tree, ctx, strategy, settings)
    view = None
    if is_main_process():  # under a distributed launch only rank 0 draws
        view = _live_view(task, strategy) if live is True else live or None
    try:
        with view if view is not None else nullcontext():
            strategy.start(tree, ctx)
            stopped = run.loop(budget, view)
    except KeyboardInterrupt:
        stopped = "interrupted"
    except RankFailure:
        raise  # a tensor-parallel peer is gone: this process cannot search on
    except Exception as exc:
        raise run.failure(f"an error in round {run.rounds + 1}", exc) from exc
    try:
        return run.result(stopped)
    except Exception as exc:
        raise run.failure(f"{type(strategy).__name__}.best() raising", exc) from exc


class _Run:
    def __init__(self, lm: Any, tree: ThoughtTree, ctx: SearchContext, strategy: Strategy, settings: dict) -> None:
        self.lm, self.tree, self.ctx, self.strategy, self.settings = lm, tree, ctx, strategy, settings
        self.runner = RoundRunner(lm, tree, ctx)
        self.rounds = 0
        self.per_round: list[RoundStats] = []
        self.start_counters = Counters.read(lm)
        self.start_time = time.perf_counter()

    def loop(self, budget: Budget, view: Any) -> str:
        idle = 0
        while True:
            if self.strategy_done_by_solution():
                return "solved"
            used = self.used()
            limit = budget.exhausted(self.rounds, len(self.tree), used.generated_tokens, self._elapsed())
            if limit is not None:
                return limit
            step = self.strategy.step()
            if step is None:
                return "solved" if any(n.status is Status.SOLVED for n in self.tree.nodes) else "done"
            room = None if budget.max_nodes is None else budget.max_nodes - len(self.tree)
            if room is not None and step.expand and room < step.n and not step.evaluate:
                return "max_nodes"
            if step.expand or step.evaluate:
                idle = 0
            else:
                idle += 1
                if idle > MAX_IDLE_ROUNDS:
                    raise RuntimeError(
                        f"{type(self.strategy).__name__} returned {idle} empty steps in a row; a strategy must "
                        "return None when it is finished"
                    )
            outcome, stats = self.runner.run(step, room)
            self.strategy.update(outcome)
            self.rounds += 1
            self.per_round.append(stats)
            if view is not None:
                best = self.strategy.best()
                view.update(self.tree, self.statistics().display(None if best is None else best.value))

    def strategy_done_by_solution(self) -> bool:
        stop = getattr(getattr(self.strategy, "config", None), "stop_on_solution", False)
        return bool(stop) and any(n.status is Status.SOLVED for n in self.tree.nodes)

    def _elapsed(self) -> float:
        return time.perf_counter() - self.start_time

    def used(self) -> Counters:
        """The model work of this search so far (top tokens it picked count as generated)."""
        return Counters.read(self.lm) - self.start_counters + self.runner.chosen

    def statistics(self) -> Statistics:
        used = self.used()
        return Statistics(
            rounds=self.rounds,
            **asdict(used),
            nodes=len(self.tree),
            wall_time=self._elapsed(),
            per_round=tuple(self.per_round),
        )

    def failure(self, where: str, exc: Exception) -> SearchError:
        """The error to raise: it keeps the tree and a partial result (without a best node when best() fails)."""
        try:
            partial = self.result("error")
        except Exception:  # best() itself is broken: the tree still goes back to the caller
            partial = self.result("error", ask_best=False)
        return SearchError(
            f"search stopped by {where}: {exc} (the tree of {len(self.tree)} nodes is kept in this error's "
            ".tree and .partial_result)",
            self.tree,
            partial,
        )

    def result(self, stopped: str, *, ask_best: bool = True) -> SearchResult:
        best = self.strategy.best() if ask_best else None
        answer = None
        if best is not None:
            answer = best.metadata.get("answer")
            if answer is None and best.parent is not None and stopped != "error":
                answer = self.ctx.task.answer(self.ctx.problem, best)
        solutions = tuple(n for n in self.tree.nodes if n.status is Status.SOLVED)
        return SearchResult(self.ctx.problem, self.tree, best, solutions, answer, stopped, self.statistics(),
                            self.settings)


def _prepare_tree(task: Task, lm: Any, problem: Any, seed: int, tree: ThoughtTree | None) -> ThoughtTree:
    prompt = check_prompt(task.prompt(problem), f"{type(task).__name__}.prompt")
    if tree is None:
        return ThoughtTree(lm, prompt=prompt, seed=seed)
    if tree.lm is None:
        tree.lm = lm
    elif tree.lm is not lm:
        raise ValueError("the tree to resume belongs to another model; load it with this lm")
    if not tree.roots:
        raise ValueError("the tree to resume has no root")
    expected = lm.encode(prompt, add_bos=True) if isinstance(prompt, str) else prompt
    if tree.root.tokens != list(expected):
        raise TaskError(
            f"the tree to resume was searched from another prompt ({tree.root.text[:60]!r}); "
            "pass the problem it was saved with"
        )
    for node in tree.nodes:
        if node.status is Status.PRUNED and node.kv is not None:
            raise ValueError(f"node {node.id} is pruned but holds KV; the tree is inconsistent")
    return tree


def _describe(strategy: Strategy) -> dict[str, Any]:
    describe = getattr(strategy, "describe", None)
    if callable(describe):
        return describe()
    return {"class": type(strategy).__name__, "config": {}}


def _live_view(task: Task, strategy: Strategy) -> Any:
    from ..view.live import LiveView  # the terminal UI pulls in rich; only load it when asked for

    return LiveView(title=f"{type(strategy).__name__} on {type(task).__name__}")
