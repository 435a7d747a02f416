"""Evaluators: how a search scores nodes, each kind submitting all its model work as one batch.

- :class:`ValuePrompt`: ask the model about each node (Tree of Thoughts' sure/likely/impossible)
  several times and average the labels' numbers. Prompts go to ``lm.complete`` (fresh prompts;
  a shared few-shot prefix is stored once by the runtime's prefix matching) or, with
  ``fork=True``, to ``lm.complete_from`` as a suffix of the node's own path.
- :class:`LabelProbs`: the same question answered by the label probabilities of one forward
  (``lm.tree_logits``): the expected label score, no sampling noise.
- :class:`Lookahead`: one step of look-ahead: sample the model's next steps from each node and
  take the best :class:`LabelProbs` value among the states they lead to.
- :class:`Vote`: show the model the children of one parent and let it vote for the best, several
  times; a child's value is its share of the votes.
- :class:`LogProb`: the model's log-probability of the node's tokens (or of its whole path),
  from generation or, for given text, from one ``lm.tree_logits`` call.
- :class:`Verifier`: an external reward function (unit tests, a checker); no model call.
- :class:`Rollout`: complete each node to the end and score the finished text with a reward
  function (MCTS's rollout estimate).

Sample seeds derive from the search seed and the nodes' positions in the tree, never from batch
positions or creation order, so a node gets the same evaluation whatever else is evaluated with it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence

from ..config import Sampling
from ..tree import derive_seed
from .base import TaskError, check_prompt

if TYPE_CHECKING:
    from ..tree import Node


class Evaluator(Protocol):
    """Scores nodes. ``bounds`` are the lowest and highest values it gives (may be infinite)."""

    @property
    def bounds(self) -> tuple[float, float]: ...

    def evaluate(
        self, lm: Any, problem: Any, nodes: Sequence[Node], *, seed: int, samples: int | None = None
    ) -> list[float]:
        """One value per node, all model work in one batched call. ``samples`` overrides the default count."""
        ...


def _need(lm: Any, method: str, evaluator: str) -> Callable[..., Any]:
    fn = getattr(lm, method, None)
    if fn is None:
        raise TaskError(f"{evaluator} needs lm.{method}(...), which {type(lm).__name__} does not have")
    return fn


def _check_samples(samples: int, what: str) -> int:
    if not isinstance(samples, int) or samples < 1:
        raise ValueError(f"{what}: samples must be an integer >= 1, got {samples!r}")
    return samples


def _finite(value: Any, what: str) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise TaskError(f"{what} returned {value!r}; it must return a number") from None
    if not math.isfinite(out):
        raise TaskError(f"{what} returned {out}; values must be finite numbers")
    return out


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
        _check_samples(self.samples, "ValuePrompt")
        if not self.labels:
            raise ValueError("ValuePrompt needs labels, e.g. {'sure': 20.0, 'likely': 1.0, 'impossible': 0.001}")
        for label, value in self.labels.items():
            _finite(value, f"ValuePrompt label {label!r}")

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
        k = _check_samples(samples if samples is not None else self.samples, "ValuePrompt")
        if not nodes:
            return []
        prompts = [check_prompt(self.prompt(problem, node), "ValuePrompt.prompt") for node in nodes]
        seeds = [derive_seed(seed, "value", self.sampling.seed, n.position, j) for n in nodes for j in range(k)]
        if self.fork:
            if any(not isinstance(p, str) for p in prompts):
                raise TaskError("ValuePrompt(fork=True) needs text suffixes, not token ids")
            complete_from = _need(lm, "complete_from", "ValuePrompt(fork=True)")
            gens = complete_from([n for n in nodes for _ in range(k)], [p for p in prompts for _ in range(k)],
                                 self.sampling, seeds)
        else:
            gens = _need(lm, "complete", "ValuePrompt")([p for p in prompts for _ in range(k)], self.sampling, seeds)
        out = []
        for i in range(len(nodes)):
            labels = [self.label_of(g.text) for g in gens[i * k:(i + 1) * k]]
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
            _finite(value, f"LabelProbs label {label!r}")

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
        logits = _need(lm, "tree_logits", "LabelProbs")(seqs)
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
    evaluation; ``samples`` passed to :meth:`evaluate` overrides the proposals per node.
    """

    expand: Callable[[Any, Node], str | Sequence[int] | None]
    child: Callable[[Any, Node, str], str | Sequence[int] | None]
    leaf: LabelProbs
    samples: int = 20
    sampling: Sampling = field(default_factory=lambda: Sampling(max_tokens=32, temperature=1.0, stop=("\n",)))

    def __post_init__(self) -> None:
        _check_samples(self.samples, "Lookahead")

    @property
    def bounds(self) -> tuple[float, float]:
        return self.leaf.bounds

    def evaluate(
        self, lm: Any, problem: Any, nodes: Sequence[Node], *, seed: int, samples: int | None = None
    ) -> list[float]:
        k = _check_samples(samples if samples is not None else self.samples, "Lookahead")
        if not nodes:
            return []
        expand = [self.expand(problem, n) for n in nodes]
        proposals = [(i, j) for i, p in enumerate(expand) if p is not None for j in range(k)]  # (node, sample)
        prompts = {i: check_prompt(expand[i], "Lookahead.expand") for i, _ in proposals}
        if self.sampling.distinct and prompts:  # k distinct proposals per node (fewer when fewer exist)
            groups = _need(lm, "complete_distinct", "Lookahead with distinct sampling")(
                list(prompts.values()), k, self.sampling,
                [derive_seed(seed, "lookahead", self.sampling.seed, nodes[i].position) for i in prompts])
            proposals = [(i, j) for i, group in zip(prompts, groups) for j in range(len(group))]
            gens = [g for group in groups for g in group]
        else:
            seeds = [derive_seed(seed, "lookahead", self.sampling.seed, nodes[i].position, j) for i, j in proposals]
            texts = [prompts[i] for i, _ in proposals]
            gens = _need(lm, "complete", "Lookahead")(texts, self.sampling, seeds) if proposals else []
        # What each node's value is the best of: its children's prompts, or its own when not expanded.
        wanted: list[list[str | list[int]]] = [
            [] if p is not None else [check_prompt(self.leaf.prompt(problem, n), "LabelProbs.prompt")]
            for n, p in zip(nodes, expand)
        ]
        for g, (i, _) in zip(gens, proposals):
            prompt = self.child(problem, nodes[i], g.text)
            if prompt is not None:
                wanted[i].append(check_prompt(prompt, "Lookahead.child"))
        unique = list(dict.fromkeys(_key(p) for ps in wanted for p in ps))
        scores = dict(zip(unique, self.leaf.score(lm, unique)))
        return [max((scores[_key(p)] for p in ps), default=self.leaf.bounds[0]) for ps in wanted]


