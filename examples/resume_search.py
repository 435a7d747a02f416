"""A checkpointed Tree-of-Thoughts search: a few rounds per run, saved, resumed by the next run.

    python examples/resume_search.py path/to/model "Plan a 3-day trip to Kyoto" --rounds 2 --run trip.json
    python examples/resume_search.py path/to/model "Plan a 3-day trip to Kyoto" --rounds 2 --run trip.json

The first call searches two BFS levels and writes ``trip.json``; the second loads it (the KV of
the kept nodes is rebuilt by one prefill, shared prefixes once) and searches two more. A crash
keeps its work too: ``SearchError.partial_result`` is saved before the error is re-raised.

Thoughts are scored by a value prompt with a few-shot prefix; all value prompts of a round go
to the model in one batch, so that prefix is computed once per round, not once per thought.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

import thoughttree as tt
from thoughttree.search.driver import Budget, SearchError, search
from thoughttree.search.results import SearchResult
from thoughttree.strategies import BFS
from thoughttree.tasks import Evaluator, Task, TaskConfig, ValuePrompt
from thoughttree.tree import Node

FEW_SHOT = (
    "Rate whether the last step moves the plan forward: sure, likely or impossible.\n"
    "Step: Book a hotel near the station.\nRating: sure\n"
    "Step: Fly to the moon first.\nRating: impossible\n"
    "Step: Check the weather for each day.\nRating: likely\n"
)


@dataclass(frozen=True)
class PlanConfig(TaskConfig):
    sampling: tt.Sampling = field(default_factory=lambda: tt.Sampling(max_tokens=40, temperature=0.9, stop=("\n",)))
    value_samples: int = 3


class Plan(Task):
    """One plan step per line; a value prompt rates each step."""

    def __init__(self, config: PlanConfig | None = None) -> None:
        self.config = config or PlanConfig()

    def prompt(self, problem: str) -> str:
        return f"Task: {problem}\nWrite the plan one step per line.\n"

    def evaluator(self) -> Evaluator:
        return ValuePrompt(
            prompt=lambda problem, node: f"{FEW_SHOT}Step: {node.text.strip()}\nRating:",
            labels={"sure": 20.0, "likely": 1.0, "impossible": 0.001},
            samples=self.config.value_samples,
        )

    def answer(self, problem: str, node: Node) -> str | None:
        return node.path_text(include_root=False).strip() or None


def run(model: str, problem: str, rounds: int, path: Path, device: str | None = None) -> SearchResult:
    lm = tt.LM.from_pretrained(model, device=device)
    tree = SearchResult.load(path, lm=lm).tree if path.exists() else None
    try:
        result = search(Plan(), BFS(breadth=3, samples=3, depth=6), lm, problem=problem, seed=0,
                        budget=Budget(max_rounds=rounds), tree=tree)
    except SearchError as err:
        err.partial_result.save(path)
        raise
    result.save(path)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", help="a local Hugging Face model directory")
    parser.add_argument("problem")
    parser.add_argument("--rounds", type=int, default=2, help="rounds to search in this run")
    parser.add_argument("--run", type=Path, default=Path("search.json"), help="the run file to resume and update")
    parser.add_argument("--device", default=None)
    args = parser.parse_args()
    result = run(args.model, args.problem, args.rounds, args.run, args.device)
    print(f"{len(result.tree)} nodes, stopped: {result.stopped}, best so far:")
    print(result.answer)


if __name__ == "__main__":
    main()
