"""Evaluators that value a node by the labels the model gives it: sampled answers to a value
prompt (:class:`ValuePrompt`), the labels' probabilities after it (:class:`LabelProbs`), or the
best of those over the states one proposed step leads to (:class:`Lookahead`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from ..config import Sampling
from ..tree import derive_seed
from .base import TaskError, check_prompt, check_samples, finite, need_method, proposal_seed

if TYPE_CHECKING:
    from ..tree import Node


@dataclass(frozen=True)
class ValuePrompt:
    """``samples`` answers to ``prompt(problem, node)`` per node; value = mean of their labels' numbers.

    The label of an answer is its last non-empty line if that is a label, else the first label
    (longest first) that appears in that line as a word; ``unknown`` is the value of an answer
    that names none.
    """

    prompt: Callable[[Any, Node], str | Sequence[int]]
    labels: Mapping[str, float]
    samples: int = 3
    sampling: Sampling = field(default_factory=lambda: Sampling(max_tokens=16, temperature=0.7, stop=("\n",)))
    fork: bool = False
    unknown: float = 0.0

    def __post_init__(self) -> None:
        check_samples(self.samples, "ValuePrompt")
        if not self.labels:
            raise ValueError("ValuePrompt needs labels, e.g. {'sure': 20.0, 'likely': 1.0, 'impossible': 0.001}")
        for label, value in self.labels.items():
            finite(value, f"ValuePrompt label {label!r}")

    @property
    def bounds(self) -> tuple[float, float]:
        values = [*self.labels.values(), self.unknown]
        return (min(values), max(values))

    def label_of(self, text: str) -> str | None:
        lines = [line.strip().lower() for line in text.split("\n") if line.strip()]
        if not lines:
            return None
        last = lines[-1]
        by_length = sorted(self.labels, key=len, reverse=True)
        for label in by_length:
            if last == label.lower():
                return label
        for label in by_length:
            if re.search(rf"\b{re.escape(label.lower())}\b", last):
                return label
        return None

    def evaluate(
        self, lm: Any, problem: Any, nodes: Sequence[Node], *, seed: int, samples: int | None = None
    ) -> list[float]:
        k = check_samples(samples if samples is not None else self.samples, "ValuePrompt")
        if not nodes:
            return []
        prompts = [check_prompt(self.prompt(problem, node), "ValuePrompt.prompt") for node in nodes]
        seeds = [derive_seed(seed, "value", self.sampling.seed, n.position, j) for n in nodes for j in range(k)]
        if self.fork:
            if any(not isinstance(p, str) for p in prompts):
                raise TaskError("ValuePrompt(fork=True) needs text suffixes, not token ids")
            complete_from = need_method(lm, "complete_from", "ValuePrompt(fork=True)")
            gens = complete_from(
                [n for n in nodes for _ in range(k)], [p for p in prompts for _ in range(k)], self.sampling, seeds
            )
        else:
            gens = need_method(lm, "complete", "ValuePrompt")(
                [p for p in prompts for _ in range(k)], self.sampling, seeds
            )
        out = []
        for i in range(len(nodes)):
            labels = [self.label_of(g.text) for g in gens[i * k : (i + 1) * k]]
            out.append(sum(self.labels[lb] if lb is not None else self.unknown for lb in labels) / k)
        return out


@dataclass(frozen=True)
class LabelProbs:
    """The expected label score under the model's next-token distribution after ``prompt(problem, node)``.

    One ``lm.tree_logits`` call scores every node (value prompts share their prefix's KV), with no
    sampling noise: value = sum over labels of p(label) * score, p renormalised over the labels.
    Each label is identified by its first token, so the labels' first tokens must differ.
    """

    prompt: Callable[[Any, Node], str | Sequence[int]]
    labels: Mapping[str, float]

    def __post_init__(self) -> None:
        if not self.labels:
            raise ValueError("LabelProbs needs labels, e.g. {'sure': 20.0, 'likely': 1.0, 'impossible': 0.001}")
        for label, value in self.labels.items():
            finite(value, f"LabelProbs label {label!r}")

    @property
    def bounds(self) -> tuple[float, float]:
        return (min(self.labels.values()), max(self.labels.values()))

    def evaluate(
        self, lm: Any, problem: Any, nodes: Sequence[Node], *, seed: int, samples: int | None = None
    ) -> list[float]:
        return self.score(lm, [self.prompt(problem, node) for node in nodes])

    def score(self, lm: Any, prompts: Sequence[str | Sequence[int]]) -> list[float]:
        """The expected label score after each prompt, all in one ``lm.tree_logits`` call."""
        if not prompts:
            return []
        first = {label: lm.encode(label, add_bos=False)[:1] for label in self.labels}
        ids = [tokens[0] for tokens in first.values() if tokens]
        if len(set(ids)) != len(self.labels):
            raise TaskError(
                "LabelProbs needs labels whose first tokens differ under this tokenizer; "
                "use ValuePrompt (sampled answers) instead"
            )
        checked = [check_prompt(raw, "LabelProbs.prompt") for raw in prompts]
        texts = iter(lm.encode_batch([p for p in checked if isinstance(p, str)], add_bos=True))
        seqs = [next(texts) if isinstance(p, str) else p for p in checked]
        logits = need_method(lm, "tree_logits", "LabelProbs")(seqs)
        probs = logits.float().softmax(dim=-1)[:, ids]  # [nodes, labels]
        probs = probs / probs.sum(dim=-1, keepdim=True).clamp_min(1e-30)
        scores = probs.new_tensor(list(self.labels.values()))
        return [float(v) for v in probs @ scores]


@dataclass(frozen=True)
class Lookahead:
    """One step of look-ahead: a node is worth the best state the model's proposed next steps reach.

    For each node, ``expand(problem, node)`` is a propose prompt, or None for a node that ``leaf``
    values directly (one step from the end, say). ``samples`` completions are drawn per expanded
    node, all nodes in one batch; ``child(problem, node, completion)`` is the ``leaf`` prompt of
    the state the proposed step leads to, or None for an invalid step. Every distinct child
    prompt is scored once by ``leaf.score`` (one forward for all of them) and the node's value is
    the best of its children's, or ``leaf``'s lowest value when no proposal was valid.

    The tokens the proposals generate count as the search's generated tokens, like any other
    evaluation; ``samples`` passed to :meth:`evaluate` overrides the proposals per node. The
    proposals are seeded as the node's next expansion by a propose prompt would be
    (:func:`~thoughttree.tasks.base.proposal_seed`): when ``expand`` is the task's own propose
    prompt under the same sampling, a search that expands the node takes them as its children
    and decodes nothing (up to ``samples`` children). ``expansion_samples``, the search's proposals
    per expansion, makes the look-ahead decode that many when it is more than ``samples`` (the value
    still takes the first ``samples``), so that the expansion decodes nothing either: worth it for
    distinct proposals, where a request for more than was decoded is decoded whole again, not for
    sampled ones, which are remembered one seed at a time.
    """

    expand: Callable[[Any, Node], str | Sequence[int] | None]
    child: Callable[[Any, Node, str], str | Sequence[int] | None]
    leaf: LabelProbs
    samples: int = 20
    sampling: Sampling = field(default_factory=lambda: Sampling(max_tokens=32, temperature=1.0, stop=("\n",)))
    expansion_samples: int | None = None

    def __post_init__(self) -> None:
        check_samples(self.samples, "Lookahead")
        if self.expansion_samples is not None:
            check_samples(self.expansion_samples, "Lookahead expansion")

    @property
    def bounds(self) -> tuple[float, float]:
        return self.leaf.bounds

    def evaluate(
        self, lm: Any, problem: Any, nodes: Sequence[Node], *, seed: int, samples: int | None = None
    ) -> list[float]:
        k = check_samples(samples if samples is not None else self.samples, "Lookahead")
        if not nodes:
            return []
        expand = [self.expand(problem, n) for n in nodes]
        decode = max(k, self.expansion_samples or 0)  # proposals decoded per node; the value takes the first k
        proposals = [(i, j) for i, p in enumerate(expand) if p is not None for j in range(decode)]  # (node, sample)
        prompts = {i: check_prompt(expand[i], "Lookahead.expand") for i, _ in proposals}
        if self.sampling.distinct and prompts:  # distinct proposals per node (fewer when fewer exist)
            groups = need_method(lm, "complete_distinct", "Lookahead with distinct sampling")(
                list(prompts.values()),
                decode,
                self.sampling,
                [proposal_seed(seed, self.sampling, nodes[i], None) for i in prompts],
            )
            proposals = [(i, j) for i, group in zip(prompts, groups) for j in range(len(group))]
            gens = [g for group in groups for g in group]
        else:
            seeds = [proposal_seed(seed, self.sampling, nodes[i], j) for i, j in proposals]
            texts = [prompts[i] for i, _ in proposals]
            gens = need_method(lm, "complete", "Lookahead")(texts, self.sampling, seeds) if proposals else []
        # What each node's value is the best of: its children's prompts, or its own when not expanded.
        wanted: list[list[str | list[int]]] = [
            [] if p is not None else [check_prompt(self.leaf.prompt(problem, n), "LabelProbs.prompt")]
            for n, p in zip(nodes, expand)
        ]
        for g, (i, j) in zip(gens, proposals):
            prompt = self.child(problem, nodes[i], g.text) if j < k else None
            if prompt is not None:
                wanted[i].append(check_prompt(prompt, "Lookahead.child"))
        unique = list(dict.fromkeys(_key(p) for ps in wanted for p in ps))
        scores = dict(zip(unique, self.leaf.score(lm, unique)))
        return [max((scores[_key(p)] for p in ps), default=self.leaf.bounds[0]) for ps in wanted]


def _key(prompt: str | Sequence[int]) -> str | tuple[int, ...]:
    return prompt if isinstance(prompt, str) else tuple(prompt)
