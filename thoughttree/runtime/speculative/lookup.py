"""The tree-lookup drafter: continuations of the branch's last tokens found in the thought tree.

Search trees repeat themselves: sibling proposals share first steps, bookkeeping lines recur,
code shares scaffolding. So the text that followed the branch's last ``n`` tokens anywhere in
the same tree (the prompt, the branch's own path, every other live or finished node, and the
branches decoding beside it) is a good guess at what follows them now. The KV tree holds all of
that text once, shared by prefix, so the index is built over its segments: for every position,
the n-grams ending there (n = 1 .. ``ngram``) map to the position after them. A match's
continuation runs on through the segment and, where the segment ends, into each of its
children, so distinct continuations become distinct branches of the draft tree; each node's
score is its share of the matches through its parent, times its parent's score. For a sampled
branch the shares are those of the perturbed argmax: the siblings' counts plus the Gumbel noise
the target's sampler will add at that draw step, so the continuation the target's own draw would
pick, were the matches' distribution its own, is drafted first.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch

from ...kernels.reference import uniform_noise_at
from .drafter import Branch, DraftTree

if TYPE_CHECKING:
    from ..kv_tree import KVTree, Segment


class TreeLookup:
    """A :class:`~.drafter.Drafter` over the thought tree's own tokens (no extra model).

    ``ngram``: the longest suffix matched (the longest one that has matches wins);
    ``max_matches``: how many continuations one proposal gathers at most.
    """

    def __init__(self, ngram: int = 3, max_matches: int = 16) -> None:
        if ngram < 1 or max_matches < 1:
            raise ValueError(f"TreeLookup needs ngram >= 1 and max_matches >= 1, got {ngram} and {max_matches}")
        self.ngram, self.max_matches = ngram, max_matches
        self._index: dict[tuple[int, ...], list[tuple[Segment, int]]] = defaultdict(list)
        self._done: dict[int, int] = {}  # segment id -> how many of its tokens are indexed

    def begin(self, kv: KVTree, branches: Sequence[Branch]) -> None:
        self._index.clear()
        self._done.clear()
        roots = {id(b.context.path()[0]): b.context.path()[0] for b in branches}
        stack = list(roots.values())
        while stack:
            seg = stack.pop()
            self._add(seg)
            stack.extend(seg.children)

    def _add(self, seg: Segment) -> None:
        """Index the n-grams that end at ``seg``'s tokens not indexed yet."""
        start = self._done.get(seg.id, 0)
        if start >= len(seg.tokens):
            return
        n = self.ngram
        before: list[int] = []  # the n - 1 tokens before the segment, from its ancestors
        p = seg.parent
        while p is not None and len(before) < n - 1:
            before = p.tokens[-(n - 1 - len(before)) :] + before
            p = p.parent
        text = before + seg.tokens
        shift = len(before)
        index = self._index
        for j in range(start, len(seg.tokens)):
            end = shift + j + 1  # the n-gram ends at token j; its continuation starts at j + 1
            for k in range(1, min(n, end) + 1):
                index[tuple(text[end - k : end])].append((seg, j + 1))
        self._done[seg.id] = len(seg.tokens)

    def propose(self, branches: Sequence[Branch], max_nodes: int, max_depth: int) -> list[DraftTree]:
        # Branches of a batch often end in the same n-gram (siblings, shared bookkeeping text): one
        # lookup serves them all within a step; each sampled branch ranks the continuations with
        # its own noise.
        memo: dict[tuple[int, ...], tuple[_Trie, float] | None] = {}
        tails = [tuple(b.tokens(self.ngram)) for b in branches]
        for tail in tails:
            if tail not in memo:
                memo[tail] = self._lookup(tail, max_depth)
        found = [memo[tail] for tail in tails]
        noise = _edge_noise(branches, found)
        greedy: dict[tuple[int, ...], DraftTree] = {}  # a greedy branch's draft depends on its trie alone
        out = []
        for tail, f, g in zip(tails, found, noise):
            if f is None:
                out.append(DraftTree())
            elif g is not None:
                out.append(f[0].draft(f[1], max_nodes, g))
            else:
                if tail not in greedy:
                    greedy[tail] = f[0].draft(f[1], max_nodes, None)
                out.append(greedy[tail])
        return out

    def _lookup(self, tail: tuple[int, ...], max_depth: int) -> tuple[_Trie, float] | None:
        """The trie of the continuations of the longest suffix of ``tail`` that has any, and its
        weight (a shorter match is weaker evidence: its scores are scaled down so the cost model
        can tell, as it bins acceptance by score)."""
        for k in range(len(tail), 0, -1):
            conts = self._continuations(self._index.get(tail[-k:], ()), max_depth)
            if conts:
                return _Trie(conts), k / self.ngram
        return None

    def _continuations(self, hits: Sequence[tuple[Segment, int]], depth: int) -> list[list[int]]:
        """Up to ``max_matches`` non-empty continuations of ``depth`` tokens at most, newest hits first
        (a hit at the end of a branch still decoding has none yet)."""
        out: list[list[int]] = []
        for seg, j in reversed(hits):
            stack: list[tuple[Segment, int, list[int]]] = [(seg, j, [])]
            while stack and len(out) < self.max_matches:
                s, i, acc = stack.pop()
                acc = acc + s.tokens[i : i + depth - len(acc)]
                if len(acc) >= depth or not s.children:
                    if acc:
                        out.append(acc)
                    continue
                kids = [c for c in s.children if c.tokens]
                stack.extend((c, 0, acc) for c in reversed(kids))
                if acc and not kids:
                    out.append(acc)
            if len(out) >= self.max_matches:
                break
        return out

    def accepted(self, branch: Branch, tokens: Sequence[int]) -> None:
        self._add(branch.context)

    def end(self) -> None:
        self._index.clear()
        self._done.clear()