def _key(prompt: str | Sequence[int]) -> str | tuple[int, ...]:
    return prompt if isinstance(prompt, str) else tuple(prompt)


_CHOICE = re.compile(r"best choice is\s*:?\s*(\d+)", re.IGNORECASE)


def parse_choice(text: str, num_candidates: int) -> int | None:
    """The 0-based candidate a vote names ("The best choice is 2" -> 1), or None."""
    found = _CHOICE.findall(text)
    if not found:
        return None
    choice = int(found[-1])
    return choice - 1 if 1 <= choice <= num_candidates else None


@dataclass(frozen=True)
class Vote:
    """Siblings (nodes of one parent) are shown together; value = share of ``samples`` votes won.

    ``prompt(problem, parent, candidates)`` writes the vote prompt; ``parse(text, n)`` reads the
    0-based choice (default: Tree of Thoughts' "The best choice is N", 1-based in the text).
    """

    prompt: Callable[[Any, Node, Sequence[Node]], str | Sequence[int]]
    samples: int = 5
    sampling: Sampling = field(default_factory=lambda: Sampling(max_tokens=64, temperature=0.7))
    parse: Callable[[str, int], int | None] = parse_choice

    def __post_init__(self) -> None:
        _check_samples(self.samples, "Vote")

    @property
    def bounds(self) -> tuple[float, float]:
        return (0.0, 1.0)

    def evaluate(
        self, lm: Any, problem: Any, nodes: Sequence[Node], *, seed: int, samples: int | None = None
    ) -> list[float]:
        k = _check_samples(samples if samples is not None else self.samples, "Vote")
        groups: dict[int, list[Node]] = {}
        for node in nodes:
            if node.parent is None:
                raise TaskError(f"Vote compares siblings; node {node.id} is a root and has none")
            groups.setdefault(node.parent.id, []).append(node)
        prompts, seeds = [], []
        for members in groups.values():
            parent = members[0].parent
            assert parent is not None  # roots were refused above
            prompt = check_prompt(self.prompt(problem, parent, members), "Vote.prompt")
            key = tuple(m.position for m in members)
            prompts += [prompt] * k
            seeds += [derive_seed(seed, "vote", self.sampling.seed, key, j) for j in range(k)]
        gens = _need(lm, "complete", "Vote")(prompts, self.sampling, seeds) if prompts else []
        votes: dict[int, int] = {n.id: 0 for n in nodes}
        for g_index, members in enumerate(groups.values()):
            for g in gens[g_index * k:(g_index + 1) * k]:
                choice = self.parse(g.text, len(members))
                if choice is not None:
                    votes[members[choice].id] += 1
        return [votes[n.id] / k for n in nodes]


