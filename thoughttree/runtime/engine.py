"""One forward step over the KV tree, and batched decoding built from such steps.

A general step gathers the segments on the paths of everything it touches, computes every
token that has a slot but no KV yet (prefill rows, and the pending last token of finished
generations), adds rows that only recompute an already-written token whose logits are wanted
(:mod:`step_rows`), builds one tree-attention plan for all rows and runs the model once: with
the Triton kernels and at most ``RuntimeConfig.graph_max_rows`` rows on the decode buffers (a
graph replay on the GPU; a few rows cost the host as much as many in an eager forward), else
eagerly. Decoding (:mod:`decode_requests`) uses one such step for its first token when a parent
needs a prefill; with the Triton kernels, the steps after it run on fixed buffers
(:mod:`decode_batch`, :mod:`graphs`), replayed as CUDA graphs on the GPU.
"""

from __future__ import annotations

import contextlib
import functools
from typing import AbstractSet, Callable, ContextManager, Sequence, TypeVar

import numpy as np
import torch

from ..config import RuntimeConfig
from ..kernels import TreePlan, WorkConfig, plan_tree_attention, tree_attention
from ..kernels.plan.decode_work import decode_work
from ..kernels.plan.tiles import TileConfig
from .arena_buffers import Capacity, StepInputs, row_bucket
from .capture import CaptureFailures, CudaGraphs, GraphCapture
from .decode_batch import DecodeBatch
from .decode_requests import DecodeRequest, Decoded, Ends
from .engine_stats import EngineStats
from .graphs import DecodeArena
from .kv_tree import KVTree, Segment
from .model import Transformer
from .sampler import sample_packed, unpack
from .speculative.speculator import Speculator
from .step_rows import StepRows, step_rows
from .stops import StopWindow

PLACEHOLDER = -1  # a reserved token whose value the host has not read yet


class _EagerKV:
    """:class:`model.StepKV` of a general step: a fresh plan, the pool's caches."""

    def __init__(self, kv: KVTree, plan: TreePlan, write_slots: torch.Tensor, num_write: int, backend: str) -> None:
        self.kv, self.plan, self.backend = kv, plan, backend
        self.write_slots, self.num_write = write_slots, num_write

    def caches(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.kv.pool.k[layer], self.kv.pool.v[layer]

    def attend(self, layer: int, q: torch.Tensor) -> torch.Tensor:
        return tree_attention(q, self.kv.pool.k[layer], self.kv.pool.v[layer], self.plan, backend=self.backend)


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
        rows = step_rows(targets, extra)
        if not rows.tokens:
            return torch.empty(0, self.model.cfg.vocab_size)
        plan = plan_tree_attention(
            rows.parents,
            [s.slot_array for s in rows.segments],
            rows.nodes,
            rows.visible,
            page_size=self.kv.pool.page_size,
            device=self.model.device,
        )
        if self.fast_decode and len(rows.tokens) <= self.runtime.graph_max_rows:
            logits = self._forward_on_arena(plan, rows)
        else:
            logits = self._forward_eager(plan, rows)
        for s in rows.segments:
            s.written = len(s.tokens)
        self.stats.forward_steps += 1
        self.stats.attended_tokens += int((rows.positions + 1).sum())
        self.stats.unique_tokens += sum(len(s.tokens) for s in rows.segments)
        self.stats.prefill_tokens += rows.prefill
        return logits

    def _forward_eager(self, plan: TreePlan, rows: StepRows) -> torch.Tensor:
        """Logits [len(rows.targets), vocab] (float32) of a general forward run eagerly."""
        dev, n = self.model.device, len(rows.tokens)
        width = n + n % 2  # each row of int64s starts 16-byte aligned (one compiled kernel)
        host_rows = np.zeros((3, width), dtype=np.int64)
        host_rows[0, :n] = rows.tokens
        host_rows[1, :n] = rows.positions
        host_rows[2, :n] = rows.slots
        tokens, positions, slots = torch.from_numpy(host_rows).to(dev)[:, :n]
        step = _EagerKV(self.kv, plan, slots, rows.num_write, self.attention)
        hidden = self.model.forward(tokens, positions, step)
        return self.model.logits(hidden[torch.tensor(rows.targets, device=dev, dtype=torch.long)])

    def _forward_on_arena(self, plan: TreePlan, rows: StepRows) -> torch.Tensor:
        """Logits [len(rows.targets), vocab] (float32) of a general forward run on the decode
        buffers (recomputed rows write to the scratch slot)."""
        inputs = StepInputs.empty(len(rows.tokens))
        inputs.tokens[:] = rows.tokens
        inputs.positions[:] = rows.positions
        inputs.slots[:] = rows.slots
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
        want = np.asarray(rows.targets, dtype=np.int64)
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
        ends = Ends(requests, self.eos, self.max_context)
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
            if still and not (self.fast_decode and all(r.parent.has_kv_but_last() for r in requests)):
                logits = self.forward([(r.parent, len(r.parent.tokens) - 1) for r in requests])
                packed = sample_packed(
                    logits, [r.sampling for r in requests], [r.seed for r in requests], [0] * len(requests), fused=fused
                )
                draw = unpack(packed)
                self._take(still, draw.tokens, draw.logprobs, outs)
                still = self._still_active(still, outs, ends)
            if still:
                self.decode_rest(requests, outs, still, ends)
        except BaseException:
            for out in outs:
                self.kv.release(out.segment)
            raise
        for out in outs:
            out.segment.sealed = True
            out.text = self.detokenize(out.tokens)
        return outs

    def decode_rest(
        self, requests: Sequence[DecodeRequest], outs: list[Decoded], still: list[int], ends: Ends
    ) -> None:
        """Plain decode steps for the requests ``still``, each past its first token or with its
        parent's KV stored but for perhaps its last token: on the fixed buffers when the model
        has them, else general steps."""
        if self.fast_decode:
            self._decode_fast(requests, outs, still, ends)
            return
        fused = self.model.device.type == "cuda"
        while still:
            logits = self.forward([(outs[i].segment, len(outs[i].tokens) - 1) for i in still])
            steps = [len(outs[i].tokens) for i in still]
            params, seeds = [requests[i].sampling for i in still], [requests[i].seed for i in still]
            draw = unpack(sample_packed(logits, params, seeds, steps, fused=fused))
            self._take(still, draw.tokens, draw.logprobs, outs)
            still = self._still_active(still, outs, ends)

    def _decode_fast(
        self, requests: Sequence[DecodeRequest], outs: list[Decoded], active: list[int], ends: Ends
    ) -> None:
        """Decode steps on fixed buffers for the requests ``active``, from the first, each launched
        before the host reads the draws of the one before.

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
        still = active  # the requests that go on after the step read last
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

    def _still_active(self, active: list[int], outs: list[Decoded], ends: Ends) -> list[int]:
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