class _Trie:
    """Continuations merged by prefix: node 0 is the branch's newest token; node k > 0 holds
    ``token[k]`` under ``parent[k]`` (an earlier node) and ``count[k]`` of the continuations pass
    through it."""

    def __init__(self, conts: list[list[int]]) -> None:
        children: list[dict[int, int]] = [{}]
        count, parent, token, depth = [len(conts)], [-1], [-1], [0]
        for seq in conts:
            at = 0
            for t in seq:
                nxt = children[at].get(t)
                if nxt is None:
                    nxt = children[at][t] = len(count)
                    children.append({})
                    count.append(0)
                    parent.append(at)
                    token.append(t)
                    depth.append(depth[at] + 1)
                count[nxt] += 1
                at = nxt
        self.token, self.parent, self.depth = token, parent, depth
        self._count = np.asarray(count, dtype=np.float64)
        self._parent = np.asarray(parent[1:], dtype=np.int64)  # of nodes 1..n-1
        nodes = np.arange(1, len(count))
        self._levels = [nodes[np.asarray(depth[1:]) == d] for d in range(1, max(depth) + 1)]
        below = np.zeros(len(count))
        np.add.at(below, self._parent, self._count[1:])
        self._reach = below / self._count  # continuations that go on past each node

    def draft(self, weight: float, max_nodes: int, noise: np.ndarray | None) -> DraftTree:
        """The ``max_nodes`` best-scored nodes as a draft tree. A node's score is ``weight`` times
        its parent's times its share among its siblings, the siblings' counts taken as the
        distribution the target draws from: with ``noise`` (each node's Gumbel noise at its draw
        step, sampled branches) the share is the chance that the node wins the perturbed argmax
        (the softmax of log-counts plus noise), so the sibling the target's own draw would pick,
        were that distribution its own, comes first; without it the share is the count's."""
        n = len(self.token)
        if n == 1:
            return DraftTree()
        up = self._parent
        v = np.log(self._count[1:])
        if noise is not None:
            v = v + noise[1:]
        top = np.full(n, -np.inf)
        np.maximum.at(top, up, v)
        e = np.exp(v - top[up])
        total = np.zeros(n)
        np.add.at(total, up, e)
        step = np.ones(n)
        step[1:] = self._reach[up] * e / total[up]
        score = np.ones(n)
        for level in self._levels:
            score[level] = score[self._parent[level - 1]] * step[level]
        best = np.lexsort((np.arange(1, n), -score[1:]))[:max_nodes] + 1  # parents outrank children
        keep = sorted(best.tolist())
        index = {k: i for i, k in enumerate(keep)}
        draft = DraftTree()
        for k in keep:
            p = self.parent[k]
            draft.add(index[p] if p > 0 else -1, self.token[k], weight * float(score[k]))
        return draft


def _edge_noise(branches: Sequence[Branch], found: Sequence[tuple[_Trie, float] | None]) -> list[np.ndarray | None]:
    """Per branch, the Gumbel noise of each trie node's token at the step the target draws it
    (seeded like the sampler: :func:`~...kernels.reference.uniform_noise_at`), in one call for
    all sampled branches; None for greedy branches and branches without a match."""
    seeds: list[int] = []
    steps: list[int] = []
    ids: list[int] = []
    spans: list[tuple[int, int] | None] = []
    for b, f in zip(branches, found):
        if f is None or b.sampling is None or b.sampling.temperature == 0:
            spans.append(None)
            continue
        trie = f[0]
        at = len(ids)
        seeds += [b.seed & ((1 << 63) - 1)] * len(trie.token)
        steps += [len(b.generated) + d - 1 for d in trie.depth]
        ids += [max(t, 0) for t in trie.token]
        spans.append((at, len(ids)))
    if not ids:
        return [None] * len(branches)
    u = uniform_noise_at(torch.tensor(seeds), torch.tensor(steps), torch.tensor(ids)).double().numpy()
    g = -np.log(-np.log(u))
    return [None if s is None else g[s[0] : s[1]] for s in spans]
