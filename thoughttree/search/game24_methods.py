"""A Game of 24 run: puzzles, one method, the search per puzzle and the totals, on the shared runner.

Methods: ``io`` and ``cot`` sample k whole answers (IO directly, CoT step by step) and report
both "any of k correct" (the success rate; the checker picks) and the average share of correct
samples; ``bon`` samples k CoT answers and keeps the one with the highest sequence
log-probability (no checker in the choice); ``bfs``, ``dfs``, ``beam`` and ``mcts`` search the
propose/value tree. Every method may use the exact checker on a finished answer.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

from .runner import Problem, Record, RunOptions, RunOutcome, Solve, branch_room, model_meta
from .driver import Budget, SearchError, search
from .results import SEARCH_FORMAT_VERSION, SearchResult
from ..config import Sampling
from ..strategies import BFS, DFS, MCTS, Beam, BestOfN, Strategy
from ..tasks.base import Propose, Task
from ..tasks.evaluate import LogProb
from ..tasks.game24.arith import check_answer, format_numbers
from ..tasks.game24.puzzles import NUM_PUZZLES, is_held_out, is_validation, load_puzzles
from ..tasks.game24.split import RANGES
from ..tasks.game24.task import STYLES, VALUES, Game24, Game24Config, Game24Direct, Game24DirectConfig, as_puzzle
from ..tree import ThoughtTree, derive_seed
from ..tree.serialize import RunFile

if TYPE_CHECKING:
    from .data_parallel import Layout

METHODS = ("io", "cot", "bfs", "dfs", "beam", "mcts", "bon")


# The searches whose default proposals are distinct thoughts: on the validation puzzles distinct
# proposals solved more than sampled ones for each of them (benchmarks/game24_sweep.py, BENCHMARKS.md).
VALIDATED_DISTINCT = ("bfs", "beam", "mcts")


@dataclass(frozen=True)
class Game24Run:
    """One run's settings; defaults follow Tree of Thoughts (breadth 5, 3 value samples, depth 3)."""

    method: str = "bfs"
    start: int = 900
    end: int = 1000
    seed: int = 0
    breadth: int = 5  # BFS nodes kept per level
    samples: int | None = None  # propose completions per expanded node: 1 few-shot (a list); compact (one step
    # each) 23 distinct (30 sampled) for BFS, whose few kept states must each see most of their steps; 20 distinct
    # (10 sampled) for MCTS and beam
    evaluations: int | None = None  # value samples per node: 3 sampled verdicts, or 20 look-ahead proposals
    k: int = 10  # answers sampled by io, cot and bon
    width: int = 5  # beam width
    iterations: int = 32  # MCTS iterations
    rule: str | None = None  # MCTS selection: "uct", or "puct" with the proposals' probabilities as priors
    # (None: puct with distinct proposals, whose inclusion mass makes the priors, else uct)
    max_tokens_per_problem: int | None = None  # the token budget: generated tokens per puzzle, all searches
    restarts: bool = True  # with a token budget, a search that ends unsolved starts again on what is left
    distinct: bool | None = None  # proposals (and look-ahead proposals, io/cot answers) sampled without
    # replacement (None: on for the compact tree searches of VALIDATED_DISTINCT, off otherwise)
    temperature: float | None = None  # proposal / answer temperature (None: the prompt style's default)
    c: float | None = None  # MCTS exploration constant (None: MCTS's default)
    widening: float | None = None  # MCTS progressive widening exponent (None: one expansion per node)
    value: str | None = None  # "probs", "lookahead" (compact default) or "samples" (few-shot default)
    prompts: str = "compact"  # "compact" for the bundled model, "few_shot" for instruction-tuned models
    puzzles: tuple[str, ...] = ()  # given puzzles instead of the index range
    held_out: str | None = None  # "val" or "test": that held-out range of puzzles instead of start..end
    indices: tuple[int, ...] = ()  # given dataset indices instead of the index range (a split's)

    def __post_init__(self) -> None:
        object.__setattr__(self, "puzzles", tuple(format_numbers(as_puzzle(p)) for p in self.puzzles))
        compact = self.prompts == "compact"
        if self.distinct is None:
            object.__setattr__(self, "distinct", compact and self.method in VALIDATED_DISTINCT)
        if self.samples is None:
            per_node = (23 if self.distinct else 30) if self.method == "bfs" else (20 if self.distinct else 10)
            object.__setattr__(self, "samples", per_node if compact else 1)
        if self.rule is None:
            object.__setattr__(self, "rule", "puct" if self.distinct else "uct")
        if self.value is None:
            object.__setattr__(self, "value", "lookahead" if compact else "samples")
        if self.value == "probs" and self.evaluations is not None:
            raise ValueError("--evaluations does not apply to --value probs (one forward per state, nothing "
                             "sampled); leave it out, or use --value lookahead")
        if self.evaluations is None:
            object.__setattr__(self, "evaluations", 20 if self.value == "lookahead" else 3)
        if self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}; choose one of {', '.join(METHODS)}")
        object.__setattr__(self, "indices", tuple(int(i) for i in self.indices))
        if self.puzzles and self.indices:
            raise ValueError("give puzzles or dataset indices, not both")
        if any(not 0 <= i < NUM_PUZZLES for i in self.indices) or len(set(self.indices)) != len(self.indices):
            raise ValueError(f"indices must be distinct puzzle numbers in 0..{NUM_PUZZLES - 1}")
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
        if self.held_out is not None and self.held_out not in RANGES:
            raise ValueError(f"--range must be one of {', '.join(sorted(RANGES))}, got {self.held_out!r}")
        if self.held_out is not None and self.puzzles:
            raise ValueError("--range and --puzzle both choose the puzzles; give one of them")
        if self.rule not in ("uct", "puct"):
            raise ValueError(f"--rule must be 'uct' or 'puct', got {self.rule!r}")
        if self.max_tokens_per_problem is not None and self.max_tokens_per_problem < 1:
            raise ValueError("--token-budget (--max-tokens-per-problem) must be >= 1, "
                             f"got {self.max_tokens_per_problem}")
        if self.temperature is not None and not self.temperature >= 0:
            raise ValueError(f"--temperature must be >= 0, got {self.temperature}")
        if self.c is not None and not self.c >= 0:
            raise ValueError(f"--c must be >= 0, got {self.c}")
        if self.widening is not None and not 0 < self.widening <= 1:
            raise ValueError(f"--widening must be in (0, 1], got {self.widening}")
        for name in ("c", "widening"):
            if getattr(self, name) is not None and self.method != "mcts":
                raise ValueError(f"--{name} applies to --method mcts only")

    def budget(self, spent: int = 0) -> Budget:
        """The budget of a puzzle's next search after ``spent`` generated tokens."""
        left = None if self.max_tokens_per_problem is None else max(1, self.max_tokens_per_problem - spent)
        return Budget(max_generated_tokens=left)

    def sampling(self, default: Sampling | None) -> Sampling:
        """``default`` (a task config's, filled in by its __post_init__) with the run's temperature
        and distinct setting."""
        assert default is not None and self.distinct is not None  # set in __post_init__
        temperature = default.temperature if self.temperature is None else self.temperature
        return dataclasses.replace(default, temperature=temperature, distinct=self.distinct)

    def problems(self) -> list[tuple[int | None, str]]:
        """(dataset index or None, puzzle text) for every puzzle of the run."""
        if self.puzzles:
            return [(None, p) for p in self.puzzles]
        table = load_puzzles()
        if self.held_out is not None:
            indices: Sequence[int] = RANGES[self.held_out].indices
        else:
            indices = self.indices or range(self.start, self.end)
        return [(i, format_numbers(table[i])) for i in indices]

    def task_and_strategy(self) -> tuple[Task, Strategy]:
        m = self.method
        if m in ("io", "cot", "bon"):
            direct = Game24DirectConfig(style="cot" if m == "bon" else m, prompts=self.prompts, dedupe=False)
            direct = dataclasses.replace(direct, sampling=self.sampling(direct.sampling))
            return (_LogProbCot(direct) if m == "bon" else Game24Direct(direct)), BestOfN(n=self.k)
        assert self.value is not None and self.evaluations is not None  # set in __post_init__
        # With distinct proposals the look-ahead decodes as many as an expansion asks for, so that
        # expanding a valued state takes them instead of decoding a larger request again.
        config = Game24Config(prompts=self.prompts, value=self.value, value_samples=self.evaluations,
                              lookahead_samples=self.evaluations,
                              expansion_samples=self.samples if self.distinct else None)
        task = Game24(dataclasses.replace(config, sampling=self.sampling(config.sampling)))
        if m == "bfs":
            return task, BFS(breadth=self.breadth, samples=self.samples, depth=3, evaluations=self.evaluations)
        if m == "dfs":
            return task, DFS(samples=self.samples, depth=3, threshold=0.5, evaluations=self.evaluations)
        if m == "beam":
            return task, Beam(width=self.width, samples=self.samples, score="value", max_steps=3,
                              evaluations=self.evaluations)
        tuned = {k: v for k, v in (("c", self.c), ("widening", self.widening)) if v is not None}
        return task, MCTS(iterations=self.iterations, samples=self.samples, max_depth=3, evaluations=self.evaluations,
                          rule=self.rule, **tuned)


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


