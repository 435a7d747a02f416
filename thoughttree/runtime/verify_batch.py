"""Verification steps of speculating branches on the decode buffers: chain drafts, planned once.

A batch of B branches has ``depth + 1`` query rows per branch, level-major (row = level * B +
branch): level 0 forwards the branch's newest token, level k its k-th draft token. The drafts
are appended to each branch's own segment before the step, so all rows of a branch read one
tail window (the segment's slots), each up to itself, and each row writes its KV where the
token's KV stays if it is kept: nothing is copied after verification, and the tokens it does
not keep are cut off again (:meth:`KVTree.truncate`). A step runs only the levels its longest
draft needs; the work of each level count is planned the first time a step needs it and loaded
with one copy (its windows refreshed to the segments' slots), so a run of steps plans the tree
at most ``depth + 1`` times. Each row's token is drawn on the device with its request's seed and
the position the drawn token takes, as a plain decode step draws it. A finished branch stays as
padding rows until half the batch has finished, as in :class:`decode_batch.DecodeBatch`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np

from ..kernels import plan_tree_attention
from ..kernels.plan.decode_work import DecodeWork, decode_work
from .arena_buffers import Capacity, StepInputs
from .kv_pool import KVPoolExhausted
from .decode_batch import draw_filtered, filters, longest_tail, parent_tree, put_sampling
from .kv_tree import Segment

if TYPE_CHECKING:
    from .decode_requests import DecodeRequest
    from .engine import Engine

PLACEHOLDER = -1  # the slot of the token a step emits after the drafts it keeps, its value not drawn yet


class VerifyBatch:
    """Fixed-buffer verification steps for ``requests`` (the engine's request numbers ``ids``)
    whose generated segments ``tails`` hold at least one token each, with drafts of at most
    ``depth`` tokens per branch."""

    def __init__(
        self,
        engine: Engine,
        ids: Sequence[int],
        requests: Sequence[DecodeRequest],
        tails: Sequence[Segment],
        depth: int,
    ) -> None:
        if any(not t.tokens for t in tails):
            raise ValueError("verification on the decode buffers starts after each branch's first token")
        self.engine, self.ids, self.requests, self.tails = engine, list(ids), list(requests), list(tails)
        self.depth = depth
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
        deepest = self._work(depth)  # its capacity holds every smaller level count's work
        rows = (depth + 1) * len(self.ids)
        self._deepest = Capacity.needed(deepest, rows, len(deepest.host.shapes))

    def _work(self, levels: int) -> DecodeWork:
        """The work of a step whose drafts have at most ``levels`` tokens (planned once)."""
        if levels not in self._works:
            b = len(self.ids)
            engine = self.engine
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
                [t.slot_array for t in self.tails],
                self.tail_cap,
                m.num_heads,
                m.num_kv_heads,
                m.cfg.head_dim,
                engine.decode_work_config,
                share=engine.attention == "deft",
                windows=list(range(b)) * (levels + 1),
            )
            engine.stats.plan_builds += 1
        return self._works[levels]

    def _load(self, levels: int) -> None:
        """Load the work of ``levels`` into the arena, its windows holding the tails' slots now."""
        engine = self.engine
        work = self._works[levels] if levels in self._works else self._work(levels)
        slots = work.host.slots
        for b, t in enumerate(self.tails):
            base = int(work.tail_base[b])
            slots[base : base + len(t.slots)] = t.slots
        rows = (levels + 1) * len(self.ids)
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

    def verify(self, ids: Sequence[int], drafts: Mapping[int, Sequence[int]]) -> dict[int, np.ndarray]:
        """Forward the newest token of each request in ``ids`` and its draft tokens ``drafts[i]``
        (none where absent) and draw the token after each; returns per request its draws [j + 1, 2]
        (token, log-probability) after its newest token and after each of its j draft tokens.

        On return each request's segment holds its newest token, its drafts (their KV written)
        and a placeholder for the token the step emits; a draft the pool has no room for is
        dropped (that branch verifies nothing this step).
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
            raise ValueError(f"a draft of {levels} tokens exceeds the batch's depth {self.depth}")
        self.fresh = levels not in self._works
        if self._loaded != levels:
            self._load(levels)
        rows = (levels + 1) * b_all
        at: list[int] = []
        token_list: list[int] = []
        slot_list: list[int] = []
        position_list: list[int] = []
        length_list: list[int] = []
        for i, seg, n, draft in zip(ids, segs, start, kept):
            b, j = self.row_of[i], len(draft)
            at += range(b, b + (j + 1) * b_all, b_all)
            token_list += seg.tokens[n - 1 : n + j]
            slot_list += seg.slots[n - 1 : n + j]
            position_list += range(seg.start + n - 1, seg.start + n + j)
            length_list += range(n, n + j + 1)
        inputs = StepInputs.empty(rows)
        tokens, positions, slots, tail_lens = inputs.tokens, inputs.positions, inputs.slots, inputs.tail_lens
        inputs.array[:] = 0  # padding rows: token 0 at position 0, no tail, the scratch slot
        slots[:] = kv.pool.scratch_slot
        tokens[at], positions[at], slots[at], tail_lens[at] = token_list, position_list, slot_list, length_list
        held = self.arena.num_graphs
        logits = self.arena.step(inputs)
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
