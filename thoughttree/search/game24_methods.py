"""A Game of 24 run: puzzles, one method, the search per puzzle and the totals, on the shared runner.

Methods: ``io`` and ``cot`` sample k whole answers (IO directly, CoT step by step) and report
both "any of k correct" (the success rate; the checker picks) and the average share of correct
samples; ``bon`` samples k CoT answers and keeps the one with the highest sequence
log-probability (no checker in the choice); ``bfs``, ``dfs``, ``beam`` and ``mcts`` search the
propose/value tree. Every method may use the exact checker on a finished answer.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

from .runner import Problem, Record, RunOptions, RunOutcome, Solve, model_meta
from .driver import Budget, SearchError, search
from .results import SEARCH_FORMAT_VERSION
from ..strategies import BFS, DFS, MCTS, Beam, BestOfN, Strategy
from ..tasks.base import Propose, Task
from ..tasks.evaluate import LogProb
from ..tasks.game24.arith import check_answer, format_numbers
from ..tasks.game24.puzzles import NUM_PUZZLES, is_held_out, load_puzzles
from ..tasks.game24.task import STYLES, VALUES, Game24, Game24Config, Game24Direct, Game24DirectConfig, as_puzzle
from ..tree import ThoughtTree, derive_seed
from ..tree.serialize import RunFile

if TYPE_CHECKING:
    from .data_parallel import Layout

METHODS = ("io", "cot", "bfs", "dfs", "beam", "mcts", "bon")


@dataclass(frozen=True)
class Game24Run:
    """One run's settings; defaults follow Tree of Thoughts (breadth 5, 3 value samples, depth 3)."""

    method: str = "bfs"
    start: int = 900
    end: int = 1000
    seed: int = 0
    breadth: int = 5  # BFS nodes kept per level
    samples: int | None = None  # propose completions per expanded node: 1 few-shot (a list); compact (one step
    # each) 30 for BFS, whose few kept states must each see most of their steps, and 10 for the others
    evaluations: int | None = None  # value samples per node: 3 sampled verdicts, or 20 look-ahead proposals
    k: int = 10  # answers sampled by io, cot and bon
    width: int = 5  # beam width
    iterations: int = 32  # MCTS iterations
    rule: str = "uct"  # MCTS selection: "uct", or "puct" with the proposals' probabilities as priors
    max_tokens_per_problem: int | None = None  # stop a search once it has generated this many tokens
    value: str | None = None  # "probs", "lookahead" (compact default) or "samples" (few-shot default)
    prompts: str = "compact"  # "compact" for the bundled model, "few_shot" for instruction-tuned models
    puzzles: tuple[str, ...] = ()  # given puzzles instead of the index range

    def __post_init__(self) -> None:
        object.__setattr__(self, "puzzles", tuple(format_numbers(as_puzzle(p)) for p in self.puzzles))
        compact = self.prompts == "compact"
        if self.samples is None:
            object.__setattr__(self, "samples", (30 if self.method == "bfs" else 10) if compact else 1)
        if self.value is None:
            object.__setattr__(self, "value", "lookahead" if compact else "samples")
        if self.value == "probs" and self.evaluations is not None:
            raise ValueError("--evaluations does not apply to --value probs (one forward per state, nothing "
                             "sampled); leave it out, or use --value lookahead")
        if self.evaluations is None:
            object.__setattr__(self, "evaluations", 20 if self.value == "lookahead" else 3)
        if self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}; choose one of {', '.join(METHODS)}")
        if not self.puzzles and not 0 <= self.start < NUM_PUZZLES:  # given puzzles replace the range
            raise ValueError(f"--start {self.start} is beyond the data: puzzles are numbered 0..{NUM_PUZZLES - 1}")
        if not self.puzzles and not self.start < self.end <= NUM_PUZZLES:
            raise ValueError(f"--end must be in {self.start + 1}..{NUM_PUZZLES}, got {self.end}")
        if self.prompts not in STYLES:
            raise ValueError(f"--prompts must be one of {', '.join(STYLES)}, got {self.prompts!r}")
        if self.value not in VALUES or (self.value != "samples" and not compact):
            raise ValueError(f"--value must be 'samples' for few-shot prompts, or one of {', '.join(VALUES)} for "
                             f"compact ones; got {self.value!r}")
        for name in ("breadth", "samples", "evaluations", "k", "width", "iterations"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name} must be >= 1, got {getattr(self, name)}")
        if len(set(self.puzzles)) != len(self.puzzles):
            raise ValueError("a --puzzle is given twice; give each puzzle once")
        if self.rule not in ("uct", "puct"):
            raise ValueError(f"--rule must be 'uct' or 'puct', got {self.rule!r}")
        if self.max_tokens_per_problem is not None and self.max_tokens_per_problem < 1:
            raise ValueError(f"--max-tokens-per-problem must be >= 1, got {self.max_tokens_per_problem}")

    def budget(self) -> Budget:
        """The per-puzzle search budget."""
        return Budget(max_generated_tokens=self.max_tokens_per_problem)

    def problems(self) -> list[tuple[int | None, str]]:
        """(dataset index or None, puzzle text) for every puzzle of the run."""
        if self.puzzles:
            return [(None, p) for p in self.puzzles]
        table = load_puzzles()
        return [(i, format_numbers(table[i])) for i in range(self.start, self.end)]

    def task_and_strategy(self) -> tuple[Task, Strategy]:
        m = self.method
        if m in ("io", "cot"):
            return Game24Direct(Game24DirectConfig(style=m, prompts=self.prompts, dedupe=False)), BestOfN(n=self.k)
        if m == "bon":
            return _LogProbCot(Game24DirectConfig(style="cot", prompts=self.prompts, dedupe=False)), BestOfN(n=self.k)
        assert self.value is not None and self.evaluations is not None  # set in __post_init__
        task = Game24(Game24Config(prompts=self.prompts, value=self.value, value_samples=self.evaluations,
                                   lookahead_samples=self.evaluations))
        if m == "bfs":
            return task, BFS(breadth=self.breadth, samples=self.samples, depth=3, evaluations=self.evaluations)
        if m == "dfs":
            return task, DFS(samples=self.samples, depth=3, threshold=0.5, evaluations=self.evaluations)
        if m == "beam":
            return task, Beam(width=self.width, samples=self.samples, score="value", max_steps=3,
                              evaluations=self.evaluations)
        return task, MCTS(iterations=self.iterations, samples=self.samples, max_depth=3, evaluations=self.evaluations,
                          rule=self.rule)


