"""The KV tree: a forest of token segments in the paged pool, shared by prefix, freed by refcount.

A segment holds some tokens and their KV slots; its parent holds the tokens before them. A
segment's ``refs`` count its child segments plus outside holders (tree nodes, requests); at
zero its pages are released and its parent loses a reference, so a segment lives as long as
any descendant. New token sequences are matched against finished (sealed) segments radix-style,
splitting a segment where a match ends inside it, so equal prefixes are stored once.
Tokens get slots when inserted and KV when the next forward step that touches them runs
(``written`` counts how many of a segment's tokens already have KV).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from .kv_pool import KVPool


@dataclass(eq=False)
class Segment:
    id: int
    parent: Segment | None
    tokens: list[int]
    slots: list[int]
    start: int  # position of the first token in its sequence
    refs: int = 0
    sealed: bool = True  # finished: may be matched and split; unsealed segments are still decoding
    written: int = 0
    generated: bool = False  # made by decoding (its tokens count as generated, not prefilled)
    children: list[Segment] = field(default_factory=list)
    _slot_array: np.ndarray | None = field(default=None, repr=False)

    @property
    def end(self) -> int:
        return self.start + len(self.tokens)

    @property
    def slot_array(self) -> np.ndarray:
        if self._slot_array is None or len(self._slot_array) != len(self.slots):
            self._slot_array = np.asarray(self.slots, dtype=np.int64)
        return self._slot_array

    def has_kv_but_last(self) -> bool:
        """Whether every token on this segment's path has its KV, except perhaps its own last."""
        return self.written >= len(self.tokens) - 1 and all(s.written == len(s.tokens) for s in self.path()[:-1])

    def path(self) -> list[Segment]:
        out: list[Segment] = []
        seg: Segment | None = self
        while seg is not None:
            out.append(seg)
            seg = seg.parent
        return out[::-1]