@dataclass(frozen=True)
class LogProb:
    """The model's log-probability of a node's own tokens (``scope="node"``) or its path below the root.

    With ``normalize`` the sum is divided by the token count. Tokens generated by the search
    carry their log-probabilities; for others (given or proposed text) all missing positions
    of all nodes are scored in one ``lm.tree_logits`` call.
    """

    scope: str = "node"
    normalize: bool = True

    def __post_init__(self) -> None:
        if self.scope not in ("node", "path"):
            raise ValueError(f"LogProb scope must be 'node' or 'path', got {self.scope!r}")

    @property
    def bounds(self) -> tuple[float, float]:
        return (-math.inf, 0.0)

    def evaluate(
        self, lm: Any, problem: Any, nodes: Sequence[Node], *, seed: int, samples: int | None = None
    ) -> list[float]:
        scoped = [[n] if self.scope == "node" else n.path()[1:] for n in nodes]
        known: dict[int, list[float]] = {}
        missing: list[Node] = []
        for part in scoped:
            for x in part:
                lps = x.metadata.get("token_logprobs")
                if lps is not None and len(lps) == len(x.tokens):
                    known[x.id] = [float(v) for v in lps]
                elif x.id not in known and x not in missing:
                    missing.append(x)
        if missing:
            known.update(_score_tokens(lm, missing))
        out = []
        for part in scoped:
            lps = [v for x in part for v in known[x.id]]
            total = sum(lps)
            out.append(total / max(1, len(lps)) if self.normalize else total)
        return out


def _score_tokens(lm: Any, nodes: Sequence[Node]) -> dict[int, list[float]]:
    """Log-probabilities of each node's own tokens given its path, from one tree_logits call."""
    tree_logits = _need(lm, "tree_logits", "LogProb")
    sequences, targets = [], []
    for node in nodes:
        if node.parent is None:
            raise TaskError(f"LogProb cannot score root {node.id}: the model never predicted the prompt")
        prefix = node.parent.path_tokens()
        for i, tok in enumerate(node.tokens):
            sequences.append(prefix + node.tokens[:i])
            targets.append(tok)
    logprobs = tree_logits(sequences).float().log_softmax(-1)  # [len(sequences), vocab]
    picked = [float(logprobs[i, t]) for i, t in enumerate(targets)]
    out, pos = {}, 0
    for node in nodes:
        out[node.id] = picked[pos:pos + len(node.tokens)]
        pos += len(node.tokens)
    return out


@dataclass(frozen=True)
class Verifier:
    """An external reward ``fn(problem, node) -> float`` within ``bounds`` (unit tests, a checker)."""

    fn: Callable[[Any, Node], float]
    bounds: tuple[float, float] = (0.0, 1.0)

    def evaluate(
        self, lm: Any, problem: Any, nodes: Sequence[Node], *, seed: int, samples: int | None = None
    ) -> list[float]:
        name = getattr(self.fn, "__qualname__", "Verifier.fn")
        return [_finite(self.fn(problem, n), name) for n in nodes]


@dataclass(frozen=True)
class Rollout:
    """Complete each node ``samples`` times; value = mean ``reward(problem, text)`` of the finished texts.

    ``text`` is the node's path below the root followed by the completion.
    """

    reward: Callable[[Any, str], float]
    sampling: Sampling = field(default_factory=lambda: Sampling(max_tokens=128, temperature=1.0))
    samples: int = 1
    bounds: tuple[float, float] = (0.0, 1.0)

    def __post_init__(self) -> None:
        _check_samples(self.samples, "Rollout")

    def evaluate(
        self, lm: Any, problem: Any, nodes: Sequence[Node], *, seed: int, samples: int | None = None
    ) -> list[float]:
        k = _check_samples(samples if samples is not None else self.samples, "Rollout")
        if not nodes:
            return []
        complete_from = _need(lm, "complete_from", "Rollout")
        seeds = [derive_seed(seed, "rollout", self.sampling.seed, n.position, n.visits, j)
                 for n in nodes for j in range(k)]
        gens = complete_from([n for n in nodes for _ in range(k)], [""] * (k * len(nodes)), self.sampling, seeds)
        name = getattr(self.reward, "__qualname__", "Rollout.reward")
        out = []
        for i, node in enumerate(nodes):
            head = node.path_text(include_root=False)
            rewards = [_finite(self.reward(problem, head + g.text), name) for g in gens[i * k:(i + 1) * k]]
            out.append(sum(rewards) / k)
        return out
