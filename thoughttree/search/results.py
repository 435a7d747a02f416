"""What a search returns and how it is saved: statistics, the result, run files.

A result saves as a :class:`~thoughttree.tree.serialize.RunFile` whose ``meta`` names the task
and strategy (class and config), the seed, the budget and this module's format version; its one
problem entry holds the tree and the result (answer, best and solution node ids, statistics).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..tree import Node, Status, ThoughtTree
from ..tree.serialize import RunFile, RunFileError, load_run, tree_from_dict, tree_to_dict

SEARCH_FORMAT_VERSION = 1
_RESULT_FIELDS = ("answer", "best", "solutions", "stopped", "statistics")
COUNTERS = ("forward_steps", "prefill_tokens", "generated_tokens", "attended_tokens", "unique_tokens", "draft_tokens",
            "accepted_tokens")


@dataclass(frozen=True)
class Counters:
    """Model work: forward steps, tokens prefilled and generated, KV tokens attended and unique,
    speculative draft tokens verified and kept, and the drafters' seconds."""

    forward_steps: int = 0
    prefill_tokens: int = 0
    generated_tokens: int = 0
    attended_tokens: int = 0
    unique_tokens: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    draft_seconds: float = 0.0

    @classmethod
    def read(cls, lm: Any) -> Counters:
        """The runtime's counters now (zeros for a runtime without ``stats``)."""
        stats = getattr(lm, "stats", None)
        if stats is None:
            return cls()
        get = stats.get if isinstance(stats, dict) else (lambda k, d: getattr(stats, k, d))
        return cls(**{k: int(get(k, 0)) for k in COUNTERS}, draft_seconds=float(get("draft_seconds", 0.0)))

    def __add__(self, other: Counters) -> Counters:
        return Counters(**{k: getattr(self, k) + getattr(other, k) for k in (*COUNTERS, "draft_seconds")})

    def __sub__(self, other: Counters) -> Counters:
        return Counters(**{k: getattr(self, k) - getattr(other, k) for k in (*COUNTERS, "draft_seconds")})


@dataclass(frozen=True)
class RoundStats:
    """One round: model work of its expansion and of its evaluation, and what it produced.

    ``longest_generation`` is the most tokens any one child got this round; with batched decoding
    the expansion's forward steps follow it, not the number of nodes expanded.
    ``expand_seconds`` and ``evaluate_seconds`` are the wall time of each half (model work and the
    task's checks; 0.0 in run files written before they were recorded).
    """

    expand: Counters
    evaluate: Counters
    expanded: int
    new_nodes: int
    evaluated: int
    longest_generation: int
    expand_seconds: float = 0.0
    evaluate_seconds: float = 0.0


@dataclass(frozen=True)
class Statistics:
    """Totals of one ``search`` call (a resumed search counts from where it resumed)."""

    rounds: int = 0
    forward_steps: int = 0
    prefill_tokens: int = 0
    generated_tokens: int = 0
    attended_tokens: int = 0
    unique_tokens: int = 0
    draft_tokens: int = 0  # speculative draft tokens verified, and of them kept
    accepted_tokens: int = 0
    draft_seconds: float = 0.0  # the drafters' time (proposals; a draft model's forwards)
    nodes: int = 0
    wall_time: float = 0.0
    per_round: tuple[RoundStats, ...] = field(default=(), repr=False)

    @property
    def reuse_factor(self) -> float:
        """Attended over unique KV tokens: how often each stored token was read per step (1 = no sharing)."""
        return self.attended_tokens / self.unique_tokens if self.unique_tokens else 1.0

    def display(self, best_value: float | None = None) -> dict[str, float]:
        """The numbers a live view shows after a round."""
        out: dict[str, float] = {
            "round": self.rounds,
            "nodes": self.nodes,
            "forward_steps": self.forward_steps,
            "generated_tokens": self.generated_tokens,
            "tokens_per_s": self.generated_tokens / self.wall_time if self.wall_time > 0 else 0.0,
            "reuse_factor": self.reuse_factor,
            "expand_seconds": sum(r.expand_seconds for r in self.per_round),
            "evaluate_seconds": sum(r.evaluate_seconds for r in self.per_round),
        }
        if self.draft_tokens:
            out["acceptance"] = self.acceptance_rate
            out["tokens_per_forward"] = self.tokens_per_forward
            out["draft_seconds"] = self.draft_seconds
        if best_value is not None:
            out["best_value"] = best_value
        return out

    @property
    def acceptance_rate(self) -> float:
        """Speculative draft tokens kept over those verified (0 without speculation)."""
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else 0.0

    @property
    def tokens_per_forward(self) -> float:
        return self.generated_tokens / self.forward_steps if self.forward_steps else 0.0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Statistics:
        rounds = tuple(
            RoundStats(**{**r, "expand": Counters(**r["expand"]), "evaluate": Counters(**r["evaluate"])})
            for r in data.get("per_round", ())
        )
        return cls(**{**data, "per_round": rounds})


