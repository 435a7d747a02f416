"""An evaluator that lets the model write its reasoning before the verdict it is scored by.

:class:`ReasonedLabelProbs` is :class:`~thoughttree.tasks.evaluate.LabelProbs` with a written
chain in front: for the nodes that ``reasons(problem, node)`` selects, the model first completes
the value prompt greedily up to ``sampling``'s stop (one line of arithmetic, say), and the label
probabilities are read at the next position, after that text; other nodes are scored straight
from the prompt. The chain's tokens are generated, so they count in the search's generated
tokens like any other model output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from ..config import Sampling
from ..tree import derive_seed
from .base import TaskError, check_prompt
from .evaluate import LabelProbs

if TYPE_CHECKING:
    from ..tree import Node


@dataclass(frozen=True)
class ReasonedLabelProbs:
    """Expected label score after a greedy written chain (for the nodes ``reasons`` selects).

    ``sampling`` must be greedy (temperature 0), so a node's chain, and with it its value, does
    not depend on what else is evaluated or on the seed.
    """

    prompt: Callable[[Any, Node], str]
    labels: Mapping[str, float]
    reasons: Callable[[Any, Node], bool]
    sampling: Sampling = field(default_factory=lambda: Sampling(max_tokens=256, temperature=0.0, stop=("\n",)))

    def __post_init__(self) -> None:
        if not self.sampling.greedy:
            raise ValueError("ReasonedLabelProbs writes its chain greedily; give a Sampling with temperature=0")
        LabelProbs(prompt=self.prompt, labels=self.labels)  # the same label checks

    @property
    def bounds(self) -> tuple[float, float]:
        return (min(self.labels.values()), max(self.labels.values()))

    def evaluate(
        self, lm: Any, problem: Any, nodes: Sequence[Node], *, seed: int, samples: int | None = None
    ) -> list[float]:
        if not nodes:
            return []
        prompts = [check_prompt(self.prompt(problem, node), "ReasonedLabelProbs.prompt") for node in nodes]
        if not all(isinstance(p, str) for p in prompts):
            raise TaskError("ReasonedLabelProbs needs text prompts, not token ids")
        chained = [i for i, node in enumerate(nodes) if self.reasons(problem, node)]
        if chained:
            complete = getattr(lm, "complete", None)
            if complete is None:
                raise TaskError(f"ReasonedLabelProbs needs lm.complete(...), which {type(lm).__name__} does not have")
            seeds = [derive_seed(seed, "reasoned", nodes[i].id) for i in chained]
            for i, gen in zip(chained, complete([prompts[i] for i in chained], self.sampling, seeds)):
                prompts[i] = prompts[i] + gen.text
        index = {node.id: i for i, node in enumerate(nodes)}
        written = LabelProbs(prompt=lambda _problem, node: prompts[index[node.id]], labels=self.labels)
        return written.evaluate(lm, problem, nodes, seed=seed)
