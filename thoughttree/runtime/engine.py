"""One forward step over the KV tree, and batched decoding built from such steps.

Each step gathers the segments on the paths of everything it touches, computes every token
that has a slot but no KV yet (prefill rows, and the pending last token of finished
generations), adds rows that only recompute an already-written token whose logits are wanted,
builds one tree-attention plan for all rows and runs the model once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch

from ..config import Sampling
from ..kernels import plan_tree_attention, store_kv, store_kv_reference, tree_attention
from .kv_tree import KVTree, Segment
from .model import Transformer
from .sampler import sample


@dataclass
class EngineStats:
    """Running counters; read before and after a call to get its cost."""

    forward_steps: int = 0
    prefill_tokens: int = 0  # tokens of given text whose KV was computed
    generated_tokens: int = 0
    attended_tokens: int = 0  # KV tokens read, summed over query rows (what per-sequence attention reads)
    unique_tokens: int = 0  # distinct KV tokens in each step's tree, summed over steps

    @property
    def reuse_factor(self) -> float:
        return self.attended_tokens / self.unique_tokens if self.unique_tokens else 1.0


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


class Engine:
    """Runs the model over the KV tree (one plan per step, reused by every layer)."""

    def __init__(
        self,
        model: Transformer,
        kv: KVTree,
        *,
        attention: str,
        detokenize: Callable[[list[int]], str],
        eos_token_ids: Sequence[int],
        max_context: int,
    ) -> None:
        self.model = model
        self.kv = kv
        self.attention = attention
        self.detokenize = detokenize
        self.eos = set(eos_token_ids)
        self.max_context = max_context
        self.stats = EngineStats()
        # The Triton store only pays off on the GPU; on the CPU the indexed copy is the fast path.
        self.store = store_kv if model.device.type == "cuda" else store_kv_reference

    def forward(self, targets: Sequence[tuple[Segment, int]], extra: Sequence[Segment] = ()) -> torch.Tensor:
        """Logits [len(targets), vocab] (float32) at (segment, offset) positions.

        Every token without KV on the paths of ``targets`` and ``extra`` is computed and stored.
        """
        order: list[Segment] = []
        index: dict[int, int] = {}
        for seg in [t[0] for t in targets] + list(extra):
            for s in seg.path():
                if s.id not in index:
                    index[s.id] = len(order)
                    order.append(s)
        tokens, positions, nodes, visible, slots = [], [], [], [], []
        row_of: dict[tuple[int, int], int] = {}
        for i, s in enumerate(order):
            for j in range(s.written, len(s.tokens)):
                row_of[(s.id, j)] = len(tokens)
                tokens.append(s.tokens[j]), positions.append(s.start + j), nodes.append(i)
                visible.append(j + 1), slots.append(s.slots[j])
        num_write = len(tokens)
        prefill = sum(1 for i in nodes if not order[i].generated)
        target_rows = []
        for s, j in targets:
            key = (s.id, j)
            if key not in row_of:  # already has KV: recompute the row for its logits only
                row_of[key] = len(tokens)
                tokens.append(s.tokens[j]), positions.append(s.start + j), nodes.append(index[s.id])
                visible.append(j + 1)
            target_rows.append(row_of[key])
        if not tokens:
            return torch.empty(0, self.model.cfg.vocab_size)
        plan = plan_tree_attention(
            [index[s.parent.id] if s.parent is not None else -1 for s in order],
            [s.slot_array for s in order],
            nodes,
            visible,
            page_size=self.kv.pool.page_size,
            device=self.model.device,
        )
        dev = self.model.device
        ids = torch.tensor(tokens, device=dev)
        pos = torch.tensor(positions, device=dev)
        write_slots = torch.tensor(slots, device=dev, dtype=torch.int64)
        pool = self.kv.pool

        def attend(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            if num_write:
                self.store(pool.k[layer], pool.v[layer], k[:num_write], v[:num_write], write_slots)
            return tree_attention(q, pool.k[layer], pool.v[layer], plan, backend=self.attention)

        hidden = self.model.forward(ids, pos, attend)
        for s in order:
            s.written = len(s.tokens)
        starts = np.array([s.start for s in order])
        self.stats.forward_steps += 1
        self.stats.attended_tokens += int((starts[np.asarray(nodes)] + np.asarray(visible)).sum())
        self.stats.unique_tokens += sum(len(s.tokens) for s in order)
        self.stats.prefill_tokens += prefill
        return self.model.logits(hidden[torch.tensor(target_rows, device=dev, dtype=torch.long)])

    def decode(self, requests: Sequence[DecodeRequest]) -> list[Decoded]:
        """Sample a continuation for every request, all in one forward per step.

        Step 0 reads the logits at each parent's last token; each later step feeds every
        unfinished request its newest token. A finished request's last token keeps its slot
        and gets KV in the next step that touches it. On failure nothing is left allocated.
        """
        for r in requests:
            if r.parent.end >= self.max_context:
                raise ValueError(f"a path of {r.parent.end} tokens leaves no room in the model's context of {self.max_context}")
        outs = [Decoded(self.kv.open_child(r.parent)) for r in requests]
        try:
            logits = self.forward([(r.parent, len(r.parent.tokens) - 1) for r in requests])
            active = list(range(len(requests)))
            while active:
                draw = sample(
                    logits,
                    [requests[i].sampling for i in active],
                    [requests[i].seed for i in active],
                    [len(outs[i].tokens) for i in active],
                )
                need = self.kv.pages_needed_to_append([outs[i].segment for i in active])
                if need > self.kv.pool.num_free:
                    self.kv.pool.alloc(need)  # raises KVPoolExhausted with capacity and use
                still = []
                for i, token, lp in zip(active, draw.tokens, draw.logprobs):
                    out, sp = outs[i], requests[i].sampling
                    self.kv.append(out.segment, token)
                    out.tokens.append(token)
                    out.logprobs.append(lp)
                    out.finish_reason = self._finished(out, sp)
                    if not out.finish_reason:
                        still.append(i)
                self.stats.generated_tokens += len(active)
                active = still
                if active:
                    logits = self.forward([(outs[i].segment, len(outs[i].tokens) - 1) for i in active])
        except BaseException:
            for out in outs:
                self.kv.release(out.segment)
            raise
        for out in outs:
            out.segment.sealed = True
            out.text = self.detokenize(out.tokens)
        return outs

    def _finished(self, out: Decoded, sp: Sampling) -> str:
        token = out.tokens[-1]
        if token in self.eos and not sp.ignore_eos:
            return "eos"
        if token in sp.stop_token_ids:
            return "stop"
        if sp.stop:
            text = self.detokenize(out.tokens)
            if any(s in text for s in sp.stop):
                return "stop"
        if len(out.tokens) >= sp.max_tokens or out.segment.end >= self.max_context:
            return "length"
        return ""
