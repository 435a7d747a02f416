"""The decode steps of one batch of branches, from its first token until half of them finish.

Built once when a batch starts decoding on fixed buffers: it plans the shared part of the tree
(each branch's parent path), loads it with the tails into the engine's
:class:`graphs.DecodeArena`, and puts the rows' sampling parameters on the device. Each step then
costs a copy of four numbers per row, the forward and the draw (a graph replay on the GPU) and
one copy of the chosen tokens back, which the host collects when it needs them: a step may take
its tokens from the step before on the device and run while the host reads that step's draws.
A branch that finishes stays in the batch as a padding row (it writes to the scratch slot and
its output is dropped) until half the rows have finished, so branches that end at different
steps do not make every step plan again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch

from ..kernels import plan_tree_attention
from ..kernels.plan.decode_work import decode_work
from .arena_buffers import Capacity, StepInputs
from .kv_tree import Segment
from .sampler import sample_packed

if TYPE_CHECKING:
    from .decode_requests import DecodeRequest
    from .engine import Engine
    from .graphs import DecodeArena


def parent_tree(requests: Sequence[DecodeRequest]) -> tuple[list[Segment], list[int], list[int]]:
    """The segments on the requests' parent paths, each once (a parent before its children),
    each one's parent's index in that list (-1 for a root), and each request's parent's index."""
    order: list[Segment] = []
    index: dict[int, int] = {}
    for r in requests:
        for s in r.parent.path():
            if s.id not in index:
                index[s.id] = len(order)
                order.append(s)
    parents = [index[s.parent.id] if s.parent is not None else -1 for s in order]
    return order, parents, [index[r.parent.id] for r in requests]


def longest_tail(engine: Engine, requests: Sequence[DecodeRequest]) -> int:
    """The most tokens any of ``requests`` may generate (its length limit): a tail window's size."""
    return max(min(r.sampling.max_tokens, engine.max_context - r.parent.end) for r in requests)


def filters(requests: Sequence[DecodeRequest]) -> bool:
    """Whether any request samples after a top-k, top-p or min-p filter (drawn with
    :func:`draw_filtered`, not by the step's own draw)."""
    return any(p.top_k > 0 or p.top_p < 1 or p.min_p > 0 for p in (r.sampling for r in requests))


def parent_slot(parent: Segment, lacking: dict[int, Segment], scratch: int) -> int:
    """The slot that a first step's row forwarding ``parent``'s last token writes: that token's
    own the first time the step meets a parent lacking its KV (then noted in ``lacking``), else
    ``scratch``. After the step, every parent in ``lacking`` has all its KV."""
    if parent.written < len(parent.tokens) and parent.id not in lacking:
        lacking[parent.id] = parent
        return parent.slots[-1]
    return scratch


def put_sampling(arena: DecodeArena, requests: Sequence[DecodeRequest]) -> None:
    """Each row's temperature and seed into the arena (row k: ``requests[k]``)."""
    r = len(requests)
    arena.temperature[:r] = torch.tensor([q.sampling.temperature for q in requests], dtype=torch.float32)
    arena.seeds[:r] = torch.tensor([q.seed & ((1 << 63) - 1) for q in requests], dtype=torch.int64)


def draw_filtered(
    arena: DecodeArena, logits: torch.Tensor, requests: Sequence[DecodeRequest], steps: np.ndarray
) -> None:
    """Redraw the rows of a step whose requests filter (row k: ``requests[k]``, at ``steps[k]``)
    into the arena's draws."""
    r = len(requests)
    packed = sample_packed(
        logits[:r].float(), [q.sampling for q in requests], [q.seed for q in requests], steps.tolist(), fused=True
    )
    arena.sampled[:r] = packed


