"""What a search needs to know about a problem family: the Task base class, the Evaluator
protocol it hands out, and the checks both share.

A task says how to prompt for the root, how to ask for a node's children, which children to
keep, how to evaluate nodes, when a node is finished and what its answer is. The search driver
calls these methods; a task never calls the model itself.

Two ways to ask for children:

- :class:`Sample`: children continue the node's own path (each child forks the node's KV);
  this is the usual "sample the next thought" expansion.
- :class:`Propose`: a separate prompt is completed ``n`` times (as Tree of Thoughts' propose
  prompt) and :meth:`Task.split` turns each completion into child texts.

A minimal task::

    @dataclass(frozen=True)
    class ArithConfig(TaskConfig):
        sampling: Sampling = Sampling(max_tokens=32, stop="\\n")

    class Arith(Task):
        def __init__(self, config: ArithConfig | None = None) -> None:
            self.config = config or ArithConfig()

        def prompt(self, problem: str) -> str:
            return f"Question: {problem}\\nAnswer step by step.\\n"

        def evaluator(self) -> Evaluator:
            return ValuePrompt(prompt=lambda problem, node: ..., labels={"good": 1.0, "bad": 0.0})

        def is_terminal(self, problem: str, node: Node) -> bool:
            return "answer:" in node.text
"""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Hashable, Protocol, Sequence

from ..config import Sampling
from ..tree import derive_seed

if TYPE_CHECKING:
    from ..tree import Node


class TaskError(ValueError):
    """A task returned something the search cannot use (a malformed prompt, a bad value)."""


@dataclass(frozen=True)
class TaskConfig:
    """Settings every task has; subclass it (frozen) to add a task's own.

    ``sampling`` is the default for asking children; ``dedupe`` drops a child whose
    :meth:`Task.dedupe_key` (by default its text) equals an earlier sibling's (it is kept in the
    tree, pruned, with ``metadata["rejected"]``).
    """

    sampling: Sampling = field(default_factory=lambda: Sampling(max_tokens=64, temperature=0.7))
    dedupe: bool = True


class Evaluator(Protocol):
    """Scores nodes. ``bounds`` are the lowest and highest values it gives (may be infinite)."""

    @property
    def bounds(self) -> tuple[float, float]: ...

    def evaluate(
        self, lm: Any, problem: Any, nodes: Sequence[Node], *, seed: int, samples: int | None = None
    ) -> list[float]:
        """One value per node, all model work in one batched call. ``samples`` overrides the default count."""
        ...


@dataclass(frozen=True)
class Sample:
    """Children are sampled continuations of the node's own path."""

    sampling: Sampling


@dataclass(frozen=True)
class Propose:
    """Children come from completions of ``prompt``, split by :meth:`Task.split`."""

    prompt: str | tuple[int, ...]
    sampling: Sampling


Request = Sample | Propose


def proposal_seed(tree_seed: int, sampling: Sampling, node: Node, sample: int | None) -> int:
    """The seed of completion ``sample`` (None: of the one distinct request) of ``node``'s next
    :class:`Propose` expansion under ``sampling``, in a tree seeded ``tree_seed``.

    An evaluator that completes a node's propose prompt under these seeds (a look-ahead) decodes
    what expanding the node would: the search then takes those completions as the children.
    """
    return derive_seed(
        tree_seed, "propose", sampling.seed, node.position, len(node.children), "distinct" if sample is None else sample
    )


class Task(ABC):
    """Base class of search tasks. Subclasses set ``self.config`` to a frozen dataclass."""

    config: Any = TaskConfig()

    @abstractmethod
    def prompt(self, problem: Any) -> str | Sequence[int]:
        """The root prompt (text, or token ids with BOS) for ``problem``."""

    @abstractmethod
    def evaluator(self) -> Evaluator:
        """How nodes are scored (see :mod:`thoughttree.tasks.evaluate`)."""

    def request(self, problem: Any, node: Node) -> Request:
        """How to ask for children of ``node``; by default continue its path with ``config.sampling``."""
        return Sample(self.config.sampling)

    def split(self, problem: Any, parent: Node, completion: str) -> list[str]:
        """Child texts in one :class:`Propose` completion; by default its non-empty lines."""
        return [line + "\n" for line in completion.split("\n") if line.strip()]

    def accept(self, problem: Any, parent: Node, text: str) -> bool:
        """Whether a child text is a valid thought under ``parent`` (rejected ones are pruned)."""
        return True

    def dedupe_key(self, problem: Any, parent: Node, text: str) -> Hashable:
        """What makes two accepted sibling texts duplicates under ``config.dedupe``; by default the text."""
        return text

    def is_terminal(self, problem: Any, node: Node) -> bool:
        """Whether ``node`` finishes a solution attempt (it is then never expanded)."""
        return node.metadata.get("finish_reason") == "eos"

    def answer(self, problem: Any, node: Node) -> str | None:
        """The answer a node's path gives, or None when it gives none."""
        return None

    def check(self, problem: Any, answer: str) -> bool | None:
        """True/False when the answer can be verified during the search, None when it cannot."""
        return None

    def describe(self) -> dict[str, Any]:
        """Class name and config as plain data, for run files."""
        return {"class": type(self).__qualname__, "module": type(self).__module__, "config": config_dict(self.config)}


def config_dict(config: Any) -> dict[str, Any]:
    """A frozen dataclass config as JSON-ready data (tuples become lists)."""
    if config is None:
        return {}
    if not dataclasses.is_dataclass(config):
        raise TaskError(f"config must be a dataclass instance, got {type(config).__name__}")
    if isinstance(config, type):
        raise TaskError(f"config must be a dataclass instance, got the class {config.__name__}")
    return _jsonable(dataclasses.asdict(config))


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if callable(value):
        return getattr(value, "__qualname__", repr(value))
    return repr(value)


def check_prompt(value: Any, what: str) -> str | list[int]:
    """``value`` as a prompt (text or token ids), or a TaskError saying what is wrong."""
    if isinstance(value, str):
        if not value:
            raise TaskError(f"{what} returned an empty prompt; return non-empty text or token ids")
        return value
    if isinstance(value, (list, tuple)) and value and all(isinstance(t, int) and t >= 0 for t in value):
        return [int(t) for t in value]
    raise TaskError(
        f"{what} returned {type(value).__name__} {str(value)[:60]!r}; a prompt must be non-empty text "
        "or a non-empty list of non-negative token ids"
    )


def need_method(lm: Any, method: str, evaluator: str) -> Callable[..., Any]:
    """``lm``'s method ``method``, or a TaskError saying that ``evaluator`` needs it."""
    fn = getattr(lm, method, None)
    if fn is None:
        raise TaskError(f"{evaluator} needs lm.{method}(...), which {type(lm).__name__} does not have")
    return fn


def check_samples(samples: int, what: str) -> int:
    """``samples`` when it is a count of at least one, else a ValueError naming ``what``."""
    if not isinstance(samples, int) or samples < 1:
        raise ValueError(f"{what}: samples must be an integer >= 1, got {samples!r}")
    return samples


def finite(value: Any, what: str) -> float:
    """``value`` as a finite float, or a TaskError saying that ``what`` returned something else."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise TaskError(f"{what} returned {value!r}; it must return a number") from None
    if not math.isfinite(out):
        raise TaskError(f"{what} returned {out}; values must be finite numbers")
    return out