@dataclass(frozen=True)
class SearchResult:
    """The outcome of ``thoughttree.search``.

    ``best`` is the node whose path is the answer (``answer`` is the task's reading of it);
    ``solutions`` are all nodes the task verified; ``stopped`` says why the search ended:
    "done", "solved", a budget name ("max_nodes", "max_generated_tokens", "max_rounds",
    "max_seconds"), "interrupted" or "error". ``settings`` holds the task, strategy, seed and
    budget as plain data.
    """

    problem: Any
    tree: ThoughtTree
    best: Node | None
    solutions: tuple[Node, ...]
    answer: str | None
    stopped: str
    statistics: Statistics
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def solved(self) -> bool:
        return bool(self.solutions) and self.best is not None and self.best.status is Status.SOLVED

    def to_entry(self) -> dict[str, Any]:
        """This problem's entry of a run file."""
        try:
            json.dumps(self.problem)
        except (TypeError, ValueError):
            raise RunFileError(
                f"problem {self.problem!r} is not JSON data; pass problems as text, numbers or lists to save them"
            ) from None
        return {
            "problem": self.problem,
            "tree": tree_to_dict(self.tree),
            "result": {
                "answer": self.answer,
                "solved": self.solved,
                "best": None if self.best is None else self.best.id,
                "solutions": [n.id for n in self.solutions],
                "stopped": self.stopped,
                "statistics": self.statistics.to_dict(),
            },
        }

    def to_run_file(self) -> RunFile:
        meta = {"search_format": SEARCH_FORMAT_VERSION, **self.settings}
        return RunFile(meta=meta, problems=[self.to_entry()])

    def save(self, path: str | Path) -> None:
        """Write the run file (atomically); ``SearchResult.load`` reads it back."""
        self.to_run_file().save(path)

    @classmethod
    def load(cls, path: str | Path, lm: Any = None, index: int = 0) -> SearchResult:
        """Read problem ``index`` of a run file; attach ``lm`` to resume with ``search(..., tree=result.tree)``."""
        run = load_run(path)
        return cls.from_run(run, lm=lm, index=index, where=str(path))

    @classmethod
    def from_run(cls, run: RunFile, lm: Any = None, index: int = 0, where: str = "run file") -> SearchResult:
        version = run.meta.get("search_format", SEARCH_FORMAT_VERSION)
        if not isinstance(version, int) or isinstance(version, bool):
            raise RunFileError(f"{where}: meta.search_format must be an integer, got {version!r}")
        if version > SEARCH_FORMAT_VERSION:
            raise RunFileError(
                f"{where} holds search results of format {version}; this thoughttree reads up to "
                f"{SEARCH_FORMAT_VERSION}; upgrade thoughttree to read it"
            )
        if not 0 <= index < len(run.problems):
            raise RunFileError(f"{where} has {len(run.problems)} problems; index {index} is out of range")
        entry = run.problems[index]
        tree = tree_from_dict(entry["tree"], lm)
        res = entry.get("result") or {}
        missing = [k for k in _RESULT_FIELDS if k not in res]
        if missing:
            raise RunFileError(f"{where}: problem {index} holds no search result (result.{missing[0]} is missing); "
                               "load files written by thoughttree.search or a thoughttree task command")
        try:
            stats = Statistics.from_dict(res["statistics"])
        except (KeyError, TypeError) as exc:
            raise RunFileError(f"{where}: problem {index}: result.statistics does not match this thoughttree "
                               f"({exc})") from None
        best = None if res["best"] is None else tree[res["best"]]
        solutions = tuple(tree[i] for i in res["solutions"])
        answer, stopped = res["answer"], res["stopped"]
        settings = {k: v for k, v in run.meta.items() if k != "search_format"}  # a task run's meta: its settings
        return cls(entry.get("problem"), tree, best, solutions, answer, stopped, stats, settings)