def _common_prefix(seg: list[int], tokens: list[int], i: int) -> int:
    """How many leading tokens of ``seg`` equal ``tokens[i:]``: list slices compared in C, a
    whole segment at once where it matches, else by halving."""
    top = min(len(seg), len(tokens) - i)
    if seg[:top] == tokens[i : i + top]:
        return top
    lo, hi = 0, top  # the first lo tokens match, the first hi do not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if seg[lo:mid] == tokens[i + lo : i + mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _pages(slots: list[int], page_size: int) -> list[int]:
    return sorted({s // page_size for s in slots})


class KVTree:
    """Segments over one :class:`KVPool`."""

    def __init__(self, pool: KVPool) -> None:
        self.pool = pool
        self.roots: list[Segment] = []
        self.segments: dict[int, Segment] = {}
        self._next_id = 0

    # -- creation ------------------------------------------------------------------------------
    def _new(self, parent: Segment | None, tokens: list[int], sealed: bool) -> Segment:
        ps = self.pool.page_size
        slots: list[int] = []
        for page in self.pool.alloc(-(-len(tokens) // ps)):
            slots += range(page * ps, page * ps + ps)
        del slots[len(tokens) :]
        seg = Segment(self._next_id, parent, list(tokens), slots, parent.end if parent else 0, sealed=sealed)
        self._next_id += 1
        self.segments[seg.id] = seg
        (parent.children if parent else self.roots).append(seg)
        if parent is not None:
            parent.refs += 1
        return seg

    def insert(self, parent: Segment | None, tokens: list[int]) -> Segment:
        """Add ``tokens`` after ``parent`` sharing what already exists; returns the tail segment, retained once.

        A sequence that exists already in full returns the segment ending there (split off if
        the match ends inside one); the engine recomputes its last row when logits are wanted.
        """
        limit = len(tokens)
        node, i = parent, 0
        while i < limit:
            best, best_len = None, 0
            for child in node.children if node else self.roots:
                if not child.sealed or child.tokens[0] != tokens[i]:
                    continue
                n = _common_prefix(child.tokens, tokens, i)
                if n > best_len:
                    best, best_len = child, n
            if best is None:
                break
            if best_len < len(best.tokens):
                best = self._split(best, best_len)
            node, i = best, i + best_len
        tail = node if i == len(tokens) else self._new(node, tokens[i:], sealed=True)
        if tail is None:
            raise ValueError("cannot insert an empty sequence at the root")
        tail.refs += 1
        return tail

    def open_child(self, parent: Segment) -> Segment:
        """An empty, unsealed segment that decoding appends to; retained once for the caller."""
        seg = Segment(self._next_id, parent, [], [], parent.end, sealed=False, generated=True)
        self._next_id += 1
        self.segments[seg.id] = seg
        parent.children.append(seg)
        parent.refs += 1
        seg.refs = 1
        return seg

    def append_each(self, segs: Sequence[Segment], tokens: Sequence[int]) -> None:
        """Add ``tokens[i]`` to unsealed segment ``segs[i]``, each segment once; a segment whose last
        page is full gets a new one. Raises KVPoolExhausted, changing nothing, when the pool has
        too few free pages."""
        ps = self.pool.page_size
        pages = iter(self.pool.alloc(sum(1 for s in segs if len(s.slots) % ps == 0)))
        for seg, token in zip(segs, tokens):
            assert not seg.sealed, "only decoding segments grow"
            slots = seg.slots
            slots.append(slots[-1] + 1 if len(slots) % ps else next(pages) * ps)
            seg.tokens.append(token)

    def new_pages(self, seg: Segment, n: int) -> int:
        """Pages that adding ``n`` tokens to ``seg`` takes from the pool (its last page first)."""
        room = -len(seg.slots) % self.pool.page_size
        return -(-(n - room) // self.pool.page_size) if n > room else 0

    def extend(self, seg: Segment, tokens: Sequence[int]) -> None:
        """Add ``tokens`` to unsealed ``seg`` (its last page first, then new ones). Raises
        KVPoolExhausted, changing nothing, when the pool has too few free pages."""
        assert not seg.sealed, "only decoding segments grow"
        ps, slots = self.pool.page_size, seg.slots
        have, add = len(slots), len(tokens)
        room = -have % ps
        pages = self.pool.alloc(self.new_pages(seg, add))
        if room:
            slots.extend(range(slots[-1] + 1, slots[-1] + 1 + min(room, add)))
        for page in pages:
            slots.extend(range(page * ps, page * ps + ps))
        del slots[have + add :]
        seg.tokens.extend(tokens)

    def truncate(self, seg: Segment, length: int) -> None:
        """Drop the tokens of unsealed, childless ``seg`` after its first ``length`` (draft tokens
        verification did not keep), releasing the pages only they used."""
        assert not seg.sealed and not seg.children, "only a decoding segment's own tip is cut back"
        if length >= len(seg.tokens):
            return
        ps = self.pool.page_size
        kept = seg.slots[length - 1] // ps if length else -1
        for page in _pages(seg.slots[length:], ps):
            if page != kept:
                self.pool.release(page)
        del seg.tokens[length:], seg.slots[length:]
        seg._slot_array = None  # grown back to this length, it may hold other slots
        seg.written = min(seg.written, length)

    def _split(self, seg: Segment, k: int) -> Segment:
        """Cut ``seg`` after its first k tokens; returns the new upper segment (seg keeps the rest and its id)."""
        ps = self.pool.page_size
        upper = Segment(
            self._next_id, seg.parent, seg.tokens[:k], seg.slots[:k], seg.start,
            refs=1, sealed=True, written=min(seg.written, k), generated=seg.generated, children=[seg],
        )
        self._next_id += 1
        self.segments[upper.id] = upper
        siblings = seg.parent.children if seg.parent else self.roots
        siblings[siblings.index(seg)] = upper
        if seg.slots[k - 1] // ps == seg.slots[k] // ps:
            self.pool.retain(seg.slots[k] // ps)  # the boundary page now serves both halves
        seg.parent, seg.tokens, seg.slots = upper, seg.tokens[k:], seg.slots[k:]
        seg.start, seg.written = seg.start + k, max(0, seg.written - k)
        return upper

    # -- lifetime ------------------------------------------------------------------------------
    def retain(self, seg: Segment) -> None:
        seg.refs += 1

    def release(self, seg: Segment) -> list[int]:
        """Drop one reference; frees segments that reach zero up the path. Returns freed segment ids."""
        freed = []
        cur: Segment | None = seg
        while cur is not None:
            if cur.refs < 1:
                raise RuntimeError(f"KV segment {cur.id} released more often than retained")
            cur.refs -= 1
            if cur.refs > 0:
                break
            for page in _pages(cur.slots, self.pool.page_size):
                self.pool.release(page)
            del self.segments[cur.id]
            (cur.parent.children if cur.parent else self.roots).remove(cur)
            freed.append(cur.id)
            cur = cur.parent
        return freed

    # -- checks --------------------------------------------------------------------------------
    @property
    def num_tokens(self) -> int:
        return sum(len(s.tokens) for s in self.segments.values())

    def check_integrity(self, holders: Counter[int] | None = None) -> None:
        """Refcounts equal children + holders, pages are owned exactly by segments, all reachable."""
        reach: set[int] = set()
        stack = list(self.roots)
        while stack:
            s = stack.pop()
            assert s.id not in reach, f"segment {s.id} reachable twice"
            reach.add(s.id)
            for c in s.children:
                assert c.parent is s, f"segment {c.id} does not point back to {s.id}"
                assert c.start == s.end, f"segment {c.id} starts at {c.start}, parent ends at {s.end}"
            stack.extend(s.children)
        assert reach == set(self.segments), "segments unreachable from the roots"
        owners: Counter[int] = Counter()
        for s in self.segments.values():
            assert len(s.tokens) == len(s.slots), f"segment {s.id} has {len(s.tokens)} tokens, {len(s.slots)} slots"
            assert s.tokens or not s.sealed, f"sealed segment {s.id} is empty"
            assert s.refs >= len(s.children) + (0 if holders is None else holders.get(s.id, 0))
            if holders is not None:
                assert s.refs == len(s.children) + holders.get(s.id, 0), (
                    f"segment {s.id} has {s.refs} refs but {len(s.children)} children and "
                    f"{holders.get(s.id, 0)} holders"
                )
            owners.update(_pages(s.slots, self.pool.page_size))
        self.pool.check_integrity(owners)
