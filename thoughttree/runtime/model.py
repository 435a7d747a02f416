"""A lean forward for the Llama family (Llama 2/3, Mistral, Qwen2/2.5, Qwen3) over flat token rows.

The model sees a flat batch of token rows (any mix of prefill, decode and recompute rows);
attention is delegated per layer to a callback that reads and writes the tree KV cache.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

import torch
import torch.nn.functional as F
from safetensors import safe_open

from ..kernels.fused import add_rms_norm, rope_store, silu_mul
from ..kernels.reference import (
    add_rms_norm_reference,
    rms_norm_reference,
    rope_cos_sin,
    rotate_reference,
    silu_mul_reference,
    store_kv_reference,
)
from .model_config import ModelConfig, ModelLoadError, check_tensor_shapes

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


# narrow(checkpoint tensor name, shape) -> (dim, start, stop) to read only that slice, or None for all
Narrow = Callable[[str, Sequence[int]], "tuple[int, int, int] | None"]


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
        # Tensor parallelism (parallel.py) shards the weights and sets these: the heads this process
        # computes, the sum of row-parallel partial outputs, and the join of vocabulary-sliced logits.
        self.num_heads, self.num_kv_heads = cfg.num_heads, cfg.num_kv_heads
        self.reduce: Callable[[torch.Tensor], torch.Tensor] = _same
        self.gather: Callable[[torch.Tensor], torch.Tensor] = _same

    @property
    def dtype(self) -> torch.dtype:
        return self.w["embed"].dtype

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, positions: torch.Tensor, kv: StepKV) -> torch.Tensor:
        """ids, positions: [T] on device. Returns the final-normed hidden states [T, hidden]."""
        cfg, w = self.cfg, self.w
        hq, hkv, d, eps = self.num_heads, self.num_kv_heads, cfg.head_dim, cfg.rms_norm_eps
        add_norm = add_rms_norm if self.fused else add_rms_norm_reference
        if not self.fused:
            cos, sin = rope_cos_sin(positions, self.inv_freq, self.dtype)
            write = kv.write_slots[: kv.num_write]
        x, residual = F.embedding(ids, w["embed"]), None
        for i in range(cfg.num_layers):
            p = f"layers.{i}."
            h, residual = add_norm(x, residual, w[p + "ln1"], eps)
            qkv = F.linear(h, w[p + "qkv"], w.get(p + "qkv_bias"))
            q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
            q, k, v = q.view(-1, hq, d), k.view(-1, hkv, d), v.view(-1, hkv, d)
            if cfg.qk_norm:
                q = rms_norm_reference(q, w[p + "q_norm"], eps)
                k = rms_norm_reference(k, w[p + "k_norm"], eps)
            k_cache, v_cache = kv.caches(i)
            if self.fused:
                q = rope_store(q, k, v, positions, self.inv_freq, k_cache, v_cache, kv.write_slots)
            else:
                q, k = rotate_reference(q, cos, sin), rotate_reference(k, cos, sin)
                store_kv_reference(k_cache, v_cache, k[: kv.num_write], v[: kv.num_write], write)
            o = kv.attend(i, q).reshape(-1, hq * d)
            x = self.reduce(F.linear(o, w[p + "o"], w.get(p + "o_bias")))
            h, residual = add_norm(x, residual, w[p + "ln2"], eps)
            gate_up = F.linear(h, w[p + "gate_up"], w.get(p + "gate_up_bias"))
            act = silu_mul(gate_up) if self.fused else silu_mul_reference(gate_up)
            x = self.reduce(F.linear(act, w[p + "down"], w.get(p + "down_bias")))
        return add_norm(x, residual, w["norm"], eps)[0]

    @torch.inference_mode()
    def logits(self, hidden: torch.Tensor, upcast: bool = True) -> torch.Tensor:
        """[R, hidden] -> [R, vocab], float32 (``upcast=False``: the model's dtype)."""
        out = self.gather(F.linear(hidden, self.w["lm_head"]))
        return out.float() if upcast else out


def _read_tensors(
    path: Path, narrow: Narrow | None = None
) -> tuple[dict[str, torch.Tensor], dict[str, tuple[int, ...]]]:
    """The tensors (only the slices ``narrow`` asks for) and every tensor's full shape, by name."""
    index = path / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = sorted(p.name for p in path.glob("*.safetensors"))
    if not files:
        raise ModelLoadError(f"{path} holds no *.safetensors weights; save the model with save_pretrained(safe_serialization=True)")
    out: dict[str, torch.Tensor] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    for name in files:
        file = path / name
        if not file.is_file():
            raise ModelLoadError(f"{path} lacks the weight shard {name} named in its index")
        try:
            with safe_open(str(file), framework="pt") as f:
                for key in f.keys():
                    shapes[key] = tuple(f.get_slice(key).get_shape())
                    part = narrow(key, shapes[key]) if narrow is not None else None
                    out[key] = f.get_tensor(key) if part is None else _read_slice(f.get_slice(key), *part)
        except Exception as exc:  # safetensors raises its own error types for damaged files
            raise ModelLoadError(f"cannot read weights from {file}: {exc}") from exc
    return out, shapes


def _read_slice(tensor: Any, dim: int, start: int, stop: int) -> torch.Tensor:
    return tensor[start:stop] if dim == 0 else tensor[:, start:stop]


def load_transformer(
    path: str | Path, cfg: ModelConfig, *, device: torch.device, dtype: torch.dtype, narrow: Narrow | None = None
) -> Transformer:
    """Read a Hugging Face safetensors checkpoint (sharded or not) into fused inference weights.

    ``narrow`` reads only a slice of some tensors (a tensor-parallel rank's shard).
    """
    raw, shapes = _read_tensors(Path(path), narrow)
    raw = {k.removeprefix("model."): v for k, v in raw.items()}
    check_tensor_shapes(cfg, {k.removeprefix("model."): s for k, s in shapes.items()}, str(path))
    missing: list[str] = []

    def take(name: str, required: bool = True) -> torch.Tensor | None:
        t = raw.get(name)
        if t is None and required:
            missing.append(name)
        return t

    w: dict[str, torch.Tensor | None] = {"embed": take("embed_tokens.weight"), "norm": take("norm.weight")}
    head = raw.get("lm_head.weight")
    if head is None and not cfg.tie_word_embeddings:
        missing.append("lm_head.weight")
    w["lm_head"] = head if head is not None else w["embed"]
    for i in range(cfg.num_layers):
        a, m, p = f"layers.{i}.self_attn.", f"layers.{i}.mlp.", f"layers.{i}."
        w[p + "ln1"] = take(p + "input_layernorm.weight")
        w[p + "ln2"] = take(p + "post_attention_layernorm.weight")
        qkv = [take(a + f"{n}_proj.weight") for n in "qkv"]
        w[p + "qkv"] = torch.cat(qkv) if all(t is not None for t in qkv) else None
        if cfg.attention_bias:
            biases = [take(a + f"{n}_proj.bias") for n in "qkv"]
            w[p + "qkv_bias"] = torch.cat(biases) if all(t is not None for t in biases) else None
            w[p + "o_bias"] = raw.get(a + "o_proj.bias")
        w[p + "o"] = take(a + "o_proj.weight")
        if cfg.qk_norm:
            w[p + "q_norm"] = take(a + "q_norm.weight")
            w[p + "k_norm"] = take(a + "k_norm.weight")
        gate, up = take(m + "gate_proj.weight"), take(m + "up_proj.weight")
        w[p + "gate_up"] = torch.cat([gate, up]) if gate is not None and up is not None else None
        w[p + "down"] = take(m + "down_proj.weight")
        if cfg.mlp_bias:
            gb, ub = take(m + "gate_proj.bias"), take(m + "up_proj.bias")
            w[p + "gate_up_bias"] = torch.cat([gb, ub]) if gb is not None and ub is not None else None
            w[p + "down_bias"] = take(m + "down_proj.bias")
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise ModelLoadError(f"checkpoint at {path} lacks tensors: {shown}")
    weights = {k: v.to(device=device, dtype=dtype) for k, v in w.items() if v is not None}
    expect = (cfg.vocab_size, cfg.hidden_size)
    if tuple(weights["embed"].shape) != expect:
        raise ModelLoadError(f"embedding shape {tuple(weights['embed'].shape)} does not match config {expect}")
    return Transformer(cfg, weights, device)
