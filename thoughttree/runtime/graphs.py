"""Fixed device buffers for decode steps, and the CUDA graphs replayed over them.

A :class:`DecodeArena` holds every tensor a decode step reads: the step's inputs (token,
position, KV slot and tail length per row: :class:`arena_buffers.StepInputs`), the rows' sampling
parameters and the attention work of :mod:`kernels.plan.decode_work`
(:class:`arena_buffers.RunBuffers`), padded to capacities. Loading a new run's work is one
host-to-device copy; a step is one small copy of its inputs and then either the eager forward or
the replay of a graph captured for the step's row bucket. The step samples each row's next token
on the device, and a row given token -1 reads the token the previous step sampled for it, so a
step can be launched before the host has seen the last one's draws; :meth:`DecodeArena.publish`
copies a step's draws to pinned host memory behind an event (two such buffers take turns). Tail
lengths and newest slots are written into the work on the device, inside the step (into the
merge's own ranges when the tails are folded, else into the tail items), so the graph sees the
tree grow without being captured again. Padding rows write their keys and values to the pool's
scratch slot and are never read. The same buffers run a general forward of a few rows (a
prefill of value prompts, ``tree_logits``): its work loaded like a decode run's without tails,
the logits of chosen rows out, a graph per bucket of rows and of those rows. An engine replaces
its arena with a larger one when a run needs more room (every graph is captured again then).
Each tile class launches as many programs as the loaded work has items of it, rounded up to a
power of two (not the class's whole capacity, whose surplus programs would find no item and
still cost their start-up, so that a small run after a large one in the same arena costs what
it costs alone); graphs are kept per row bucket and these launch sizes.
Only the first capture of each kind, per layout of tile classes, runs an eager warm-up first.
Every graph of an engine writes its logits into one buffer the engine owns (a graph's own output
would stay allocated as long as the graph), and a bucket whose capture fails runs eagerly
(:mod:`capture`).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np
import torch

from ..kernels.plan.decode_work import TAIL_PIECE, DecodeWork
from ..kernels.deft import run_work
from ..kernels.sample import gumbel_sample
from ..kernels.plan.tiles import TileConfig
from ..kernels.plan.work_config import WorkConfig
from ..kernels.plan.workplan import TileClass, WorkPlan
from .arena_buffers import Capacity, RunBuffers, StepInputs, row_bucket
from .capture import CaptureFailures, Graph, GraphCapture
from .kv_pool import KVPool
from .model import Transformer

class DecodeArena:
    """Decode-step buffers of one capacity over one model and KV pool, with their graphs."""

    def __init__(
        self, model: Transformer, pool: KVPool, cap: Capacity, shapes: tuple[TileConfig, ...],
        *, attention: str, config: WorkConfig, capture: GraphCapture | None, max_graph_rows: int,
        warmed: set[tuple] | None = None, logits: torch.Tensor | None = None, failures: CaptureFailures | None = None,
    ) -> None:
        """``capture``: how graphs are made (None: every step eager). ``logits``: [N, V] in the
        model's dtype, the buffer steps of up to N rows write their logits into (shared with
        the engine's other arenas; None: each step allocates its own). ``warmed`` and
        ``failures``: the engine's records, shared by its arenas."""
        cfg, dev = model.cfg, model.device
        self.model, self.pool, self.cap, self.shapes, self.attention = model, pool, cap, shapes, attention
        self.launch = config.launch  # the launch settings its graphs were captured with
        self.capturer, self.use_graphs, self.max_graph_rows = capture, capture is not None, max_graph_rows
        self.logits = logits
        self.failures = failures if failures is not None else CaptureFailures()
        # Kinds of capture (decode steps or general forwards) whose kernels have run before, in
        # this arena or an earlier one of the same shapes, launch settings and tile classes: a
        # capture of another row bucket, or a recapture, needs no eager warm-up. The first one
        # warms up cuBLAS and loads the kernels; later buckets may load a kernel variant inside
        # the capture (CUDA 12.3 on allows it) instead of paying an eager step each.
        self.warmed = warmed if warmed is not None else set()
        self._launch_key = tuple(sorted(config.launch.items()))
        self.grid = tuple(cap.items)  # programs per tile class of the loaded work (0: not launched)
        # The arena's graphs share one memory pool, which lives as long as they do.
        self.mempool = capture.pool() if capture is not None else None
        self.replayed = False  # whether the last step replayed a graph
        self.last_graph: Graph | None = None  # the graph it replayed (for timing it again)
        # A run's work, in one int32 buffer loaded by one copy from its pinned host mirror.
        r = cap.rows
        self.buffers = buf = RunBuffers.allocate(cap, dev)
        self._places, total = RunBuffers.layout(cap)
        self._host_meta = torch.zeros(total, dtype=torch.int32, pin_memory=dev.type == "cuda")
        # Classes launch in shape order (16-row tail pieces first), fixed for the graphs: steps
        # timed with the widest class first were no faster (BENCHMARKS, "the longest launch first").
        self._regions = [(tile, first) for tile, first in zip(shapes, np.cumsum([0, *cap.items[:-1]]).tolist())]
        classes = [TileClass(tile, first, n) for (tile, first), n in zip(self._regions, cap.items) if n]
        self.work = WorkPlan(
            slots=buf.slots, items=buf.items, q_perm=buf.q_perm, q_node=buf.q_node, q_vis=buf.q_vis,
            merge_offsets=buf.merge_offsets, merge_rows=buf.merge_rows,
            partial_o=torch.empty(cap.partials, model.num_heads, cfg.head_dim, dtype=torch.float32, device=dev),
            partial_lse=torch.empty(cap.partials, model.num_heads, dtype=torch.float32, device=dev),
            classes=tuple(classes), own_start=buf.own_start, own_len=buf.own_len, own_stride=r,
            own_longest=max(config.fold_own, config.fold_tail),  # the longest a range its merge reads may grow
            **config.launch,
        )
        # Per-step inputs: the rows of StepInputs, then for a general forward the row whose logits
        # each output row takes. Two pinned host copies take turns, so writing one step's inputs
        # never races the upload of the step before.
        # Each copy moves a whole buffer (a few KB): a contiguous copy is one memcpy, while a
        # copy of the first b columns would be strided. The host views are made once: each
        # tensor indexing costs the host more than the copy.
        width = r + r % 2  # each row of int64 inputs starts 16-byte aligned
        self.step_in = torch.zeros(5, width, dtype=torch.int64, device=dev)
        pinned = dev.type == "cuda"
        self._host_step = list(torch.zeros(2, 5, width, dtype=torch.int64, pin_memory=pinned))
        self._host_step_np = [t.numpy() for t in self._host_step]
        # Sampling: each row's temperature and seed (set per run), and the step's draws (token,
        # log-probability), copied to one of two pinned host buffers per step.
        self.temperature = torch.zeros(r, dtype=torch.float32, device=dev)
        self.seeds = torch.zeros(r, dtype=torch.int64, device=dev)
        self.sampled = torch.zeros(r, 2, dtype=torch.float64, device=dev)
        self._host_out = list(torch.zeros(2, r, 2, dtype=torch.float64, pin_memory=pinned))
        self._host_out_np = [t.numpy() for t in self._host_out]
        # Padding rows' inputs (token 0 at position 0, the scratch slot) by their tail length.
        self._padding = {pad: np.array([[0], [0], [pool.scratch_slot], [pad]]) for pad in (0, 1)}
        self._events = [torch.cuda.Event() for _ in range(2)] if pinned else None
        # The device's index for its current stream: torch.cuda.current_stream() without one asks
        # CUDA for the device count on every call, a host cost paid per step.
        self._cuda = (dev.index if dev.index is not None else torch.cuda.current_device()) if pinned else None
        self._turn = 0
        # Decode steps by (row bucket, grid), general forwards by ((row bucket, target bucket), grid).
        self.graphs: dict[tuple[object, tuple[int, ...]], tuple[Graph, torch.Tensor]] = {}
        self.row_graphs: dict[tuple[object, tuple[int, ...]], tuple[Graph, torch.Tensor]] = {}
        self.graph_bytes = 0
        self.write_slots = self.step_in[2]
        self.num_write = 0

    @property
    def buffer_bytes(self) -> int:
        """Device bytes of its buffers, the engine's shared logits buffer included."""
        w = self.work
        shared = () if self.logits is None else (self.logits,)
        held = (self.buffers.meta, self.step_in, self.sampled, w.partial_o, w.partial_lse, *shared)
        return sum(t.numel() * t.element_size() for t in held)

    def load(self, work: DecodeWork, rows: int) -> None:
        """Copy a run's work into the buffers (padding items do nothing; padding rows see nothing)."""
        parts = RunBuffers.pack(self.cap, work, rows)
        if max(int(a.max(initial=0)) for a in parts.values()) >= 2**31:
            raise ValueError("decode work exceeds int32 indices; decode fewer rows at once")
        if self._events is not None:
            torch.cuda.current_stream(self._cuda).synchronize()  # no earlier upload from the pinned copy is pending
        host_meta = self._host_meta.numpy()
        for name, a in parts.items():
            start = self._places[name].start
            host_meta[start : start + a.size] = a
        self.buffers.meta.copy_(self._host_meta, non_blocking=True)
        counts = np.bincount(work.host.item_class, minlength=len(self.cap.items))
        self.grid = tuple(min(n, 1 << (int(c) - 1).bit_length()) if c else 0 for n, c in zip(self.cap.items, counts))
        classes = tuple(TileClass(tile, first, g) for (tile, first), g in zip(self._regions, self.grid) if g)
        self.work = dataclasses.replace(self.work, classes=classes)

    def put_slots(self, index: np.ndarray, slots: np.ndarray) -> None:
        """Write ``slots`` [n] at ``index`` [n] of the loaded work's slot array before the next
        step (tail windows whose contents the host rewrites: rows verifying draft trees)."""
        if len(index):
            pair = torch.from_numpy(np.stack([index, slots])).to(self.buffers.slots.device, non_blocking=True)
            self.buffers.slots[pair[0]] = pair[1].to(torch.int32)

    def step(self, inputs: StepInputs) -> torch.Tensor:
        """Run one step for ``inputs`` of R rows and draw each row's next token into
        :attr:`sampled`; returns the logits [R', V] in the model's dtype (R' >= R: the row
        bucket's rows when the step replays a graph)."""
        b = self._upload(inputs, np.zeros(0, dtype=np.int64), tail_pad=1)
        # A step run eagerly (past max_graph_rows, or a bucket whose capture failed) skips the padding rows.
        return self._run(self.graphs, b, b, lambda: self._forward(b), eager=lambda: self._forward(inputs.rows))

    def forward_rows(self, inputs: StepInputs, targets: np.ndarray) -> torch.Tensor:
        """A general forward of the loaded work: ``inputs`` of R rows (tail lengths 0) and the
        distinct rows ``targets`` [n] (n <= R) whose logits [n, V] (float32) it returns.
        Replayed from a graph per bucket of rows and of targets like the decode steps, it does
        no sampling and touches no tail."""
        b = self._upload(inputs, targets, tail_pad=0)
        t = row_bucket(len(targets))
        n = len(targets)
        # As in step: a forward run eagerly skips the padding rows.
        logits = self._run(self.row_graphs, (b, t), b, lambda: self._forward_rows(b, t),
                           eager=lambda: self._forward_rows(inputs.rows, n))[:n]
        return logits.to(torch.float32, copy=True)  # the buffer is rewritten by the next step

    def _upload(self, inputs: StepInputs, targets: np.ndarray, tail_pad: int) -> int:
        """Write ``inputs`` and ``targets`` into the next pinned buffer, padded to the row
        bucket, and queue their copy to the device; returns the bucket."""
        r = inputs.rows
        b = row_bucket(r)
        host = self._host_step_np[self._turn]
        host[:4, :r] = inputs.array
        host[:4, r:b] = self._padding[tail_pad]
        host[4, : len(targets)] = targets
        host[4, len(targets) : b] = 0
        self.step_in.copy_(self._host_step[self._turn], non_blocking=True)
        return b

    def _run(
        self, graphs: dict, bucket: object, b: int, forward: Callable[[], torch.Tensor],
        eager: Callable[[], torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """``forward()`` of ``b`` rows, replayed from the graph of ``bucket`` and the loaded
        work's launch sizes (captured the first time) when graphs are on and ``b`` is small
        enough, else ``eager()`` (default: ``forward()``). A capture that raises leaves that
        bucket eager (the forward rewrites the same KV and draws the same tokens, so nothing is
        lost)."""
        kind = "decode step" if graphs is self.graphs else "general forward"
        self.replayed = self.use_graphs and b <= self.max_graph_rows and not self.failures.failed(kind, bucket)
        eager = eager or forward
        if not self.replayed:
            return eager()
        key = (bucket, self.grid)
        if key not in graphs:
            warm = (graphs is self.graphs, (self.shapes, self._launch_key, tuple(g > 0 for g in self.grid)))
            try:
                graphs[key] = self._capture(forward, warm_up=warm not in self.warmed)
            except Exception as error:  # noqa: BLE001 - any failed capture falls back the same way
                self.failures.record(kind, bucket, error)
                self.replayed = False
                return eager()
            self.warmed.add(warm)
        graph, out = graphs[key]
        graph.replay()
        self.last_graph = graph
        return out

    def publish(self) -> int:
        """Queue the copy of the last step's draws to the host; a ticket for :meth:`collect`."""
        turn = self._turn
        self._host_out[turn].copy_(self.sampled, non_blocking=True)
        if self._events is not None:
            self._events[turn].record(torch.cuda.current_stream(self._cuda))
        self._turn = 1 - turn
        return turn

    def collect(self, ticket: int) -> np.ndarray:
        """[R, 2] float64 host draws of the step ``ticket`` stands for, once they have arrived."""
        if self._events is not None:
            self._events[ticket].synchronize()
        return self._host_out_np[ticket]

    def _capture(self, forward: Callable[[], torch.Tensor], warm_up: bool) -> tuple[Graph, torch.Tensor]:
        """A graph of ``forward()``, after an eager warm-up run when its kernels have not run yet
        (the warm-up is about half a capture's time: an eager step)."""
        assert self.capturer is not None
        if warm_up:
            drawn = self.sampled.clone()  # the warm-up draws over them; the replay reads them

            def warm() -> None:
                forward()  # compiles kernels and warms up cuBLAS (rewrites the same KV: idempotent)
                self.sampled.copy_(drawn)

            self.capturer.warm_up(warm)
        graph, out, taken = self.capturer.capture(forward, self.mempool)
        self.graph_bytes += taken
        return graph, out

    @property
    def num_graphs(self) -> int:
        return len(self.graphs) + len(self.row_graphs)

    def _forward_rows(self, b: int, t: int) -> torch.Tensor:
        tokens, pos, slots, _, pick = self.step_in[:, :b].unbind(0)
        self.write_slots, self.num_write = slots, b
        hidden = self.model.forward(tokens, pos, self)
        return self._logits(hidden[pick[:t]])

    def _forward(self, b: int) -> torch.Tensor:
        tokens, pos, slots, tail_len, _ = self.step_in[:, :b].unbind(0)
        ids = torch.where(tokens >= 0, tokens, self.sampled[:b, 0].long())
        # The newest token of each row extends its tail window and its tail pieces (a row with no
        # tail yet, the first step's, forwards its parent's last token and extends nothing).
        buf = self.buffers
        newest = buf.tail_base[:b].long() + tail_len - 1
        buf.slots[torch.where(tail_len > 0, newest, self.cap.slots)] = slots.int()
        piece_len = tail_len[buf.tail_rows.long()] - buf.tail_starts
        buf.items[buf.tail_items.long(), 1] = piece_len.clamp(0, TAIL_PIECE).int()
        buf.own_len[1, :b] = tail_len.int() * buf.tail_fold
        self.write_slots, self.num_write = slots, b
        hidden = self.model.forward(ids, pos, self)
        logits = self._logits(hidden)
        gumbel_sample(logits, self.temperature[:b], self.seeds[:b], tail_len, out=self.sampled[:b])
        return logits

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[R, hidden] -> [R, V] logits in the model's dtype, in the shared buffer when it holds R rows."""
        r = hidden.shape[0]
        out = self.logits[:r] if self.logits is not None and r <= self.logits.shape[0] else None
        return self.model.logits(hidden, upcast=False, out=out)

    # -- StepKV ----------------------------------------------------------------------------------
    def caches(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.pool.k[layer], self.pool.v[layer]

    def attend(self, layer: int, q: torch.Tensor) -> torch.Tensor:
        return run_work(q, self.pool.k[layer], self.pool.v[layer], self.work)
