"""What a drafter is: it proposes, for each speculating branch, a small tree of likely next tokens.

A draft tree is stored flat: node ``k`` has token ``tokens[k]``, parent ``parents[k]`` (-1: the
node follows the branch's newest token directly; a parent always comes before its children) and
``scores[k]``, the drafter's estimate of the probability that the target draws the whole path
down to node ``k`` (so a child never scores above its parent). Nodes of one parent hold distinct
tokens. The engine trims the proposal to the step's shape and budget, verifies it, and tells the
drafter which tokens each branch kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, Sequence, runtime_checkable

if TYPE_CHECKING:
    from ...config import Sampling
    from ..kv_tree import KVTree, Segment


@dataclass
class DraftTree:
    """A proposal for one branch (see the module docstring for the layout)."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.tokens)

    def add(self, parent: int, token: int, score: float) -> int:
        """Append a node under ``parent`` (-1: the root); returns its index."""
        if parent >= len(self.tokens):
            raise ValueError(f"draft node {len(self.tokens)} names parent {parent}, which does not come before it")
        self.tokens.append(int(token))
        self.parents.append(int(parent))
        self.scores.append(float(score))
        return len(self.tokens) - 1

    def depths(self) -> list[int]:
        """[N] the number of draft tokens on each node's path, itself included."""
        out: list[int] = []
        for p in self.parents:
            out.append(1 if p < 0 else out[p] + 1)
        return out

    def path(self, node: int) -> list[int]:
        """The draft tokens from the root down to ``node``."""
        out = []
        while node >= 0:
            out.append(self.tokens[node])
            node = self.parents[node]
        return out[::-1]

    def subset(self, keep: Sequence[int]) -> DraftTree:
        """The nodes ``keep`` (closed under parents, in the tree's order), renumbered."""
        index = {k: i for i, k in enumerate(sorted(keep))}
        out = DraftTree()
        for k in sorted(keep):
            p = self.parents[k]
            if p >= 0 and p not in index:
                raise ValueError(f"draft node {k} is kept without its parent {p}")
            out.add(index[p] if p >= 0 else -1, self.tokens[k], self.scores[k])
        return out


@dataclass(frozen=True)
class Branch:
    """A speculating branch as a drafter sees it: ``context`` holds its whole path (prompt and
    the tokens generated so far) as KV segments; the branch's next token follows the context's
    last token. ``key`` identifies the branch for the whole decode call.

    ``sampling`` and ``seed`` are how the target draws the branch's tokens (None: unknown). The
    draws are seeded Gumbel-max: the token after ``generated`` and ``d`` more tokens is the argmax
    of the target's scores plus noise of (seed, ``len(generated) + d``) alone
    (:func:`~..sampler.perturbed_scores`), so a drafter with a model of its own can add the same
    noise to its scores and propose the token the target would draw if the two models agreed.
    """

    key: int
    context: Segment
    generated: Sequence[int]
    sampling: Sampling | None = None
    seed: int = 0

    def tokens(self, last: int) -> list[int]:
        """The last ``last`` tokens of the branch's path (fewer when the path is shorter)."""
        out: list[int] = []
        seg: Segment | None = self.context
        while seg is not None and len(out) < last:
            out = seg.tokens[-(last - len(out)) :] + out
            seg = seg.parent
        return out


@runtime_checkable
class Drafter(Protocol):
    """Proposes draft trees; implement this to plug in your own drafter.

    Within one decode call the engine calls :meth:`begin` once, then per step :meth:`propose`
    for the branches that may speculate and :meth:`accepted` with what verification kept, then
    :meth:`end` (also when the call fails).
    """

    def begin(self, kv: KVTree, branches: Sequence[Branch]) -> None:
        """A decode call starts; ``kv`` is the target's KV tree, which holds every live node."""
        ...

    def propose(self, branches: Sequence[Branch], max_nodes: int, max_depth: int) -> list[DraftTree]:
        """One draft tree per branch, each of at most ``max_nodes`` nodes and ``max_depth`` levels."""
        ...

    def accepted(self, branch: Branch, tokens: Sequence[int]) -> None:
        """``tokens`` were appended to ``branch`` this step (its context already holds them)."""
        ...

    def end(self) -> None:
        """The decode call is over: drop per-call state."""
        ...
