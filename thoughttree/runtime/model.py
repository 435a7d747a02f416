"""A lean forward for the Llama family (Llama 2/3, Mistral, Qwen2/2.5, Qwen3) over flat token rows.

The model sees a flat batch of token rows (any mix of prefill, decode and recompute rows);
attention is delegated per layer to a callback that reads and writes the tree KV cache.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from safetensors import safe_open

from .model_config import ModelConfig, ModelLoadError, check_tensor_shapes

# attend(layer, q [T, H_q, D], k [T, H_kv, D], v [T, H_kv, D]) -> [T, H_q, D]
Attend = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


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


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class Transformer:
    """Weights and forward of one Llama-family decoder (inference only)."""

    def __init__(self, cfg: ModelConfig, weights: dict[str, torch.Tensor], device: torch.device) -> None:
        self.cfg = cfg
        self.device = device
        self.w = weights
        self.inv_freq = rope_inv_freq(cfg).to(device)

    @property
    def dtype(self) -> torch.dtype:
        return self.w["embed"].dtype

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, positions: torch.Tensor, attend: Attend) -> torch.Tensor:
        """ids, positions: [T] on device. Returns the final-normed hidden states [T, hidden]."""
        cfg, w = self.cfg, self.w
        hq, hkv, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        freqs = positions.float()[:, None] * self.inv_freq[None, :]  # [T, D/2]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(self.dtype)[:, None, :], emb.sin().to(self.dtype)[:, None, :]
        x = F.embedding(ids, w["embed"])
        for i in range(cfg.num_layers):
            p = f"layers.{i}."
            h = _rms_norm(x, w[p + "ln1"], cfg.rms_norm_eps)
            qkv = F.linear(h, w[p + "qkv"], w.get(p + "qkv_bias"))
            q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
            q, k, v = q.view(-1, hq, d), k.view(-1, hkv, d), v.view(-1, hkv, d)
            if cfg.qk_norm:
                q = _rms_norm(q, w[p + "q_norm"], cfg.rms_norm_eps)
                k = _rms_norm(k, w[p + "k_norm"], cfg.rms_norm_eps)
            q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
            o = attend(i, q, k, v).reshape(-1, hq * d)
            x = x + F.linear(o, w[p + "o"], w.get(p + "o_bias"))
            h = _rms_norm(x, w[p + "ln2"], cfg.rms_norm_eps)
            gate, up = F.linear(h, w[p + "gate_up"], w.get(p + "gate_up_bias")).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, w[p + "down"], w.get(p + "down_bias"))
        return _rms_norm(x, w["norm"], cfg.rms_norm_eps)

    @torch.inference_mode()
    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[R, hidden] -> [R, vocab] float32."""
        return F.linear(hidden, self.w["lm_head"]).float()


def _read_tensors(path: Path) -> dict[str, torch.Tensor]:
    index = path / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = sorted(p.name for p in path.glob("*.safetensors"))
    if not files:
        raise ModelLoadError(f"{path} holds no *.safetensors weights; save the model with save_pretrained(safe_serialization=True)")
    out: dict[str, torch.Tensor] = {}
    for name in files:
        file = path / name
        if not file.is_file():
            raise ModelLoadError(f"{path} lacks the weight shard {name} named in its index")
        try:
            with safe_open(str(file), framework="pt") as f:
                for key in f.keys():
                    out[key] = f.get_tensor(key)
        except Exception as exc:  # safetensors raises its own error types for damaged files
            raise ModelLoadError(f"cannot read weights from {file}: {exc}") from exc
    return out


def load_transformer(path: str | Path, cfg: ModelConfig, *, device: torch.device, dtype: torch.dtype) -> Transformer:
    """Read a Hugging Face safetensors checkpoint (sharded or not) into fused inference weights."""
    raw = _read_tensors(Path(path))
    raw = {k.removeprefix("model."): v for k, v in raw.items()}
    check_tensor_shapes(cfg, {k: tuple(v.shape) for k, v in raw.items()}, str(path))
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
