"""Verification steps of speculating branches on the decode buffers: draft chains and trees, planned once.

A batch of B branches has ``depth + 1`` query rows per branch, node-major (row = k * B +
branch): row 0 of a branch forwards its newest token (before its first, its parent's last), row
k its k-th draft node. The drafts are appended to each branch's own segment before the step, in
node order, and each row writes its KV there; a step runs only as many node rows as its largest
draft needs. The work of each node count is planned the first time a step needs it and loaded
with one copy, so a run of steps plans the tree at most ``depth + 1`` times. Each row's token is
drawn on the device with its request's seed and the position the drawn token takes, as a plain
decode step draws it. A finished branch stays as padding rows until half the batch has
finished, as in :class:`decode_batch.DecodeBatch`.

What each row sees of the tokens after the branch's parent path is a tail window of slots:

- chains: all rows of a branch read one window (the segment's slots), each up to itself. A
  chain's kept tokens are a prefix of its drafts, so their KV already stands where it stays, and
  the tokens a step does not keep are cut off again (:meth:`KVTree.truncate`);
- trees (``tree=True``): every row has a window of its own, holding the branch's tokens before
  the step and then the slots of its node's ancestors and its own, rewritten before each step
  (:meth:`DecodeArena.put_slots`). The caller moves the kept path's KV to the front of the
  drafts (the first kept node's KV into the first draft slot, and so on) before it cuts the rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np

from ..kernels import plan_tree_attention
from ..kernels.plan.decode_work import DecodeWork, decode_work
from .arena_buffers import Capacity, StepInputs
from .kv_pool import KVPoolExhausted
from .decode_batch import draw_filtered, filters, longest_tail, parent_slot, parent_tree, put_sampling
from .kv_tree import Segment

if TYPE_CHECKING:
    from .decode_requests import DecodeRequest
    from .engine import Engine

PLACEHOLDER = -1  # the slot of the token a step emits after the drafts it keeps, its value not drawn yet


class VerifyBatch:
    """Fixed-buffer verification steps for ``requests`` (the engine's request numbers ``ids``)
    whose generated segments are ``tails``, with drafts of at most ``depth`` nodes per branch. A
    segment still empty (the call's first step) verifies after its parent's last token, whose KV
    the step writes if the parent lacks it, as plain decoding's first step does."""

    def __init__(
        self,
        engine: Engine,
        ids: Sequence[int],
        requests: Sequence[DecodeRequest],
        tails: Sequence[Segment],
        depth: int,
        tree: bool = False,
    ) -> None:
        self.engine, self.ids, self.requests, self.tails = engine, list(ids), list(requests), list(tails)
        self.depth, self.tree = depth, tree
        self.row_of = {i: b for b, i in enumerate(self.ids)}
        order, self._parents, self._nodes = parent_tree(self.requests)
        self._segments = order
        self._shared_tokens = sum(len(s.tokens) for s in order)
        self._parent_tokens = sum(r.parent.end for r in self.requests)
        # A step's drafts stop short of a branch's length limit, so that its placeholder fits too.
        self.tail_cap = longest_tail(engine, self.requests)
        self.filtered = filters(self.requests)
        self._works: dict[int, DecodeWork] = {}
        self._loaded: int | None = None
        self.fresh = False  # whether the last step planned its work or captured a graph (not a step's usual cost)
        # Trees: how many leading slots of each row's window hold its branch's tokens now.
        self._valid = np.zeros((depth + 1) * len(self.ids), dtype=np.int64)
        deepest = self._work(depth)  # its capacity holds every smaller level count's work
        rows = (depth + 1) * len(self.ids)
        self._deepest = Capacity.needed(deepest, rows, len(deepest.host.shapes))

    def _work(self, levels: int) -> DecodeWork:
        """The work of a step whose drafts have at most ``levels`` nodes (planned once)."""
        if levels not in self._works:
            b = len(self.ids)
            engine = self.engine
            # A tree's nodes may outnumber the room left in a window (a window holds one path).
            tails = [t.slot_array[: self.tail_cap] for t in self.tails]
            plan = plan_tree_attention(
                self._parents,
                [s.slot_array for s in self._segments],
                self._nodes * (levels + 1),
                page_size=engine.kv.pool.page_size,
                device=engine.model.device,
            )
            m = engine.model
            self._works[levels] = decode_work(
                plan,
                tails * (levels + 1) if self.tree else tails,
                self.tail_cap,
                m.num_heads,
                m.num_kv_heads,
                m.cfg.head_dim,
                engine.decode_work_config,
                share=engine.attention == "deft",
                windows=None if self.tree else list(range(b)) * (levels + 1),
            )
            engine.stats.plan_builds += 1
        return self._works[levels]

    def _load(self, levels: int) -> None:
        """Load the work of ``levels`` into the arena, its windows holding the tails' slots now."""
        engine = self.engine
        work = self._works[levels] if levels in self._works else self._work(levels)
        slots = work.host.slots
        rows = (levels + 1) * len(self.ids)
        for r in range(rows if self.tree else len(self.ids)):
            held = self.tails[r % len(self.ids)].slots[: self.tail_cap]
            base = int(work.tail_base[r])
            slots[base : base + len(held)] = held
            self._valid[r] = len(held)
        need = Capacity.needed(work, rows, len(work.host.shapes)).union(self._deepest)
        self.arena = engine.arena_for(need, work.host.shapes)
        self.arena.load(work, rows)
        put_sampling(self.arena, self.requests * (levels + 1))
        engine.stats.note_graphs(self.arena)
        self._loaded = levels

    def reload(self) -> None:
        """Load the work again before the next step (a general forward used the arena since)."""
        self._loaded = None

    def keeps(self, ids: Sequence[int]) -> bool:
        """Whether a step of requests ``ids`` goes on with this batch (more than half of it live)."""
        return 2 * len(ids) > len(self.tails) and all(i in self.row_of for i in ids)

    def verify(
        self,
        ids: Sequence[int],
        drafts: Mapping[int, Sequence[int]],
        parents: Mapping[int, Sequence[int]] | None = None,
    ) -> dict[int, np.ndarray]:
        """Forward the newest token of each request in ``ids`` and its draft nodes ``drafts[i]``
        (none where absent) and draw the token after each; returns per request its draws [j + 1, 2]
        (token, log-probability) after its newest token and after each of its j draft nodes.

        ``parents[i][k]``: the draft node before node k of request i (-1: its newest token; a
        parent comes before its children); without it every draft is a chain. Trees need a batch
        made with ``tree=True``.

        On return each request's segment holds its newest token, its draft nodes in order (their
        KV written) and a placeholder for the token the step emits; a draft the pool has no room
        for is dropped (that branch verifies nothing this step).
        """
        engine, kv = self.engine, self.engine.kv
        b_all = len(self.tails)
        segs = [self.tails[self.row_of[i]] for i in ids]
        start = [len(seg.tokens) for seg in segs]
        kept: list[Sequence[int]] = []
        try:
            for seg, i in zip(segs, ids):
                draft = drafts.get(i, ())
                try:  # the drafts and the emitted token's slot, which plain decoding needs too
                    kv.extend(seg, [*draft, PLACEHOLDER])
                    kept.append(draft)
                except KVPoolExhausted:  # no room for this branch's drafts: it verifies none
                    kv.extend(seg, [PLACEHOLDER])
                    kept.append(())
        except KVPoolExhausted:  # other branches' drafts took the room: none drafts, as plain decoding
            for seg, n in zip(segs, start):
                kv.truncate(seg, n)
            kv.append_each(segs, [PLACEHOLDER] * len(segs))
            kept = [()] * len(segs)
        levels = max(map(len, kept), default=0)
        if levels > self.depth:
            raise ValueError(f"a draft of {levels} nodes exceeds the batch's depth {self.depth}")
        ups = [_parents(parents.get(i) if parents is not None and d else None, len(d)) for i, d in zip(ids, kept)]
        if not self.tree and any(p != list(range(-1, len(p) - 1)) for p in ups):
            raise ValueError("draft trees (not chains) need a VerifyBatch made with tree=True")
        self.fresh = levels not in self._works
        if self._loaded != levels:
            self._load(levels)
        rows = (levels + 1) * b_all
        at: list[int] = []
        token_list: list[int] = []
        slot_list: list[int] = []
        position_list: list[int] = []
        length_list: list[int] = []
        scratch = kv.pool.scratch_slot
        lacking: dict[int, Segment] = {}  # parents whose last token's KV this step writes
        for i, seg, n, draft, up in zip(ids, segs, start, kept, ups):
            b, j = self.row_of[i], len(draft)
            at += range(b, b + (j + 1) * b_all, b_all)
            if n:
                token_list += seg.tokens[n - 1 : n + j]
                slot_list += seg.slots[n - 1 : n + j]
            else:  # the first step: the parent's last token, its KV written by one row per parent
                p = self.requests[b].parent
                token_list += [p.tokens[-1], *seg.tokens[:j]]
                slot_list += [parent_slot(p, lacking, scratch), *seg.slots[:j]]
            depth = [0, *_depths(up)]
            position_list += [seg.start + n - 1 + d for d in depth]
            length_list += [n + d for d in depth]
        if self.tree:
            self._put_windows(self._works[levels].tail_base, at, segs, start, ups)
        inputs = StepInputs.empty(rows)
        tokens, positions, slots, tail_lens = inputs.tokens, inputs.positions, inputs.slots, inputs.tail_lens
        inputs.array[:] = 0  # padding rows: token 0 at position 0, no tail, the scratch slot
        slots[:] = kv.pool.scratch_slot
        tokens[at], positions[at], slots[at], tail_lens[at] = token_list, position_list, slot_list, length_list
        held = self.arena.num_graphs
        logits = self.arena.step(inputs)
        for p in lacking.values():
            p.written = len(p.tokens)
        stats = engine.stats
        stats.forward_steps += 1
        stats.fast_steps += 1
        stats.graph_replays += int(self.arena.replayed)
        stats.note_graphs(self.arena, held)
        self.fresh = self.fresh or self.arena.num_graphs != held
        grown = len(at) + sum(start) - len(ids)
        stats.attended_tokens += self._parent_tokens + grown
        stats.unique_tokens += self._shared_tokens + grown
        if self.filtered:
            draw_filtered(self.arena, logits, self.requests * (levels + 1), tail_lens)
        host = self.arena.collect(self.arena.publish())[:rows].reshape(levels + 1, b_all, 2)
        out = {}
        for i, seg, n, draft in zip(ids, segs, start, kept):
            seg.written = n + len(draft)  # the newest token and every draft token have KV now
            out[i] = host[: len(draft) + 1, self.row_of[i]].copy()
        return out

    def _put_windows(
        self,
        tail_base: np.ndarray,
        at: Sequence[int],
        segs: Sequence[Segment],
        start: Sequence[int],
        ups: Sequence[list[int]],
    ) -> None:
        """Write each row's window (rows ``at``, branch by branch, each branch's newest token
        first; ``tail_base`` [R]: where each row's window starts): its branch's tokens before the
        step, then the slots of its node's ancestors and its own."""
        counts = np.array([len(u) + 1 for u in ups])
        first = np.concatenate([[0], np.cumsum(counts)[:-1]])  # each branch's first row, in ``at`` order
        branch = np.repeat(np.arange(len(segs)), counts)
        n = np.repeat(np.asarray(start, dtype=np.int64), counts)
        node = np.arange(counts.sum()) - first[branch] - 1  # -1: the branch's newest token
        parent = np.concatenate([[-1, *(f + 1 + np.asarray(u, dtype=np.int64))] for f, u in zip(first, ups)])
        depth = np.concatenate([[0, *_depths(u)] for u in ups]).astype(np.int64)
        rows = np.asarray(at, dtype=np.int64)
        lo = np.minimum(self._valid[rows], n)
        # path[r, j]: the position in its segment of row r's ancestor at depth j + 1 (its own at the last).
        path = np.zeros((len(rows), max(1, int(depth.max()))), dtype=np.int64)
        cur = np.arange(len(rows))
        while (live := cur >= 0).any():
            has = live & (depth[np.maximum(cur, 0)] > 0)
            here = cur[has]
            path[has, depth[here] - 1] = n[has] + node[here]
            cur = np.where(has, parent[np.maximum(cur, 0)], -1)
        # The slots each branch may need, from the least any of its rows already holds.
        least = np.minimum.reduceat(lo, first)
        pieces = [
            np.asarray(seg.slots[a : m + len(u) + 1], dtype=np.int64) for seg, a, m, u in zip(segs, least, start, ups)
        ]
        offset = np.concatenate([[0], np.cumsum([len(x) for x in pieces])[:-1]]) - least
        total = n + depth - lo  # window offsets lo .. n + depth - 1 of each row
        rr = np.repeat(np.arange(len(rows)), total)
        o = np.arange(total.sum()) - np.repeat(np.cumsum(total) - total, total) + lo[rr]
        at_path = path[rr, np.clip(o - n[rr], 0, path.shape[1] - 1)]
        slots = np.concatenate(pieces)[offset[branch[rr]] + np.where(o < n[rr], o, at_path)]
        self.arena.put_slots(tail_base[rows[rr]] + o, slots)
        self._valid[rows] = n


def _parents(given: Sequence[int] | None, count: int) -> list[int]:
    """A draft's parents (a chain's when ``given`` is None), checked to come before their children."""
    up = list(range(-1, count - 1)) if given is None else [int(p) for p in given]
    if len(up) != count or any(not -1 <= p < k for k, p in enumerate(up)):
        raise ValueError(f"draft parents {given!r} must give each of the {count} nodes an earlier node or -1")
    return up


def _depths(parents: Sequence[int]) -> list[int]:
    """[N] how many draft nodes each node's path holds, itself included."""
    out: list[int] = []
    for p in parents:
        out.append(1 if p < 0 else out[p] + 1)
    return out
