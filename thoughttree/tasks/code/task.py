"""Code generation as a search task: whole programs or line by line, scored by the public tests.

Two units of search (``CodeConfig.unit``):

- ``"program"``: a child is a whole sampled program (best-of-N and its kin); it is finished at once.
- ``"line"``: a child is one line; a path of lines is a program in progress, finished by the end
  of the completion (EOS, the closing code fence) or after ``max_lines`` lines. Beam search and
  MCTS over lines score a program in progress by completing it (``rollout``) and running the
  completed program, as PG-TD does ("Planning with Large Language Models for Code Generation").

Values are the public-test pass rate in [0, 1], from :class:`PublicTests`. The search's
problem is the problem's key (JSON data in run files); the task holds the problems themselves.
Every program a node's evaluation ran is kept in ``node.metadata["program"]`` with its
``"public_pass_rate"``, and :func:`best_program` picks the search's final program from them.
"""

from __future__ import annotations

import dataclasses
from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ...config import Sampling
from ...tree import Node, Status, derive_seed
from ..base import Request, Sample, Task, TaskConfig
from ..evaluate import Evaluator, Verifier
from .checking import Checker, Verdicts
from .problem import CodeProblem

UNITS = ("program", "line")


@dataclass(frozen=True)
class CodeConfig(TaskConfig):
    """``sampling`` for whole programs, ``line_sampling`` for one line, ``rollout`` to finish a partial program.

    ``public_tests`` False: the search runs no tests at all (every node is valued 0, so the first
    sample is kept): plain sampling, as a baseline.
    """

    unit: str = "program"
    sampling: Sampling = field(default_factory=lambda: Sampling(max_tokens=512, temperature=0.8))
    line_sampling: Sampling = field(default_factory=lambda: Sampling(max_tokens=96, temperature=0.8, stop=("\n",)))
    rollout: Sampling | None = field(default_factory=lambda: Sampling(max_tokens=512, temperature=0.8))
    max_lines: int = 48
    public_tests: bool = True

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise ValueError(f"code search unit must be one of {', '.join(UNITS)}, got {self.unit!r}")
        if not isinstance(self.max_lines, int) or self.max_lines < 1:
            raise ValueError(f"max_lines must be an integer >= 1, got {self.max_lines!r}")


class CodeTask(Task):
    """Shared by APPS and HumanEval; subclasses write the prompt and turn path text into a program."""

    config: CodeConfig

    def __init__(self, problems: Mapping[str, CodeProblem], config: CodeConfig | None = None,
                 checker: Checker | None = None) -> None:
        if not problems:
            raise ValueError("a code task needs at least one problem")
        self.problems = dict(problems)
        self.config = config or CodeConfig()
        self.checker = checker or Checker()

    def get(self, key: Any) -> CodeProblem:
        try:
            return self.problems[str(key)]
        except KeyError:
            raise KeyError(f"no problem {key!r} in this task ({len(self.problems)} problems loaded)") from None

    @abstractmethod
    def program(self, key: Any, text: str) -> str:
        """The complete program that ``text`` (a path below the root, maybe with a rollout) stands for."""

    @abstractmethod
    def finished(self, key: Any, text: str) -> bool:
        """Whether a line-unit path ``text`` has reached the end of its program (a closing fence, a stop marker)."""

    def stops(self, key: Any) -> tuple[str, ...]:
        """Strings that end a whole-program sample (the closing fence, the start of the next problem)."""
        return ()

    def request(self, key: Any, node: Node) -> Request:
        if self.config.unit == "line":
            return Sample(self.config.line_sampling)
        sampling = self.config.sampling
        return Sample(dataclasses.replace(sampling, stop=sampling.stop + self.stops(key)))

    def accept(self, key: Any, parent: Node, text: str) -> bool:
        return bool(text)

    def is_terminal(self, key: Any, node: Node) -> bool:
        if node.is_root:
            return False
        if self.config.unit == "program":
            return True
        eos = node.metadata.get("finish_reason") == "eos"
        return eos or node.depth >= self.config.max_lines or self.finished(key, node.path_text(include_root=False))

    def answer(self, key: Any, node: Node) -> str | None:
        program = self.program(key, node.path_text(include_root=False))
        return program if program.strip() else None

    def evaluator(self) -> Evaluator:
        if not self.config.public_tests:
            return Verifier(fn=_unranked)
        return PublicTests(self, None if self.config.unit == "program" else self.config.rollout)

    def public_rates(self, key: Any, programs: Sequence[str]) -> list[float]:
        """Share of the public tests each program passes (0 for all when the problem shows no tests)."""
        problem = self.get(key)
        if not problem.public:
            return [0.0 for _ in programs]
        verdicts = self.checker.check(programs, problem.public, fn_name=problem.fn_name, label=f"{problem.key} public")
        return [v.pass_rate for v in verdicts]

    def hidden_verdicts(self, key: Any, programs: Sequence[str]) -> list[Verdicts]:
        """Each program on the hidden tests: for the final score only, never during a search."""
        problem = self.get(key)
        return self.checker.check(programs, problem.hidden, fn_name=problem.fn_name, label=f"{problem.key} hidden")


