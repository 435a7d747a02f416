"""The tree-lookup drafter: continuations of the branch's last tokens found in the thought tree.

Search trees repeat themselves: sibling proposals share first steps, bookkeeping lines recur,
code shares scaffolding. So the text that followed the branch's last ``n`` tokens anywhere in
the same tree (the prompt, the branch's own path, every other live or finished node, and the
branches decoding beside it) is a good guess at what follows them now. The KV tree holds all of
that text once, shared by prefix, so the index is built over its segments: for every position,
the n-grams ending there (n = 1 .. ``ngram``) map to the position after them. A match's
continuation runs on through the segment and, where the segment ends, into each of its
children, so distinct continuations become distinct branches of the draft tree; each node's
score is the share of the matches that pass through it.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Sequence

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
        # lookup serves them all within a step.
        memo: dict[tuple[int, ...], DraftTree] = {}
        out = []
        for b in branches:
            tail = tuple(b.tokens(self.ngram))
            if tail not in memo:
                memo[tail] = self._propose(tail, max_nodes, max_depth)
            out.append(memo[tail])
        return out

    def _propose(self, tail: tuple[int, ...], max_nodes: int, max_depth: int) -> DraftTree:
        for k in range(len(tail), 0, -1):
            conts = self._continuations(self._index.get(tail[-k:], ()), max_depth)
            if conts:
                # A shorter match is weaker evidence: its scores are scaled down so the cost model
                # can tell (it bins acceptance by score).
                return _trie(conts, max_nodes, k / self.ngram)
        return DraftTree()

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


def _trie(conts: list[list[int]], max_nodes: int, weight: float) -> DraftTree:
    """The continuations merged into a draft tree, scored by ``weight`` times the share of them
    through each node, keeping the ``max_nodes`` best-scored nodes."""
    children: list[dict[int, int]] = [{}]  # trie node 0 is the branch's newest token
    counts = [0]
    parent_of = [-1]
    token_of = [-1]
    for seq in conts:
        at = 0
        for t in seq:
            nxt = children[at].get(t)
            if nxt is None:
                nxt = children[at][t] = len(counts)
                children.append({})
                counts.append(0)
                parent_of.append(at)
                token_of.append(t)
            counts[nxt] += 1
            at = nxt
    total = len(conts)
    best = sorted(range(1, len(counts)), key=lambda k: (-counts[k], k))[:max_nodes]  # parents outrank children
    keep = sorted(best)
    index = {k: i for i, k in enumerate(keep)}
    draft = DraftTree()
    for k in keep:
        p = parent_of[k]
        draft.add(index[p] if p > 0 else -1, token_of[k], weight * counts[k] / total)
    return draft
