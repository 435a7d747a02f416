"""Game of 24 as a search task: propose steps, value states, check answers exactly.

A node below the root is one step line ``a op b = c (left: ...)``; its state is the numbers
left. Children come from a propose prompt of the node's state (invalid steps rejected, and
steps that leave the same numbers as an earlier sibling dropped as duplicates); states are
scored by a value prompt (sure / likely / impossible, as in Tree of
Thoughts), or by looking one step ahead: a state of three or four numbers is worth the best
value among the states its sampled next steps leave. A node with one number left is terminal,
and its path composes into an answer expression that the exact checker verifies.

Two prompt styles: ``"compact"``, the one-line formats the bundled model is trained on (one
step per sample), and ``"few_shot"``, Tree-of-Thoughts-style few-shot prompts for
instruction-tuned models (each completion lists several steps; values are sampled verdicts).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Hashable, Sequence

from ...config import Sampling
from ...tree import Node
from ..base import Propose, Request, Task, TaskConfig
from ..evaluate import Evaluator, LabelProbs, Lookahead, ValuePrompt, Verifier
from .arith import check_answer, format_numbers
from .formats import VALUE_OF_LABEL, cot_prompt, io_prompt, parse_cot, parse_io, parse_propose, path_answer
from .formats import propose_prompt, value_prompt
from .prompts import few_shot_cot_prompt, few_shot_io_prompt, few_shot_propose_prompt, few_shot_value_prompt
from .puzzles import parse_puzzle
from .steps import make_state, parse_step

Puzzle = tuple[int, ...]
STYLES = ("compact", "few_shot")
VALUES = ("probs", "lookahead", "samples")


def _check_style(style: str) -> None:
    if style not in STYLES:
        raise ValueError(f"Game24 prompts must be one of {', '.join(STYLES)}, got {style!r}")


@dataclass(frozen=True)
class Game24Config(TaskConfig):
    """Prompt style, sampling of proposals, and how states are valued.

    ``value`` "probs" scores a state by the expected label score under the value prompt's label
    probabilities (one forward, no noise; compact prompts only, whose labels are single tokens);
    "lookahead" (compact only) scores a state of three or four numbers by the best "probs" value
    among the states that ``lookahead_samples`` proposals from it leave, and smaller states by
    "probs" directly; "samples" averages ``value_samples`` sampled verdicts as Tree of Thoughts
    does. ``expansion_samples`` is the search's proposals per expansion, decoded by the look-ahead
    when more than ``lookahead_samples`` (see :class:`~thoughttree.tasks.Lookahead`). Sampling
    settings left as None take the style's defaults.
    """

    prompts: str = "compact"
    sampling: Sampling | None = None  # type: ignore[assignment]
    value: str = "lookahead"
    value_sampling: Sampling | None = None
    value_samples: int = 3
    lookahead_samples: int = 20
    expansion_samples: int | None = None

    def __post_init__(self) -> None:
        _check_style(self.prompts)
        if self.value not in VALUES:
            raise ValueError(f"Game24 value must be one of {', '.join(VALUES)}, got {self.value!r}")
        if self.prompts == "few_shot" and self.value != "samples":
            raise ValueError("few-shot Game24 prompts end in a free-text verdict; use value='samples'")
        for name in ("value_samples", "lookahead_samples", "expansion_samples"):
            if name == "expansion_samples" and self.expansion_samples is None:
                continue
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"Game24 {name} must be an integer >= 1, got {getattr(self, name)!r}")
        compact = self.prompts == "compact"
        if self.sampling is None:
            default = (Sampling(max_tokens=32, temperature=1.0, stop=("\n",)) if compact
                       else Sampling(max_tokens=200, temperature=0.7, stop=("\n\n", "Numbers:")))
            object.__setattr__(self, "sampling", default)
        if self.value_sampling is None:
            default = (Sampling(max_tokens=6, temperature=0.7, stop=("\n",)) if compact
                       else Sampling(max_tokens=120, temperature=0.7, stop=("Numbers:",)))
            object.__setattr__(self, "value_sampling", default)


def as_puzzle(problem: str | Sequence[int]) -> Puzzle:
    """A puzzle from ``"4 5 6 10"`` or a sequence of four integers (clear error otherwise)."""
    if isinstance(problem, str):
        return parse_puzzle(problem)
    if not isinstance(problem, (list, tuple)):
        raise ValueError(f"a Game of 24 problem is four numbers, as \"4 5 6 10\" or [4, 5, 6, 10]; got {problem!r}")
    return parse_puzzle(" ".join(str(x) for x in problem))


def node_state(puzzle: Puzzle, node: Node) -> tuple[Fraction, ...]:
    """Numbers left at ``node`` (the puzzle at the root)."""
    if node.is_root:
        return make_state(puzzle)
    return parse_step(node.text.strip()).left


def node_steps(node: Node) -> list[str]:
    return [n.text.strip() for n in node.path()[1:]]


class Game24(Task):
    """Tree-of-Thoughts Game of 24 (see the module docstring for the two prompt styles)."""

    def __init__(self, config: Game24Config | None = None) -> None:
        self.config = config or Game24Config()

    def prompt(self, problem: str | Sequence[int]) -> str:
        return f"{format_numbers(make_state(as_puzzle(problem)))}\n"

    def request(self, problem: str | Sequence[int], node: Node) -> Request:
        state = node_state(as_puzzle(problem), node)
        text = propose_prompt(state) if self.config.prompts == "compact" else few_shot_propose_prompt(state)
        return Propose(text, self.config.sampling)

    def split(self, problem: str | Sequence[int], parent: Node, completion: str) -> list[str]:
        lines = [line.strip() for line in completion.split("\n") if line.strip()]
        if self.config.prompts == "compact":
            lines = lines[:1]  # one step per sample
        return [line + "\n" for line in lines]

    def accept(self, problem: str | Sequence[int], parent: Node, text: str) -> bool:
        return parse_propose(text, node_state(as_puzzle(problem), parent)).valid

    def dedupe_key(self, problem: str | Sequence[int], parent: Node, text: str) -> Hashable:
        """Steps that leave the same numbers (``4 + 5`` and ``5 + 4``) are one child: same future."""
        try:
            return parse_step(text.strip()).left
        except ValueError:
            return text

    def evaluator(self) -> Evaluator:
        compact = self.config.prompts == "compact"

        def prompt(problem: str | Sequence[int], node: Node) -> str:
            state = node_state(as_puzzle(problem), node)
            return value_prompt(state) if compact else few_shot_value_prompt(state)

        probs = LabelProbs(prompt=prompt, labels=VALUE_OF_LABEL)
        if self.config.value == "probs":
            return probs
        if self.config.value == "lookahead":
            return Lookahead(expand=self._lookahead_prompt, child=self._lookahead_child, leaf=probs,
                             samples=self.config.lookahead_samples, sampling=self.config.sampling,
                             expansion_samples=self.config.expansion_samples)
        return ValuePrompt(
            prompt=prompt, labels=VALUE_OF_LABEL, samples=self.config.value_samples, sampling=self.config.value_sampling
        )

    def _lookahead_prompt(self, problem: str | Sequence[int], node: Node) -> str | None:
        """Propose from states of three or four numbers; two are one step from the end and valued directly."""
        state = node_state(as_puzzle(problem), node)
        return propose_prompt(state) if len(state) > 2 else None

    def _lookahead_child(self, problem: str | Sequence[int], node: Node, completion: str) -> str | None:
        check = parse_propose(completion, node_state(as_puzzle(problem), node))
        return value_prompt(check.state) if check.valid and check.state is not None else None

    def is_terminal(self, problem: str | Sequence[int], node: Node) -> bool:
        return not node.is_root and len(node_state(as_puzzle(problem), node)) == 1

    def answer(self, problem: str | Sequence[int], node: Node) -> str | None:
        if not self.is_terminal(problem, node):
            return None
        try:
            return path_answer(as_puzzle(problem), node_steps(node))
        except ValueError:
            return None

    def check(self, problem: str | Sequence[int], answer: str) -> bool | None:
        return check_answer(answer, as_puzzle(problem)).correct


@dataclass(frozen=True)
class Game24DirectConfig(TaskConfig):
    """``style`` "io" (the answer at once) or "cot" (three steps, then the answer); ``prompts`` as Game24."""

    style: str = "io"
    prompts: str = "compact"
    sampling: Sampling | None = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.style not in ("io", "cot"):
            raise ValueError(f"Game24Direct style must be 'io' or 'cot', got {self.style!r}")
        _check_style(self.prompts)
        if self.sampling is None:
            # Compact completions end with EOS; few-shot ones run on into the next example.
            stop = () if self.prompts == "compact" else (("\n",) if self.style == "io" else ("\nInput:",))
            object.__setattr__(self, "sampling", Sampling(max_tokens=160, temperature=1.0, stop=stop))


class Game24Direct(Task):
    """The baselines: sample whole answers (IO) or step-by-step chains (CoT); the checker scores them."""

    def __init__(self, config: Game24DirectConfig | None = None) -> None:
        self.config = config or Game24DirectConfig()

    def prompt(self, problem: str | Sequence[int]) -> str:
        puzzle = as_puzzle(problem)
        if self.config.prompts == "few_shot":
            return few_shot_io_prompt(puzzle) if self.config.style == "io" else few_shot_cot_prompt(puzzle)
        return io_prompt(puzzle) if self.config.style == "io" else cot_prompt(puzzle)

    def evaluator(self) -> Evaluator:
        def score(problem: str | Sequence[int], node: Node) -> float:
            answer = self.answer(problem, node)
            return 1.0 if answer is not None and self.check(problem, answer) else 0.0

        return Verifier(score)

    def is_terminal(self, problem: str | Sequence[int], node: Node) -> bool:
        return not node.is_root

    def answer(self, problem: str | Sequence[int], node: Node) -> str | None:
        if node.is_root:
            return None
        if self.config.style == "io":
            line = parse_io(node.text)
            if line.lower().startswith("answer:"):
                line = line[len("answer:"):].strip()
            return line or None
        return parse_cot(node.text).answer

    def check(self, problem: str | Sequence[int], answer: str) -> bool | None:
        return check_answer(answer, as_puzzle(problem)).correct