def _branches(run: Game24Run) -> tuple[int, str, dict[str, int]]:
    """The most branches one expansion of ``run``'s search samples at once, what gives that number,
    and the options it is the product of."""
    if run.method in ("io", "cot", "bon"):
        return run.k, "--k", {"k": run.k}
    assert run.samples is not None  # set in __post_init__
    if run.method == "bfs":
        return run.breadth * run.samples, "--breadth x --samples", {"breadth": run.breadth, "samples": run.samples}
    if run.method == "beam":
        return run.width * run.samples, "--width x --samples", {"width": run.width, "samples": run.samples}
    return run.samples, "--samples", {"samples": run.samples}


def check_sizes_fit(lm: Any, run: Game24Run) -> None:
    """ValueError, before any search, when one expansion would sample more branches than the
    model's KV pool can hold next to the longest prompt: each branch of up to ``max_tokens`` new
    tokens keeps pages of its own. The message gives the largest value that fits. A remote model
    (no KV pool here) is the server's business."""
    if getattr(lm, "kv", None) is None:
        return
    task, _ = run.task_and_strategy()
    longest = max(len(lm.encode(task.prompt(text), add_bos=True)) for _, text in run.problems())
    room = branch_room(lm, longest, task.config.sampling.max_tokens)
    assert room is not None
    free, tokens, per_branch, fits = room.free, room.tokens, room.per_branch, room.fits
    count, what, factors = _branches(run)
    if count <= fits:
        return
    if len(factors) == 1:
        fix = f"the largest {what} that fits is {fits}"
    else:
        others = [f"--{name} {fits // (count // value)}" for name, value in factors.items() if fits // (count // value)]
        fix = f"{what} must be at most {fits}" + (f" (with the other as given: {', '.join(others)})" if others else "")
    raise ValueError(f"{what} = {count} branches per expansion, each of up to {tokens} "
                     f"tokens, need {count * per_branch} KV pages; the model's KV pool holds {free} beside the "
                     f"prompt; {fix}")


def game24_meta(lm: Any, run: Game24Run) -> dict[str, Any]:
    return {"task": "game24", "search_format": SEARCH_FORMAT_VERSION, "run": asdict(run), **model_meta(lm)}


def game24_solver(lm: Any, run: Game24Run, *, live: bool = False) -> Solve:
    """The function that searches one puzzle and returns its record (a failed search keeps its tree)."""

    def solve(problem: Problem) -> Record:
        index, text = problem.data
        seed = derive_seed(run.seed, text if index is None else index)
        spent, searches = 0, 0
        summed: dict[str, float] = {}  # counters of every search of the puzzle
        result: SearchResult | None = None
        while True:  # with a token budget, unsolved searches start again (fresh seeds) until it is spent
            task, strategy = run.task_and_strategy()
            if result is not None:  # the search before this one, which did not solve the puzzle
                result.tree.release_kv()
            try:
                this_seed = derive_seed(seed, searches) if searches else seed
                result = search(task, strategy, lm, problem=text, seed=this_seed, live=live, budget=run.budget(spent))
                failed = None
            except SearchError as exc:  # keep what was searched; the runner counts the failure
                result, failed = exc.partial_result, str(exc.__cause__ or exc)
            for key, value in result.statistics.to_dict().items():
                if key != "per_round":
                    summed[key] = summed.get(key, 0) + value
            spent += result.statistics.generated_tokens
            searches += 1
            budget = run.max_tokens_per_problem
            if (failed or result.solved or budget is None or not run.restarts or spent >= budget
                    or result.statistics.generated_tokens == 0 or run.method in ("io", "cot", "bon")):
                break
        entry = result.to_entry()
        if failed:
            entry["result"]["error"] = failed
        entry["result"]["searches"] = searches
        entry["result"]["statistics"].update(summed)  # per_round stays the last search's
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
    """Success rate over the finished puzzles, how many of them are held-out test puzzles (900-999)
    and validation puzzles (850-899, 1000-1049), in any order, and the mean share of correct samples
    for io/cot/bon."""
    solved = sum(bool(r["result"].get("correct")) for r in records)
    out: dict[str, Any] = {"success_rate": solved / len(records) if records else 0.0, "solved": solved,
                           "puzzles": len(records),
                           "held_out_puzzles": sum(is_held_out(as_puzzle(r["problem"])) for r in records),
                           "validation_puzzles": sum(is_validation(as_puzzle(r["problem"])) for r in records)}
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