class DecodeBatch:
    """Fixed-buffer decode steps for ``requests`` (the engine's request numbers ``ids``), whose
    generated segments are ``tails``."""

    def __init__(
        self,
        engine: Engine,
        ids: Sequence[int],
        requests: Sequence[DecodeRequest],
        tails: Sequence[Segment],
        start: bool = True,
    ) -> None:
        """Plan the run (host work only); with ``start``, also :meth:`start` it."""
        self.engine, self.requests, self.tails = engine, list(requests), list(tails)
        self.ids = list(ids)
        self.row_of = {i: row for row, i in enumerate(ids)}
        self.starts = np.array([t.start for t in self.tails], dtype=np.int64)
        cfg, dev = engine.model.cfg, engine.model.device
        order, parents, nodes = parent_tree(self.requests)
        plan = plan_tree_attention(
            parents, [s.slot_array for s in order], nodes, page_size=engine.kv.pool.page_size, device=dev
        )
        self.work = decode_work(
            plan,
            [t.slot_array for t in self.tails],
            longest_tail(engine, self.requests),
            engine.model.num_heads,
            engine.model.num_kv_heads,
            cfg.head_dim,
            engine.decode_work_config,
            share=engine.attention == "deft",
        )
        self.filtered = filters(self.requests)
        self.shared_tokens = sum(len(s.tokens) for s in order)
        self.parent_tokens = sum(r.parent.end for r in self.requests)
        engine.stats.plan_builds += 1
        if start:
            self.start()

    def start(self) -> None:
        """Load the planned work and the rows' sampling parameters into the engine's decode
        buffers (device work: the steps of the run before, whose buffers these are, must have
        been launched)."""
        engine, work = self.engine, self.work
        need = Capacity.needed(work, len(self.requests), len(work.host.shapes))
        self.arena = engine.arena_for(need, work.host.shapes)
        self.arena.load(work, len(self.requests))
        put_sampling(self.arena, self.requests)
        engine.stats.note_graphs(self.arena)

    def keeps(self, ids: Sequence[int]) -> bool:
        """Whether the next step of requests ``ids`` (a subset of this run's) goes on with this run."""
        return 2 * len(ids) > len(self.tails) and all(i in self.row_of for i in ids)

    def launch(self, ids: Sequence[int], from_device: bool) -> int:
        """Queue the step that forwards the newest token of requests ``ids`` and draws the next;
        returns a ticket for :meth:`collect`. ``from_device``: those tokens are the ones the last
        step drew (their segments hold a placeholder); else they are the segments' last tokens,
        or for a segment still empty (the first step) its parent's last token: the first row of
        each parent writes that token's KV if the parent lacks it, the others write to the
        scratch slot, as the run's finished rows do."""
        tails = self.tails
        r = len(tails)
        # Most steps go on with all of the run's requests, in order (padding rows come only
        # once one finishes): then no row needs looking up.
        whole = ids == self.ids
        rows = range(r) if whole else [self.row_of[i] for i in ids]
        alive = slice(None) if whole else np.array(rows, dtype=np.int64)
        live = tails if whole else [tails[row] for row in rows]
        inputs = StepInputs.empty(r)
        tokens, positions, slots, tail_lens = inputs.tokens, inputs.positions, inputs.slots, inputs.tail_lens
        tail_lens[:] = [len(t.tokens) for t in tails]
        tokens[:] = positions[:] = 0  # finished rows: token 0 at position 0, written to the scratch slot
        scratch = self.engine.kv.pool.scratch_slot
        slots[:] = scratch
        parents: dict[int, Segment] = {}  # id -> parent segment whose last token's KV this step writes
        if from_device:
            tokens[alive] = -1
            slots[alive] = [t.slots[-1] for t in live]
        else:
            for t, row in zip(live, rows):
                if t.tokens:
                    tokens[row], slots[row] = t.tokens[-1], t.slots[-1]
                    continue
                p = self.requests[row].parent
                tokens[row], slots[row] = p.tokens[-1], parent_slot(p, parents, scratch)
        positions[alive] = self.starts[alive] + tail_lens[alive] - 1
        held = self.arena.num_graphs
        logits = self.arena.step(inputs)
        for t in [*live, *parents.values()]:
            t.written = len(t.tokens)
        stats = self.engine.stats
        grown = int(tail_lens[alive].sum())
        stats.forward_steps += 1
        stats.fast_steps += 1
        stats.graph_replays += int(self.arena.replayed)
        stats.attended_tokens += self.parent_tokens + grown
        stats.unique_tokens += self.shared_tokens + grown
        stats.note_graphs(self.arena, held)
        if self.filtered:
            draw_filtered(self.arena, logits, self.requests, tail_lens)
        return self.arena.publish()

    def collect(self, ticket: int, ids: Sequence[int]) -> tuple[list[int], list[float]]:
        """The tokens and log-probabilities the step ``ticket`` drew for requests ``ids``."""
        host = self.arena.collect(ticket)
        host = host[: len(self.tails)] if ids == self.ids else host[[self.row_of[i] for i in ids]]
        return host[:, 0].astype(np.int64).tolist(), host[:, 1].tolist()
