"""A search strategy of your own: best-first search, run through ``thoughttree.search``.

Best-first keeps no frontier of its own: each round it expands the ``width`` highest-valued open
leaves anywhere in the tree (so a promising deep branch and a promising shallow one grow in the
same batch), and stops after ``expansions`` expansions. Its state lives in the tree, so a saved
search resumes like the built-in ones.

    python examples/custom_strategy.py path/to/model "What is 17 * 23?"

The task below asks for a step-by-step answer one line at a time and scores a path by the model's
mean log-probability (works with any model; swap in a ``ValuePrompt`` for a model that can judge).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import thoughttree as tt
from thoughttree.search.driver import Budget, search
from thoughttree.strategies import Step, StrategyBase
from thoughttree.strategies.base import positive_int, sorted_by_value
from thoughttree.tasks import Evaluator, LogProb, Task, TaskConfig
from thoughttree.tree import Node, Status


@dataclass(frozen=True)
class BestFirstConfig:
    width: int = 2  # leaves expanded per round, batched together
    samples: int = 3  # children per expanded leaf
    expansions: int = 12  # leaves expanded in total
    max_depth: int = 6

    def __post_init__(self) -> None:
        for name in ("width", "samples", "expansions", "max_depth"):
            positive_int(getattr(self, name), name, "BestFirst")


class BestFirst(StrategyBase):
    """Expand the best open leaves of the whole tree, ``width`` at a time."""

    Config = BestFirstConfig
    config: BestFirstConfig

    def step(self) -> Step | None:
        pending = self.pending()
        if pending:  # a resumed search stopped before scoring these
            return Step(evaluate=pending)
        done = sum(1 for n in self.tree.nodes if n.children)
        if done >= self.config.expansions:
            return None
        open_leaves = [n for n in self.tree.frontier() if n.depth < self.config.max_depth]
        if not open_leaves:
            return None
        chosen = sorted_by_value(open_leaves)[: min(self.config.width, self.config.expansions - done)]
        return Step(expand=chosen, n=self.config.samples)


@dataclass(frozen=True)
class StepByStepConfig(TaskConfig):
    sampling: tt.Sampling = tt.Sampling(max_tokens=48, temperature=0.8, stop=("\n",))


class StepByStep(Task):
    """One reasoning line per thought; a line starting with "Answer:" finishes the path."""

    def __init__(self, config: StepByStepConfig | None = None) -> None:
        self.config = config or StepByStepConfig()

    def prompt(self, problem: str) -> str:
        return f"Question: {problem}\nThink step by step, one step per line, then write 'Answer: ...'.\n"

    def evaluator(self) -> Evaluator:
        return LogProb(scope="path", normalize=True)

    def is_terminal(self, problem: str, node: Node) -> bool:
        return node.text.lstrip().startswith("Answer:") or node.metadata.get("finish_reason") == "eos"

    def answer(self, problem: str, node: Node) -> str | None:
        text = node.text.strip()
        return text.removeprefix("Answer:").strip() if text.startswith("Answer:") else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", help="a local Hugging Face model directory")
    parser.add_argument("question")
    parser.add_argument("--device", default=None)
    parser.add_argument("--save", default=None, help="write the searched tree to this run file")
    args = parser.parse_args()

    lm = tt.LM.from_pretrained(args.model, device=args.device)
    strategy = BestFirst(width=2, samples=3, expansions=10)
    result = search(StepByStep(), strategy, lm, problem=args.question, budget=Budget(max_seconds=120), live=True)
    finished = [n for n in result.tree.nodes if n.status in (Status.TERMINAL, Status.SOLVED)]
    print(f"answer: {result.answer}  ({len(finished)} finished paths, stopped: {result.stopped})")
    print(f"{result.statistics.rounds} rounds, {result.statistics.forward_steps} forward steps, "
          f"KV reuse {result.statistics.reuse_factor:.2f}x")
    if result.best is not None:
        print(result.best.path_text(include_root=False))
    if args.save:
        result.save(args.save)


if __name__ == "__main__":
    main()