def _unranked(key: Any, node: Node) -> float:
    return 0.0


@dataclass(frozen=True)
class PublicTests:
    """Value = share of the problem's public tests a node's program passes (a rollout first completes open nodes).

    With ``rollout`` None an unfinished node is scored as the program it already is. With
    ``samples`` k > 1 an open node gets k rollouts and the mean of their pass rates; the best of
    them is kept in its metadata.
    """

    task: CodeTask
    rollout: Sampling | None = None

    @property
    def bounds(self) -> tuple[float, float]:
        return (0.0, 1.0)

    def evaluate(self, lm: Any, key: Any, nodes: Sequence[Node], *, seed: int,
                 samples: int | None = None) -> list[float]:
        k = 1 if samples is None else samples
        if not isinstance(k, int) or k < 1:
            raise ValueError(f"PublicTests: samples must be an integer >= 1, got {samples!r}")
        heads = [n.path_text(include_root=False) for n in nodes]
        texts: list[list[str]] = [[h] for h in heads]
        roll = [i for i, n in enumerate(nodes) if self.rollout is not None and n.status is Status.OPEN]
        if roll:
            assert self.rollout is not None  # roll is empty without a rollout
            rollout = dataclasses.replace(self.rollout, stop=self.rollout.stop + self.task.stops(key))
            seeds = [derive_seed(seed, "code rollout", self.rollout.seed, nodes[i].position, nodes[i].visits, j)
                     for i in roll for j in range(k)]
            gens = lm.complete_from([nodes[i] for i in roll for _ in range(k)], [""] * (k * len(roll)),
                                    rollout, seeds)
            for r, i in enumerate(roll):
                texts[i] = [heads[i] + g.text for g in gens[r * k:(r + 1) * k]]
        programs = [[self.task.program(key, t) for t in group] for group in texts]
        flat = self.task.public_rates(key, [p for group in programs for p in group])
        out, pos = [], 0
        for node, group in zip(nodes, programs):
            rates = flat[pos:pos + len(group)]
            pos += len(group)
            best = max(range(len(group)), key=lambda j: rates[j])
            node.metadata["program"] = group[best]
            node.metadata["public_pass_rate"] = rates[best]
            out.append(sum(rates) / len(rates))
        return out


def best_program(nodes: Sequence[Node]) -> tuple[str | None, float | None, int | None]:
    """(program, public pass rate, node id) of the best program any evaluation ran; earliest node on ties."""
    scored = [n for n in nodes if "program" in n.metadata and n.metadata["program"].strip()]
    if not scored:
        return None, None, None
    top = min(scored, key=lambda n: (-n.metadata["public_pass_rate"], n.id))
    return top.metadata["program"], top.metadata["public_pass_rate"], top.id
