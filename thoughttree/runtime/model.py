"""A lean forward for the Llama family (Llama 2/3, Mistral, Qwen2/2.5, Qwen3) over flat token rows.

The model sees a flat batch of token rows (any mix of prefill, decode and recompute rows);
attention is delegated per layer to a callback that reads and writes the tree KV cache.
"""

from __future__ import annotations

import functools
import math
from typing import Callable, Protocol

import torch
import torch.nn.functional as F

from ..kernels.linear import MAX_ROWS, dense_into, linear_add_norm, linear_rope_store, linear_silu_mul
from ..kernels.linear import linear as few_row_linear
from ..kernels.fused import add_rms_norm, rope_store, silu_mul
from ..kernels.reference import (
    add_rms_norm_reference,
    rms_norm_reference,
    rope_cos_sin,
    rotate_reference,
    silu_mul_reference,
    store_kv_reference,
)
from .model_config import ModelConfig

class StepKV(Protocol):
    """What one forward step needs from the KV cache.

    ``write_slots`` [T] int64 is the cache slot each row's key and value go to (-1: the row only
    recomputes its output and writes nothing); rows that write come first, ``num_write`` of them.
    """

    write_slots: torch.Tensor
    num_write: int

    def caches(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(k_cache, v_cache), each [num_pages, page_size, H_kv, D], of ``layer``."""
        ...

    def attend(self, layer: int, q: torch.Tensor) -> torch.Tensor:
        """q [T, H_q, D] (rotated) -> [T, H_q, D] over each row's tree path, after this layer's writes."""
        ...


def _same(x: torch.Tensor) -> torch.Tensor:
    return x


def rope_inv_freq(cfg: ModelConfig) -> torch.Tensor:
    """[D / 2] float32 inverse frequencies, with linear or llama3 scaling applied."""
    d = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    scaling = cfg.rope_scaling
    if scaling is None:
        return inv
    factor = float(scaling["factor"])
    if scaling["rope_type"] == "linear":
        return inv / factor
    low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
    old = float(scaling["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > old / low, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old / high) & (wavelen <= old / low)
    return torch.where(medium, smoothed, scaled)


class Transformer:
    """Weights and forward of one Llama-family decoder (inference only)."""

    def __init__(self, cfg: ModelConfig, weights: dict[str, torch.Tensor], device: torch.device) -> None:
        self.cfg = cfg
        self.device = device
        self.w = weights
        self.inv_freq = rope_inv_freq(cfg).to(device)
        # Fused Triton kernels for norms, rotary + KV store and the gated MLP product: the GPU
        # path. The CPU path runs the PyTorch references (tests switch this on under the
        # Triton interpreter).
        self.fused = device.type == "cuda"
        # With ``fused``: projections of up to this many rows (a decode step's) run the few-row
        # kernel where it fits the weight (kernels/linear.py); 0 leaves every one to cuBLAS.
        # LM sets this and ``epilogues`` from its RuntimeConfig; benchmarks switch them between
        # captures.
        self.few_rows = MAX_ROWS
        # With ``fused``: where the few-row kernel takes them, the gate/up projection writes the
        # SiLU product, the q/k/v projection rotates and stores, and the attention output and MLP
        # down projections add the residual and weigh the next norm's rows, in their epilogues;
        # False launches silu_mul, rope_store and add_rms_norm after them instead.
        self.epilogues = True
        # With ``epilogues`` on one GPU: the attention output and MLP down projections add the
        # residual and leave the next norm to the projection after them (linear.NormedRows);
        # False launches add_rms_norm between them (for A/B runs; a rounding of the normed rows moves).
        self.norm_epilogue = True
        # With ``epilogues``: on GPUs that have it, the q/k/v, attention output and MLP down
        # projections are launched behind the kernel before them (linear._launch); False
        # launches them plainly (for A/B runs).
        self.dependent_launches = True
        # Tensor parallelism (parallel.py) shards the weights and sets these: the heads this process
        # computes, the sum of row-parallel partial outputs, and the join of vocabulary-sliced logits.
        self.num_heads, self.num_kv_heads = cfg.num_heads, cfg.num_kv_heads
        self.reduce: Callable[[torch.Tensor], torch.Tensor] = _same
        self.gather: Callable[[torch.Tensor], torch.Tensor] = _same

    @property
    def dtype(self) -> torch.dtype:
        return self.w["embed"].dtype

    def _linear(self) -> Callable[..., torch.Tensor]:
        if not self.fused or self.few_rows <= 0:
            return F.linear
        return functools.partial(few_row_linear, max_rows=self.few_rows)

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, positions: torch.Tensor, kv: StepKV) -> torch.Tensor:
        """ids, positions: [T] on device. Returns the final-normed hidden states [T, hidden]."""
        cfg, w = self.cfg, self.w
        hq, hkv, d, eps = self.num_heads, self.num_kv_heads, cfg.head_dim, cfg.rms_norm_eps
        add_norm = add_rms_norm if self.fused else add_rms_norm_reference
        if not self.fused:
            cos, sin = rope_cos_sin(positions, self.inv_freq, self.dtype)
            write = kv.write_slots[: kv.num_write]
        linear = self._linear()
        fold = self.fused and self.epilogues and self.norm_epilogue and self.reduce is _same
        dependent = None if self.dependent_launches else False

        def project_add_norm(x: torch.Tensor, name: str, residual: torch.Tensor, norm: str, last: bool = False):
            if fold and not last:
                return linear_add_norm(x, w[name], w.get(name + "_bias"), residual, w[norm], eps, self.few_rows,
                                       dependent)
            return add_norm(self.reduce(linear(x, w[name], w.get(name + "_bias"))), residual, w[norm], eps)

        h, residual = add_norm(F.embedding(ids, w["embed"]), None, w["layers.0.ln1"], eps)
        for i in range(cfg.num_layers):
            p = f"layers.{i}."
            k_cache, v_cache = kv.caches(i)
            if self.fused and self.epilogues and not cfg.qk_norm:
                q = linear_rope_store(h, w[p + "qkv"], w.get(p + "qkv_bias"), positions, self.inv_freq, k_cache,
                                      v_cache,
                                      kv.write_slots, hq, hkv, self.few_rows, dependent)
            else:
                qkv = linear(h, w[p + "qkv"], w.get(p + "qkv_bias"))
                q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
                q, k, v = q.view(-1, hq, d), k.view(-1, hkv, d), v.view(-1, hkv, d)
                if cfg.qk_norm:
                    q = rms_norm_reference(q, w[p + "q_norm"], eps)
                    k = rms_norm_reference(k, w[p + "k_norm"], eps)
                if self.fused:
                    q = rope_store(q, k, v, positions, self.inv_freq, k_cache, v_cache, kv.write_slots)
                else:
                    q, k = rotate_reference(q, cos, sin), rotate_reference(k, cos, sin)
                    store_kv_reference(k_cache, v_cache, k[: kv.num_write], v[: kv.num_write], write)
            o = kv.attend(i, q).reshape(-1, hq * d)
            h, residual = project_add_norm(o, p + "o", residual, p + "ln2")
            if self.fused and self.epilogues:
                act = linear_silu_mul(h, w[p + "gate_up"], w.get(p + "gate_up_bias"), self.few_rows)
            else:
                gate_up = linear(h, w[p + "gate_up"], w.get(p + "gate_up_bias"))
                act = silu_mul(gate_up) if self.fused else silu_mul_reference(gate_up)
            last = i + 1 == cfg.num_layers
            h, residual = project_add_norm(act, p + "down", residual, "norm" if last else f"layers.{i + 1}.ln1", last)
        return h

    @torch.inference_mode()
    def logits(self, hidden: torch.Tensor, upcast: bool = True, out: torch.Tensor | None = None) -> torch.Tensor:
        """[R, hidden] -> [R, vocab], float32 (``upcast=False``: the model's dtype). ``out``: an
        [R, vocab] tensor in the model's dtype to write them into (with ``upcast=False``)."""
        linear = self._linear()
        if out is None:
            logits = self.gather(linear(hidden, self.w["lm_head"]))
            return logits.float() if upcast else logits
        if upcast:
            raise ValueError("logits into a given tensor stay in the model's dtype (upcast=False)")
        if self.gather is not _same:  # a tensor-parallel rank gathers the vocabulary's parts into a new tensor
            return out.copy_(self.gather(linear(hidden, self.w["lm_head"])))
        if linear is F.linear:
            return dense_into(hidden, self.w["lm_head"], None, out)
        return linear(hidden, self.w["lm_head"], out=out)
