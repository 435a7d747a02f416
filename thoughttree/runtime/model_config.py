"""The architecture facts of a Llama-family checkpoint, read from its config.json."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

SUPPORTED = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
}
# The fields each RoPE scaling reads (transformers refuses a config without them).
ROPE_FIELDS = {
    "linear": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor"),
}
SILU = ("silu", "swish")  # transformers' names of the activation the gated MLP computes


class ModelLoadError(ValueError):
    """A model directory that cannot be loaded."""


@dataclass(frozen=True)
class ModelConfig:
    """What the forward needs; fields mirror Hugging Face names."""

    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict[str, Any] | None
    max_position_embeddings: int
    tie_word_embeddings: bool
    attention_bias: bool  # q/k/v projections carry biases (Qwen2, some Llamas)
    qk_norm: bool  # RMSNorm on each head's q and k before RoPE (Qwen3)
    mlp_bias: bool
    sliding_window: int | None
    bos_token_id: int | None
    eos_token_ids: tuple[int, ...]
    torch_dtype: str | None

    @property
    def max_context(self) -> int:
        """Longest sequence computed exactly: a sliding window below the context caps it."""
        if self.sliding_window is not None:
            return min(self.max_position_embeddings, self.sliding_window)
        return self.max_position_embeddings

    @property
    def output_bias(self) -> bool:
        """The attention's output projection carries a bias: Llama and Qwen3 with ``attention_bias``
        (Qwen2's biases are on q, k and v only)."""
        return self.attention_bias and self.model_type != "qwen2"

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ModelConfig:
        model_type = raw.get("model_type")
        if model_type not in SUPPORTED:
            archs = raw.get("architectures") or [model_type]
            raise ModelLoadError(
                f"unsupported architecture {archs[0]!r} (model_type {model_type!r}); supported: "
                + ", ".join(f"{v} ({k})" for k, v in SUPPORTED.items())
            )
        try:
            hidden, heads = int(raw["hidden_size"]), int(raw["num_attention_heads"])
            # transformers 5 folds rope_theta/rope_scaling into rope_parameters.
            rope = dict(raw.get("rope_parameters") or raw.get("rope_scaling") or {})
            theta = float(rope.pop("rope_theta", raw.get("rope_theta", 10000.0)))
            rope_type = rope.get("rope_type", rope.get("type", "default"))
            if rope_type not in ("default", "llama3", "linear"):
                raise ModelLoadError(f"unsupported RoPE scaling {rope_type!r}; supported: default, linear, llama3")
            if rope_type == "llama3":  # as transformers reads it: the top-level field first, the context last
                rope["original_max_position_embeddings"] = (
                    raw.get("original_max_position_embeddings") or rope.get("original_max_position_embeddings")
                    or raw.get("max_position_embeddings", 2048))
            partial = float(rope.get("partial_rotary_factor", raw.get("partial_rotary_factor", 1.0)))
            if rope_type != "default" and partial != 1.0:  # transformers rotates only part of each head then
                raise ModelLoadError(f"unsupported partial_rotary_factor {partial} with {rope_type!r} RoPE: this "
                                     "runtime rotates whole heads; use a checkpoint that rotates every dimension")
            missing = [k for k in ROPE_FIELDS.get(rope_type, ()) if rope.get(k) is None]
            if missing:
                raise ModelLoadError(f"config.json's RoPE scaling {rope_type!r} lacks {', '.join(missing)}; add "
                                     "them to its rope_scaling (rope_parameters)")
            act = raw.get("hidden_act", "silu")
            if act not in SILU:
                raise ModelLoadError(f"unsupported hidden_act {act!r}: the MLP of this runtime computes SiLU "
                                     "(silu, swish) only; use a checkpoint whose config.json has hidden_act silu")
            window = raw.get("sliding_window")
            if model_type in ("qwen2", "qwen3") and not raw.get("use_sliding_window", False):
                window = None
            if not raw.get("head_dim") and heads > 0 and hidden > 0 and hidden % heads:
                raise ModelLoadError(f"config.json hidden_size={hidden} is not a multiple of num_attention_heads="
                                     f"{heads} and there is no head_dim; correct one of them in config.json")
            if heads <= 0:
                raise ModelLoadError(f"config.json num_attention_heads={heads} must be a positive integer; "
                                     "correct it in config.json")
            return cls(
                model_type=model_type,
                vocab_size=int(raw["vocab_size"]),
                hidden_size=hidden,
                intermediate_size=int(raw["intermediate_size"]),
                num_layers=int(raw["num_hidden_layers"]),
                num_heads=heads,
                num_kv_heads=int(raw.get("num_key_value_heads") or heads),
                head_dim=int(raw.get("head_dim") or hidden // heads),
                rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
                rope_theta=theta,
                rope_scaling=None if rope_type == "default" else {**rope, "rope_type": rope_type},
                max_position_embeddings=int(raw.get("max_position_embeddings", 2048)),
                tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
                # As transformers builds each family: Qwen2's q/k/v always carry biases, Mistral's never;
                # only Llama reads mlp_bias.
                attention_bias=model_type == "qwen2" or (model_type != "mistral" and bool(raw.get("attention_bias"))),
                qk_norm=model_type == "qwen3",
                mlp_bias=model_type == "llama" and bool(raw.get("mlp_bias")),
                sliding_window=int(window) if window else None,
                bos_token_id=raw.get("bos_token_id"),
                eos_token_ids=_token_ids(raw.get("eos_token_id")),
                torch_dtype=raw.get("dtype") or raw.get("torch_dtype"),
            ).check_values()
        except KeyError as exc:
            raise ModelLoadError(f"config.json lacks the field {exc.args[0]!r}; is this a causal LM config?") from exc
        except (TypeError, ValueError) as exc:
            if isinstance(exc, ModelLoadError):
                raise
            bad = next((f"{k}={raw[k]!r}" for k in NUMERIC_FIELDS if k in raw and not _is_number(raw[k])), "a field")
            raise ModelLoadError(f"config.json {bad} is not a number ({exc}); correct it in config.json") from None

    def check_values(self) -> ModelConfig:
        """This config, when its sizes can make a model: every size positive, the attention heads a
        multiple of the key/value heads, the hidden size a multiple of the heads (where it gives the
        head size). ModelLoadError naming the config.json field otherwise."""
        sizes = {"vocab_size": self.vocab_size, "hidden_size": self.hidden_size,
                 "intermediate_size": self.intermediate_size, "num_hidden_layers": self.num_layers,
                 "num_attention_heads": self.num_heads, "num_key_value_heads": self.num_kv_heads,
                 "head_dim": self.head_dim, "max_position_embeddings": self.max_position_embeddings}
        for name, value in sizes.items():
            if value <= 0:
                raise ModelLoadError(f"config.json {name}={value} must be a positive integer; "
                                     "correct it in config.json")
        for name, real in {"rms_norm_eps": self.rms_norm_eps, "rope_theta": self.rope_theta}.items():
            if not 0 < real < float("inf"):
                raise ModelLoadError(f"config.json {name}={real} must be a positive number; correct it in config.json")
        if self.num_heads % self.num_kv_heads:
            raise ModelLoadError(f"config.json num_attention_heads={self.num_heads} is not a multiple of "
                                 f"num_key_value_heads={self.num_kv_heads}; correct one of them in config.json")
        return self

    @classmethod
    def from_dir(cls, path: str | Path) -> ModelConfig:
        path = Path(path)
        if path.is_file():
            raise ModelLoadError(f"model directory {path} is a file, not a directory; pass the directory that "
                                 f"holds config.json, *.safetensors and tokenizer files (perhaps {path.parent})")
        if not path.is_dir():
            bundled = (" (the bundled Game of 24 model is at thoughttree.commands.model.bundled_model_path())"
                       if str(path) == "bundled" else "")
            raise ModelLoadError(
                f"model directory {path} does not exist; pass a local directory holding config.json, "
                f"*.safetensors and tokenizer files (models are never downloaded){bundled}"
            )
        cfg = path / "config.json"
        if not cfg.is_file():
            raise ModelLoadError(f"{path} has no config.json; is it a Hugging Face model directory?")
        config = cls.from_dict(_json_object(cfg))
        # transformers' generate stops at generation_config.json's EOS tokens (instruct checkpoints list
        # their end-of-turn token there), so they end a generation here too.
        gen = path / "generation_config.json"
        if not gen.is_file():
            return config
        extra = _token_ids(_json_object(gen).get("eos_token_id"))
        return replace(config, eos_token_ids=tuple(dict.fromkeys(config.eos_token_ids + extra)))


NUMERIC_FIELDS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                  "num_key_value_heads", "head_dim", "max_position_embeddings", "rms_norm_eps", "rope_theta",
                  "sliding_window")


def _is_number(value: Any) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def _json_object(file: Path) -> dict[str, Any]:
    """The JSON object ``file`` holds; ModelLoadError naming the file otherwise."""
    try:
        raw = json.loads(file.read_text())
    except json.JSONDecodeError as exc:
        raise ModelLoadError(f"{file} is not valid JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise ModelLoadError(f"{file} does not hold a JSON object")
    return raw


def _token_ids(value: Any) -> tuple[int, ...]:
    """A config's token id field (one id, a list of them or null) as a tuple."""
    if value is None:
        return ()
    return tuple(int(t) for t in value) if isinstance(value, list) else (int(value),)


def check_tensor_shapes(cfg: ModelConfig, shapes: dict[str, tuple[int, ...]], where: str) -> None:
    """Check every config dimension against the checkpoint's tensor shapes (names without ``model.``).

    Raises ModelLoadError naming the config.json field that disagrees with the weights.
    """

    def fail(field: str, value: int, actual: int, what: str) -> None:
        raise ModelLoadError(f"config.json {field}={value} does not match the checkpoint at {where}: {what} "
                             f"gives {actual}; correct {field} in config.json")

    layers = {int(k.split(".")[1]) for k in shapes if k.startswith("layers.") and k.split(".")[1].isdigit()}
    if len(layers) != cfg.num_layers:
        fail("num_hidden_layers", cfg.num_layers, len(layers), "the number of layers.N tensors")
    embed = shapes.get("embed_tokens.weight")
    if embed is not None:
        if embed[0] != cfg.vocab_size:
            fail("vocab_size", cfg.vocab_size, embed[0], "embed_tokens.weight rows")
        if embed[1] != cfg.hidden_size:
            fail("hidden_size", cfg.hidden_size, embed[1], "embed_tokens.weight columns")
    head = shapes.get("lm_head.weight")
    if head is not None and head[0] != cfg.vocab_size:
        fail("vocab_size", cfg.vocab_size, head[0], "lm_head.weight rows")
    for i in sorted(layers):
        a, m = f"layers.{i}.self_attn.", f"layers.{i}.mlp."
        norm = shapes.get(a + "q_norm.weight")
        if norm is not None and norm[0] != cfg.head_dim:
            fail("head_dim", cfg.head_dim, norm[0], a + "q_norm.weight size")
        q, k = shapes.get(a + "q_proj.weight"), shapes.get(a + "k_proj.weight")
        if q is None or k is None:
            continue
        if q[0] != cfg.num_heads * cfg.head_dim or k[0] != cfg.num_kv_heads * cfg.head_dim:
            dims = {q[0] / cfg.num_heads, k[0] / cfg.num_kv_heads}
            if len(dims) == 1:  # both head counts agree on another head size
                fail("head_dim", cfg.head_dim, int(dims.pop()), f"{a}q_proj.weight rows / num_attention_heads")
            if q[0] != cfg.num_heads * cfg.head_dim:
                fail("num_attention_heads", cfg.num_heads, q[0] // cfg.head_dim, f"{a}q_proj.weight rows / head_dim")
            fail("num_key_value_heads", cfg.num_kv_heads, k[0] // cfg.head_dim, f"{a}k_proj.weight rows / head_dim")
        gate = shapes.get(m + "gate_proj.weight")
        if gate is not None and gate[0] != cfg.intermediate_size:
            fail("intermediate_size", cfg.intermediate_size, gate[0], m + "gate_proj.weight rows")