class _LogProbCot(Game24Direct):
    """CoT samples ranked by the model's own sequence log-probability (best-of-N without a checker)."""

    def evaluator(self) -> LogProb:
        return LogProb()

    def check(self, problem: Any, answer: str) -> bool | None:
        return None


def _correct(problem: str, answer: str | None) -> bool:
    return answer is not None and check_answer(answer, as_puzzle(problem)).correct


def game24_problems(run: Game24Run) -> list[Problem]:
    """The run's puzzles as runner problems: id is the dataset index, or the puzzle for given ones."""
    return [Problem(id=text if index is None else str(index), data=(index, text)) for index, text in run.problems()]


def check_prompts_fit(lm: Any, run: Game24Run) -> None:
    """Raise ValueError when a puzzle's prompt, or the tree searches' proposal prompt for its
    first step (the longest they send), leaves no room in the model's context (before any search)."""
    task, _ = run.task_and_strategy()
    for _, text in run.problems():
        prompts = {"prompt": task.prompt(text)}
        if isinstance(task, Game24):
            root = ThoughtTree(prompt=[0]).root
            request = task.request(text, root)
            if isinstance(request, Propose):
                prompts["proposal prompt"] = request.prompt
        for what, prompt in prompts.items():
            size = len(lm.encode(prompt, add_bos=True) if isinstance(prompt, str) else prompt)
            if size >= lm.max_context:
                fix = "use --prompts compact" if run.prompts == "few_shot" else "use a model with a longer context"
                raise ValueError(f"--prompts {run.prompts} --method {run.method}: the {what} of puzzle {text} has "
                                 f"{size} tokens, the model's context is {lm.max_context}; {fix}")


def game24_meta(lm: Any, run: Game24Run) -> dict[str, Any]:
    return {"task": "game24", "search_format": SEARCH_FORMAT_VERSION, "run": asdict(run), **model_meta(lm)}


def game24_solver(lm: Any, run: Game24Run, *, live: bool = False) -> Solve:
    """The function that searches one puzzle and returns its record (a failed search keeps its tree)."""

    def solve(problem: Problem) -> Record:
        index, text = problem.data
        task, strategy = run.task_and_strategy()
        seed = derive_seed(run.seed, text if index is None else index)
        try:
            result = search(task, strategy, lm, problem=text, seed=seed, live=live, budget=run.budget())
            entry = result.to_entry()
        except SearchError as exc:  # keep what was searched; the runner counts the failure
            result = exc.partial_result
            entry = result.to_entry()
            entry["result"]["error"] = str(exc.__cause__ or exc)
        entry["index"] = index
        check = None if result.answer is None else check_answer(result.answer, as_puzzle(text))
        entry["result"]["correct"] = check is not None and check.correct
        entry["result"]["check"] = "no answer" if check is None else check.reason
        if run.method in ("io", "cot", "bon"):
            samples = [{"correct": _correct(text, task.answer(text, n)),
                        "logprob": n.logprob / max(1, len(n.tokens)), "tokens": len(n.tokens)}
                       for n in result.tree.root.children]
            entry["result"]["samples"] = samples
            entry["result"]["sample_accuracy"] = sum(s["correct"] for s in samples) / max(1, len(samples))
        result.tree.release_kv()
        return entry

    return solve


def game24_totals(records: Sequence[Record]) -> dict[str, Any]:
    """Success rate over the finished puzzles, how many of them are held-out test puzzles (900-999,
    in any order), and the mean share of correct samples for io/cot/bon."""
    solved = sum(bool(r["result"].get("correct")) for r in records)
    out: dict[str, Any] = {"success_rate": solved / len(records) if records else 0.0, "solved": solved,
                           "puzzles": len(records),
                           "held_out_puzzles": sum(is_held_out(as_puzzle(r["problem"])) for r in records)}
    accuracies = [r["result"]["sample_accuracy"] for r in records if "sample_accuracy" in r["result"]]
    if accuracies:
        out["average_sample_accuracy"] = sum(accuracies) / len(accuracies)
    return out


def run_game24(lm: Any, run: Game24Run, options: RunOptions | None = None, *, live: bool = False,
               on_record: Callable[[Record, RunFile], str | None] | None = None,
               layout: Layout | None = None) -> RunOutcome:
    """Search every puzzle of ``run`` with the shared runner (split over ``layout``'s ranks when given)."""
    from .data_parallel import run_problem_set

    options = options if options is not None else RunOptions(progress=False)
    return run_problem_set(game24_problems(run), game24_solver(lm, run, live=live), game24_meta(lm, run), options,
                           layout=layout, totals=game24_totals, on_record=on_record)
