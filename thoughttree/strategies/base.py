"""The strategy protocol: step-shaped searches that never call the model themselves.

Each round the driver asks ``strategy.step()`` for a :class:`Step` (which nodes to expand, how
many children each, which nodes to evaluate), submits the work as one batch, and hands the
outcome to ``strategy.update``. Strategies keep their state in the tree (statuses, values,
visits, metadata), so a saved tree resumes where it stopped: ``start`` rebuilds from it.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Sequence

from ..tree import Node, Status

if TYPE_CHECKING:
    from ..tasks import Evaluator, Task
    from ..tree import ThoughtTree


@dataclass(frozen=True)
class SearchContext:
    """What a strategy may read about the search it runs in."""

    task: Task
    problem: Any
    evaluator: Evaluator
    seed: int

    @property
    def bounds(self) -> tuple[float, float]:
        return self.evaluator.bounds


@dataclass(frozen=True)
class Step:
    """One round's work.

    ``expand``: nodes to give ``n`` children each. ``mode`` is "sample" (the task's request: a
    sampled continuation or a propose prompt) or "top_tokens" (the model's ``n`` most likely next
    tokens, one child each: token-level beam search). ``evaluate_children``: score the new children
    with the task's evaluator. ``evaluate``: further nodes to score in the same batch.
    ``evaluations`` overrides the evaluator's samples per node; ``evaluator`` replaces the task's
    evaluator for this round (e.g. MCTS rollouts).
    """

    expand: Sequence[Node] = ()
    n: int = 1
    mode: str = "sample"
    evaluate_children: bool = True
    evaluate: Sequence[Node] = ()
    evaluations: int | None = None
    evaluator: Evaluator | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "expand", tuple(self.expand))
        object.__setattr__(self, "evaluate", tuple(self.evaluate))
        if self.mode not in ("sample", "top_tokens"):
            raise ValueError(f"Step mode must be 'sample' or 'top_tokens', got {self.mode!r}")
        if not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"Step n must be an integer >= 1, got {self.n!r}")


@dataclass(frozen=True)
class Outcome:
    """What a round did: the nodes expanded, their new children (rejected ones are pruned), the nodes scored."""

    expanded: tuple[Node, ...]
    children: tuple[tuple[Node, ...], ...]
    evaluated: tuple[Node, ...]

    def new_nodes(self) -> list[Node]:
        return [c for kids in self.children for c in kids]


class Strategy(Protocol):
    """What the driver needs from a strategy."""

    config: Any

    def start(self, tree: ThoughtTree, ctx: SearchContext) -> None:
        """Begin on ``tree`` (fresh, or loaded from a run file), rebuilding any state from it."""
        ...

    def step(self) -> Step | None:
        """The next round's work, or None when the search is finished."""
        ...

    def update(self, outcome: Outcome) -> None:
        """Learn from the round's results (values are already on the nodes)."""
        ...

    def best(self) -> Node | None:
        """The node whose path is the search's answer."""
        ...


class StrategyBase:
    """Shared plumbing: options into the frozen ``Config``, tree access and the default ``best``.

    Subclasses set ``Config`` (a frozen dataclass) and write ``step`` and ``update``.
    """

    Config: ClassVar[type]
    config: Any

    def __init__(self, config: Any = None, **options: Any) -> None:
        if config is not None and options:
            raise ValueError(f"{type(self).__name__}: pass either a config or options, not both")
        if config is None:
            config = _build_config(type(self).__name__, self.Config, options)
        elif not isinstance(config, self.Config):
            raise TypeError(f"{type(self).__name__} needs a {self.Config.__name__}, got {type(config).__name__}")
        self.config = config
        self._tree: ThoughtTree | None = None
        self._ctx: SearchContext | None = None

    def __repr__(self) -> str:
        fields = ", ".join(f"{f.name}={getattr(self.config, f.name)!r}" for f in dataclasses.fields(self.config))
        return f"{type(self).__name__}({fields})"

    def start(self, tree: ThoughtTree, ctx: SearchContext) -> None:
        self._tree, self._ctx = tree, ctx

    @property
    def tree(self) -> ThoughtTree:
        if self._tree is None:
            raise RuntimeError(f"{type(self).__name__} has not been started; run it through thoughttree.search")
        return self._tree

    @property
    def ctx(self) -> SearchContext:
        if self._ctx is None:
            raise RuntimeError(f"{type(self).__name__} has not been started; run it through thoughttree.search")
        return self._ctx

    def update(self, outcome: Outcome) -> None:
        """Most strategies keep all their state in the tree and need no update."""

    def best(self) -> Node | None:
        return best_node(self.tree)

    def describe(self) -> dict[str, Any]:
        from ..tasks.base import config_dict

        return {"class": type(self).__name__, "config": config_dict(self.config)}

    # -- helpers for subclasses --------------------------------------------------------------
    def solved(self) -> bool:
        return any(n.status is Status.SOLVED for n in self.tree.nodes)

    def pending(self) -> list[Node]:
        """Live non-root nodes still waiting for a value (a search stopped between expand and evaluate)."""
        return [
            n for n in self.tree.nodes
            if n.value is None and n.parent is not None and n.status in (Status.OPEN, Status.TERMINAL)
        ]


def _build_config(owner: str, config_type: type, options: dict[str, Any]) -> Any:
    known = [f.name for f in dataclasses.fields(config_type)]
    unknown = [k for k in options if k not in known]
    if unknown:
        hints = []
        for k in unknown:
            close = difflib.get_close_matches(k, known, n=1)
            hints.append(f"{k!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise ValueError(f"{owner} has no option {', '.join(hints)}; its options are: {', '.join(known)}")
    return config_type(**options)


def value_key(node: Node) -> float:
    """A node's value for sorting; unevaluated nodes sort last."""
    return -math.inf if node.value is None else node.value


def best_node(tree: ThoughtTree) -> Node | None:
    """The highest-valued solved node; else the highest-valued terminal one; else the highest-valued
    live node, deepest first on ties (ids break remaining ties, lowest first)."""
    for statuses in ((Status.SOLVED,), (Status.TERMINAL,), (Status.OPEN, Status.EXPANDED)):
        pool = [n for n in tree.nodes if n.status in statuses and n.parent is not None]
        if pool:
            return min(pool, key=lambda n: (-value_key(n), -n.depth, n.id))
    return tree.roots[0] if tree.roots else None


def positive_int(value: Any, name: str, owner: str, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{owner}: {name} must be an integer >= 1, got {value!r}")


def choose(options: str, value: str, name: str, owner: str) -> None:
    allowed = options.split("|")
    if value not in allowed:
        raise ValueError(f"{owner}: {name} must be one of {', '.join(map(repr, allowed))}, got {value!r}")


def sorted_by_value(nodes: Sequence[Node]) -> list[Node]:
    """Best first: value descending, id ascending."""
    return sorted(nodes, key=lambda n: (-value_key(n), n.id))
