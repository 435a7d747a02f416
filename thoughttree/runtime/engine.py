"""One forward step over the KV tree, and batched decoding built from such steps.

A general step gathers the segments on the paths of everything it touches, computes every
token that has a slot but no KV yet (prefill rows, and the pending last token of finished
generations), adds rows that only recompute an already-written token whose logits are wanted,
builds one tree-attention plan for all rows and runs the model once: with the Triton kernels
and at most ``RuntimeConfig.graph_max_rows`` rows on the decode buffers (a graph replay on the
GPU; a few rows cost the host as much as many in an eager forward), else eagerly. Decoding
uses one such step for its first token when a parent needs a prefill; with the Triton kernels,
the steps after it run on fixed buffers (:mod:`decode_batch`, :mod:`graphs`), replayed as CUDA
graphs on the GPU.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, field
from typing import AbstractSet, Callable, ContextManager, Sequence, TypeVar

import numpy as np
import torch

from ..config import RuntimeConfig, Sampling
from ..kernels import TreePlan, WorkConfig, plan_tree_attention, tree_attention
from ..kernels.plan.decode_work import decode_work
from ..kernels.plan.tiles import TileConfig
from .capture import CaptureFailures, CudaGraphs, GraphCapture
from .decode_batch import DecodeBatch
from .arena_buffers import Capacity, StepInputs, row_bucket
from .graphs import DecodeArena
from .kv_tree import KVTree, Segment
from .model import Transformer
from .sampler import sample_packed, unpack
from .speculative.speculator import Speculator
from .stops import StopWindow


@dataclass
class EngineStats:
    """Running counters; read before and after a call to get its cost."""

    forward_steps: int = 0
    prefill_tokens: int = 0  # tokens of given text whose KV was computed
    generated_tokens: int = 0
    attended_tokens: int = 0  # KV tokens read, summed over query rows (what per-sequence attention reads)
    unique_tokens: int = 0  # distinct KV tokens in each step's tree, summed over steps
    fast_steps: int = 0  # decode steps run on fixed buffers (graph replays among them)
    graph_replays: int = 0
    overlapped_steps: int = 0  # fast steps queued before the host had read the draws of the step before
    graphs: int = 0  # CUDA graphs held now
    graph_captures: int = 0  # graphs captured (a bucket's first step, and again after the buffers grow)
    graph_bytes: int = 0  # device memory held by them and their buffers
    graph_failures: int = 0  # captures that raised (their buckets run eagerly)
    plan_builds: int = 0  # decode-run plans built (once per batch and each time its rows change)
    plans_ahead: int = 0  # of those, built while the step before ran and used
    speculative_steps: int = 0  # forwards that verified drafts (or could have: see speculative/)
    draft_tokens: int = 0  # draft tokens verified
    accepted_tokens: int = 0  # draft tokens kept (equal to the target's draws)
    draft_seconds: float = 0.0  # time the drafters took

    @property
    def acceptance_rate(self) -> float:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else 0.0

    @property
    def tokens_per_forward(self) -> float:
        return self.generated_tokens / self.forward_steps if self.forward_steps else 0.0

    @property
    def reuse_factor(self) -> float:
        return self.attended_tokens / self.unique_tokens if self.unique_tokens else 1.0

    def note_graphs(self, arena: DecodeArena, held: int | None = None) -> None:
        """Record the graphs ``arena`` holds and their memory. ``held``: how many it held before
        a step (the rest that step captured; nothing to record when it captured none)."""
        self.graph_failures = arena.failures.count
        if held is not None:
            if arena.num_graphs == held:
                return
            self.graph_captures += arena.num_graphs - held
        self.graphs, self.graph_bytes = arena.num_graphs, arena.graph_bytes + arena.buffer_bytes


@dataclass(frozen=True)
class DecodeRequest:
    parent: Segment
    sampling: Sampling
    seed: int


@dataclass
class Decoded:
    segment: Segment
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    text: str = ""
    finish_reason: str = ""


PLACEHOLDER = -1  # a reserved token whose value the host has not read yet


class _Ends:
    """How each request of one decode call can end, worked out once for all its steps.

    A request's generated tokens reach its length limit at ``limit[i]`` tokens (its
    ``max_tokens``, or the room left in the model's context after its parent). ``on_token[i]``
    maps a token that ends it to the reason (EOS unless ignored, then its stop tokens); requests
    with the same Sampling share one map. ``stops[i]`` are its stop strings.
    """

    def __init__(self, requests: Sequence[DecodeRequest], eos: AbstractSet[int], max_context: int) -> None:
        self.limit = [min(r.sampling.max_tokens, max_context - r.parent.end) for r in requests]
        maps: dict[int, dict[int, str]] = {}
        for r in requests:
            sp = r.sampling
            if id(sp) not in maps:
                maps[id(sp)] = {t: "stop" for t in sp.stop_token_ids} | ({} if sp.ignore_eos else dict.fromkeys(eos,
                                                                                                                "eos"))
        self.on_token = [maps[id(r.sampling)] for r in requests]
        self.stops = [r.sampling.stop for r in requests]


class _EagerKV:
    """:class:`model.StepKV` of a general step: a fresh plan, the pool's caches."""

    def __init__(self, kv: KVTree, plan: TreePlan, write_slots: torch.Tensor, num_write: int, backend: str) -> None:
        self.kv, self.plan, self.backend = kv, plan, backend
        self.write_slots, self.num_write = write_slots, num_write

    def caches(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.kv.pool.k[layer], self.kv.pool.v[layer]

    def attend(self, layer: int, q: torch.Tensor) -> torch.Tensor:
        return tree_attention(q, self.kv.pool.k[layer], self.kv.pool.v[layer], self.plan, backend=self.backend)


def _kv_but_last(seg: Segment) -> bool:
    """Whether every token on ``seg``'s path has its KV, except perhaps ``seg``'s last."""
    return seg.written >= len(seg.tokens) - 1 and all(s.written == len(s.tokens) for s in seg.path()[:-1])


def on_device(device: torch.device) -> ContextManager[object]:
    """``device`` made the current CUDA device for the block (nothing on the CPU): Triton launches
    and CUDA-graph captures go to the current device, so a model on ``cuda:1`` while another GPU
    is current must run its steps under this."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


_Step = TypeVar("_Step", bound=Callable)


def _on_model_device(method: _Step) -> _Step:
    @functools.wraps(method)
    def run(self: Engine, *args: object, **kwargs: object) -> object:
        with on_device(self.model.device):
            return method(self, *args, **kwargs)

    return run  # type: ignore[return-value]


class Engine:
    """Runs the model over the KV tree (one plan per step, reused by every layer)."""

    def __init__(
        self,
        model: Transformer,
        kv: KVTree,
        *,
        attention: str,
        detokenize: Callable[[list[int]], str],
        cleans_up_spaces: bool,
        eos_token_ids: Sequence[int],
        max_context: int,
        runtime: RuntimeConfig | None = None,
    ) -> None:
        self.model = model
        self.kv = kv
        self.attention = attention
        self.detokenize = detokenize
        self.stops = StopWindow(detokenize, cleans_up_spaces)
        self.eos = set(eos_token_ids)
        self.max_context = max_context
        self.runtime = runtime or RuntimeConfig()
        self.stats = EngineStats()
        self.arena: DecodeArena | None = None
        self._warmed: set[tuple] = set()  # graph captures warmed up so far, shared by every arena
        # How decode buffers make graphs (None: steps run eagerly); a test may put an emulation
        # or a failing capture here. Buckets whose capture failed stay eager.
        self.graph_capture: GraphCapture | None = CudaGraphs() if model.device.type == "cuda" else None
        self.capture_failures = CaptureFailures()
        self._logits: torch.Tensor | None = None  # the one logits buffer of every arena's steps
        # How decode runs size their attention work. Their graphs launch tile classes in shape
        # order (narrowest first), and a wide launch sized to leave SMs to the others was measured
        # launched first only, so decode runs keep it sized for every SM (wide_sms=0). A node seen
        # by 128 query rows (32 branches of a Llama-3-8B) takes 64-row tiles (wide_tiles), which
        # measured faster there; from 192 rows the 128-row tiles measured no different, so they
        # keep them (docs/perf-log/).
        self.decode_work_config = WorkConfig(wide_sms=0, wide_tiles=(129, 4096))
        self.speculator = Speculator(self)
        self.after_step: Callable[[], None] | None = None  # called after each speculative step (tests check KV there)

    @property
    def fast_decode(self) -> bool:
        """Decode steps on fixed buffers: the Triton kernels and the fused layer pieces."""
        return self.attention in ("deft", "per_sequence") and self.model.fused

    @_on_model_device
    def forward(self, targets: Sequence[tuple[Segment, int]], extra: Sequence[Segment] = ()) -> torch.Tensor:
        """Logits [len(targets), vocab] (float32) at (segment, offset) positions.

        Every token without KV on the paths of ``targets`` and ``extra`` is computed and stored.
        """
        order: list[Segment] = []
        index: dict[int, int] = {}
        for target in [t[0] for t in targets] + list(extra):
            for s in target.path():
                if s.id not in index:
                    index[s.id] = len(order)
                    order.append(s)
        # Rows: every token without KV, segment by segment (tokens and slots copied as list
        # slices, nodes and offsets computed for all rows at once), then a row per target whose
        # token already has KV.
        written = np.fromiter((s.written for s in order), dtype=np.int64, count=len(order))
        counts = np.fromiter((len(s.tokens) for s in order), dtype=np.int64, count=len(order)) - written
        starts = np.fromiter((s.start for s in order), dtype=np.int64, count=len(order))
        tokens: list[int] = []
        slots: list[int] = []
        for s in order:
            if s.written < len(s.tokens):
                tokens += s.tokens[s.written :]
                slots += s.slots[s.written :]
        num_write = len(tokens)
        first = np.cumsum(counts) - counts  # each segment's first row
        seg = np.repeat(np.arange(len(order)), counts)
        offset = np.arange(num_write) - first[seg] + written[seg]  # each row's token within its segment
        recomputed: dict[tuple[int, int], int] = {}  # (segment, offset) of a token with KV -> its recomputed row
        target_rows = []
        for s, j in targets:
            i = index[s.id]
            if j >= written[i]:
                target_rows.append(int(first[i] + j - written[i]))
                continue
            if (i, j) not in recomputed:  # already has KV: recompute the row for its logits only
                recomputed[(i, j)] = len(tokens)
                tokens.append(s.tokens[j])
                slots.append(-1)
            target_rows.append(recomputed[(i, j)])
        if not tokens:
            return torch.empty(0, self.model.cfg.vocab_size)
        n_re = len(recomputed)
        nodes = np.concatenate([seg, np.fromiter((i for i, _ in recomputed), dtype=np.int64, count=n_re)])
        offset = np.concatenate([offset, np.fromiter((j for _, j in recomputed), dtype=np.int64, count=n_re)])
        visible, positions = offset + 1, starts[nodes] + offset
        prefill = int(counts[[not s.generated for s in order]].sum())
        plan = plan_tree_attention(
            [index[s.parent.id] if s.parent is not None else -1 for s in order],
            [s.slot_array for s in order],
            nodes,
            visible,
            page_size=self.kv.pool.page_size,
            device=self.model.device,
        )
        if self.fast_decode and len(tokens) <= self.runtime.graph_max_rows:
            logits = self._forward_on_arena(plan, tokens, positions, slots, target_rows)
        else:
            dev = self.model.device
            width = len(tokens) + len(tokens) % 2  # each row of int64s starts 16-byte aligned (one compiled kernel)
            host_rows = np.zeros((3, width), dtype=np.int64)
            host_rows[:, : len(tokens)] = [tokens, positions, slots]
            rows = torch.from_numpy(host_rows).to(dev)[:, : len(tokens)]
            step = _EagerKV(self.kv, plan, rows[2], num_write, self.attention)
            hidden = self.model.forward(rows[0], rows[1], step)
            logits = self.model.logits(hidden[torch.tensor(target_rows, device=dev, dtype=torch.long)])
        for s in order:
            s.written = len(s.tokens)
        self.stats.forward_steps += 1
        self.stats.attended_tokens += int((positions + 1).sum())
        self.stats.unique_tokens += sum(len(s.tokens) for s in order)
        self.stats.prefill_tokens += prefill
        return logits

    def _forward_on_arena(
        self, plan: TreePlan, tokens: list[int], positions: np.ndarray, slots: list[int], targets: list[int]
    ) -> torch.Tensor:
        """Logits [len(targets), vocab] (float32) of a general forward run on the decode buffers.

        tokens, positions, slots: [T] each row's token, position and KV slot (-1: write nothing,
        sent to the scratch slot).
        """
        inputs = StepInputs.empty(len(tokens))
        inputs.tokens[:] = tokens
        inputs.positions[:] = positions
        inputs.slots[:] = slots
        inputs.slots[inputs.slots < 0] = self.kv.pool.scratch_slot
        inputs.tail_lens[:] = 0
        num_q = inputs.rows
        m = self.model
        work = decode_work(plan, [np.zeros(0, dtype=np.int64)] * num_q, 0, m.num_heads, m.num_kv_heads, m.cfg.head_dim,
                           self.decode_work_config, share=self.attention == "deft")
        arena = self.arena_for(Capacity.needed(work, num_q, len(work.host.shapes)), work.host.shapes)
        arena.load(work, num_q)
        held = arena.num_graphs
        # Targets may repeat a row (several samples of one parent): each row's logits once.
        want = np.asarray(targets, dtype=np.int64)
        picked, inverse = np.unique(want, return_inverse=True)
        logits = arena.forward_rows(inputs, picked)
        self.stats.note_graphs(arena, held)
        if np.array_equal(picked, want):
            return logits
        return logits[torch.from_numpy(inverse.reshape(-1)).to(logits.device)]

    def arena_for(self, need: Capacity, shapes: tuple[TileConfig, ...]) -> DecodeArena:
        """The fixed buffers for a decode run of this size: the current ones, or larger ones."""
        old = self.arena
        cfg = self.decode_work_config
        if (old is not None and old.attention == self.attention and old.launch == cfg.launch
                and old.shapes == shapes and old.cap.holds(need)):
            return old
        # Row buffers are a few KB: room up front for the largest graphed forward (up to 1024 rows).
        cap = need.grown(old.cap if old is not None and old.shapes == shapes else None,
                         min(self.runtime.graph_max_rows, 1024))
        self.arena = None  # drop the old graphs before capturing new ones
        arena = self.arena = DecodeArena(
            self.model, self.kv.pool, cap, shapes, attention=self.attention, config=cfg,
            capture=self.graph_capture if self.runtime.cuda_graphs else None,
            max_graph_rows=self.runtime.graph_max_rows, warmed=self._warmed, logits=self.logits_buffer(),
            failures=self.capture_failures,
        )
        self.stats.note_graphs(arena)  # the old graphs are gone, whether or not the next step captures
        return arena

    def logits_buffer(self) -> torch.Tensor:
        """[N, V] logits in the model's dtype that every decode-buffer step of up to N rows writes
        (N: the bucket of ``graph_max_rows``, at most 1024), made once: graphs keep no output
        of their own."""
        rows = row_bucket(max(1, min(self.runtime.graph_max_rows, 1024)))
        if self._logits is None or self._logits.shape[0] < rows:
            m = self.model
            self._logits = torch.empty(rows, m.cfg.vocab_size, dtype=m.dtype, device=m.device)
        return self._logits

    @_on_model_device
    def decode(self, requests: Sequence[DecodeRequest]) -> list[Decoded]:
        """Sample a continuation for every request, all in one forward per step.

        Step 0 reads the logits at each parent's last token (recomputing that row); each later
        step feeds every unfinished request its newest token. A finished request's last token
        keeps its slot and gets KV in the next step that touches it. On failure nothing is left
        allocated.
        """
        for r in requests:
            if r.parent.end >= self.max_context:
                raise ValueError(
                    f"a path of {r.parent.end} tokens leaves no room in the model's context of {self.max_context}"
                )
        ends = _Ends(requests, self.eos, self.max_context)
        outs = [Decoded(self.kv.open_child(r.parent)) for r in requests]
        fused = self.model.device.type == "cuda"
        try:
            still = list(range(len(requests)))
            specs = self.speculator.options(requests)
            if specs is not None:  # every step, the first included, verifies drafts
                self.speculator.decode(requests, outs, ends, specs)
                still = []
            # Step 0 runs on the fixed buffers too when every parent path has its KV but for perhaps
            # the parent's last token (a branch that just finished); else one general forward
            # computes the missing KV (a prompt's prefill) and step 0's logits.
            if still and not (self.fast_decode and all(_kv_but_last(r.parent) for r in requests)):
                logits = self.forward([(r.parent, len(r.parent.tokens) - 1) for r in requests])
                packed = sample_packed(
                    logits, [r.sampling for r in requests], [r.seed for r in requests], [0] * len(requests), fused=fused
                )
                draw = unpack(packed)
                self._take(still, draw.tokens, draw.logprobs, outs)
                still = self._still_active(still, outs, ends)
            if self.fast_decode and still:
                self._decode_fast(requests, outs, still, ends)
                still = []
            while still:  # general steps
                logits = self.forward([(outs[i].segment, len(outs[i].tokens) - 1) for i in still])
                steps = [len(outs[i].tokens) for i in still]
                params, seeds = [requests[i].sampling for i in still], [requests[i].seed for i in still]
                draw = unpack(sample_packed(logits, params, seeds, steps, fused=fused))
                self._take(still, draw.tokens, draw.logprobs, outs)
                still = self._still_active(still, outs, ends)
        except BaseException:
            for out in outs:
                self.kv.release(out.segment)
            raise
        for out in outs:
            out.segment.sealed = True
            out.text = self.detokenize(out.tokens)
        return outs

    def _decode_fast(
        self, requests: Sequence[DecodeRequest], outs: list[Decoded], still: list[int], ends: _Ends
    ) -> None:
        """Decode steps on fixed buffers, from the first, each launched before the host reads the
        draws of the one before.

        While step t runs, the host has already reserved a slot for the token step t draws and
        queued step t+1 to forward it straight from the device; then it reads step t's draws and
        checks stops. A request found finished then has had one step too many: its draw is
        dropped, and the KV written for its last token is correct. Requests that finish by
        length are known in advance and never get that extra step. When the requests that go on
        no longer keep the run (half of it finished), their next run is planned while step t
        runs (``RuntimeConfig.plan_ahead``), and started once the draws are read if none of
        them stopped at step t.
        """
        run: DecodeBatch | None = None
        ahead: DecodeBatch | None = None  # the next run, planned while the last step of this one runs
        queued: tuple[list[int], int] | None = None  # requests of a launched step, its ticket
        while queued is not None or still:
            if queued is None:
                if run is None or not run.keeps(still):
                    if ahead is not None and ahead.ids == still:
                        run = ahead
                        run.start()
                        self.stats.plans_ahead += 1
                    else:
                        run = DecodeBatch(self, still, [requests[i] for i in still], [outs[i].segment for i in still])
                ahead = None
                queued = (still, run.launch(still, from_device=False))
            rows, ticket = queued
            assert run is not None  # a step is queued only once a batch exists
            limit = ends.limit
            go = [i for i in rows if len(outs[i].tokens) + 1 < limit[i]]
            queued = None
            placed: set[int] = set()
            if go and run.keeps(go):
                self._reserve([outs[i].segment for i in go])
                queued = (go, run.launch(go, from_device=True))
                placed = set(go)
                self.stats.overlapped_steps += 1
            elif go and self.runtime.plan_ahead:
                self._reserve([outs[i].segment for i in go])  # the slots of the tokens step t draws
                placed = set(go)
                ahead = DecodeBatch(self, go, [requests[i] for i in go], [outs[i].segment for i in go], start=False)
            tokens, logprobs = run.collect(ticket, rows)
            self._take(rows, tokens, logprobs, outs, placed=placed)
            still = self._still_active(rows, outs, ends)
            if queued is not None:
                kept = set(still)
                queued = ([i for i in queued[0] if i in kept], queued[1]) if kept else None

    def _reserve(self, segs: list[Segment]) -> None:
        """Give each segment a slot and a placeholder for its next token (the draw not yet read)."""
        self.kv.append_each(segs, [PLACEHOLDER] * len(segs))

    def _take(
        self,
        rows: list[int],
        tokens: list[int],
        logprobs: list[float],
        outs: list[Decoded],
        placed: AbstractSet[int] = frozenset(),
    ) -> None:
        """Record one drawn token per request of ``rows``; those in ``placed`` already hold a placeholder for it."""
        fresh = [(outs[i].segment, token) for i, token in zip(rows, tokens) if i not in placed]
        self.kv.append_each([seg for seg, _ in fresh], [token for _, token in fresh])
        for i, token, lp in zip(rows, tokens, logprobs):
            out = outs[i]
            if i in placed:
                out.segment.tokens[-1] = token
            out.tokens.append(token)
            out.logprobs.append(lp)
        self.stats.generated_tokens += len(rows)

    def _still_active(self, active: list[int], outs: list[Decoded], ends: _Ends) -> list[int]:
        """Set each finished request's finish reason; returns the requests that go on."""
        reasons: dict[int, str] = {}
        on_token, stops = ends.on_token, ends.stops
        for i in active:
            reason = on_token[i].get(outs[i].tokens[-1])
            if reason is not None:
                reasons[i] = reason
        by_stops: dict[tuple[str, ...], list[int]] = {}  # one group in the usual call: one Sampling for all
        for i in active:
            if stops[i] and i not in reasons:
                by_stops.setdefault(stops[i], []).append(i)
        for strings, rows in by_stops.items():
            for i, hit in zip(rows, self.stops.hits(strings, [outs[i].tokens for i in rows])):
                if hit:
                    reasons[i] = "stop"
        still, limit = [], ends.limit
        for i in active:
            reason = reasons.get(i) or ("length" if len(outs[i].tokens) >= limit[i] else "")
            if reason:
                outs[i].finish_reason = reason
            else:
                still.append(i)
        return still
