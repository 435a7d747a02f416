"""Reading a Hugging Face safetensors checkpoint into the fused weights of :class:`model.Transformer`.

The files' headers come first: the config is checked against every tensor's shape, missing
tensors are named, and on a GPU the weights' size is checked against its free memory, all before
a byte is copied. Then each tensor the model uses goes to the target device and dtype as soon as
it is read, and the projections that run as one matmul (q, k and v; gate and up) are joined
there. So the host holds no copy of the model: safetensors maps the files, and on a GPU the bytes
go through two pinned buffers, the host filling one while the device copies out of the other.
The joins run on the device, and each part is freed once joined.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from safetensors import safe_open

from .model import Transformer
from .model_config import ModelConfig, ModelLoadError, check_tensor_shapes

# narrow(checkpoint tensor name, shape) -> (dim, start, stop) to read only that slice, or None for all
Narrow = Callable[[str, Sequence[int]], "tuple[int, int, int] | None"]

STAGING_BYTES = 64 << 20  # each of the two pinned buffers a GPU load copies through


class _Upload:
    """Copies host tensors to a CUDA device through two pinned buffers that take turns."""

    def __init__(self, device: torch.device, chunk: int) -> None:
        self.device, self.chunk = device, chunk
        self.buffers = [torch.empty(chunk, dtype=torch.uint8, pin_memory=True) for _ in range(2)]
        self.done = [torch.cuda.Event() for _ in range(2)]  # a buffer's last copy to the device
        self.turn = 0
        self.stream = torch.cuda.current_stream(device)

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        out = torch.empty(t.shape, dtype=t.dtype, device=self.device)
        src = t.contiguous().reshape(-1).view(torch.uint8)
        dst = out.reshape(-1).view(torch.uint8)
        for start in range(0, src.numel(), self.chunk):
            n = min(self.chunk, src.numel() - start)
            buf, done = self.buffers[self.turn], self.done[self.turn]
            done.synchronize()  # the device has finished copying out of this buffer
            buf[:n].copy_(src[start : start + n])
            dst[start : start + n].copy_(buf[:n], non_blocking=True)
            done.record(self.stream)
            self.turn = 1 - self.turn
        return out

    def finish(self) -> None:
        for done in self.done:
            done.synchronize()


def shard_files(path: Path) -> list[Path]:
    """The checkpoint's safetensors files, from its index when it has one."""
    index = path / "model.safetensors.index.json"
    if index.is_file():
        names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        names = sorted(p.name for p in path.glob("*.safetensors"))
    if not names:
        raise ModelLoadError(
            f"{path} holds no *.safetensors weights; save the model with save_pretrained(safe_serialization=True)"
        )
    for name in names:
        if not (path / name).is_file():
            raise ModelLoadError(f"{path} lacks the weight shard {name} named in its index")
    return [path / name for name in names]


def tensor_index(files: Sequence[Path]) -> dict[str, tuple[Path, str, tuple[int, ...]]]:
    """Every tensor's file, key and full shape, by name without the ``model.`` prefix (headers only)."""
    index: dict[str, tuple[Path, str, tuple[int, ...]]] = {}
    for file in files:
        try:
            with safe_open(str(file), framework="pt") as f:
                for key in f.keys():
                    index[key.removeprefix("model.")] = (file, key, tuple(f.get_slice(key).get_shape()))
        except Exception as exc:  # safetensors raises its own error types for damaged files
            raise ModelLoadError(f"cannot read weights from {file}: {exc}") from exc
    return index


def read_tensors(
    index: dict[str, tuple[Path, str, tuple[int, ...]]],
    names: Sequence[str],
    device: torch.device,
    dtype: torch.dtype,
    narrow: Narrow | None = None,
) -> dict[str, torch.Tensor]:
    """The tensors ``names`` of ``index`` (only the slices ``narrow`` asks for) on ``device`` in ``dtype``."""
    upload = _Upload(device, STAGING_BYTES) if device.type == "cuda" else None
    out: dict[str, torch.Tensor] = {}
    by_file: dict[Path, list[str]] = {}
    for name in names:
        by_file.setdefault(index[name][0], []).append(name)
    for file, group in by_file.items():
        try:
            with safe_open(str(file), framework="pt") as f:
                for name in group:
                    _, key, shape = index[name]
                    part = narrow(key, shape) if narrow is not None else None
                    t = f.get_tensor(key) if part is None else _read_slice(f.get_slice(key), *part)
                    out[name] = (upload(t) if upload is not None else t).to(dtype)
        except torch.OutOfMemoryError as exc:  # the device's, not the file's: memory taken since the check
            raise ModelLoadError(
                f"{device} ran out of memory while the weights of {file.name} were copied to it: another program "
                "took GPU memory after this one found that the weights fit. Free GPU memory, or load the models "
                "one after another"
            ) from exc
        except Exception as exc:  # safetensors raises its own error types for damaged files
            raise ModelLoadError(f"cannot read weights from {file}: {exc}") from exc
    if upload is not None:
        upload.finish()
    return out


def _size(shape: tuple[int, ...], part: tuple[int, int, int] | None) -> int:
    dims = list(shape)
    if part is not None:
        dim, start, stop = part
        dims[dim] = stop - start
    return math.prod(dims)


def _check_room(
    index: dict, names: Sequence[str], device: torch.device, dtype: torch.dtype, narrow: Narrow | None
) -> None:
    """A clear error, before anything is copied, when the weights cannot fit in the GPU's free memory."""
    if device.type != "cuda":
        return
    need = dtype.itemsize * sum(
        _size(shape, narrow(key, shape) if narrow is not None else None) for _, key, shape in (index[n] for n in names)
    )
    free, _ = torch.cuda.mem_get_info(device)
    if need > free:
        raise ModelLoadError(
            f"the model's weights take {need / 2**30:.1f} GiB in {str(dtype).removeprefix('torch.')} but {device} has "
            f"{free / 2**30:.1f} GiB free; free GPU memory, choose a smaller dtype or split the model over GPUs "
            "(tensor_parallel=N)"
        )


def _read_slice(tensor: Any, dim: int, start: int, stop: int) -> torch.Tensor:
    return tensor[start:stop] if dim == 0 else tensor[:, start:stop]


def _layer_names(cfg: ModelConfig, i: int) -> dict[str, list[str]]:
    """The fused weights of layer ``i`` and the checkpoint tensors each is made of, in order."""
    a, m, p = f"layers.{i}.self_attn.", f"layers.{i}.mlp.", f"layers.{i}."
    names = {
        p + "ln1": [p + "input_layernorm.weight"],
        p + "ln2": [p + "post_attention_layernorm.weight"],
        p + "qkv": [a + f"{n}_proj.weight" for n in "qkv"],
        p + "o": [a + "o_proj.weight"],
        p + "gate_up": [m + "gate_proj.weight", m + "up_proj.weight"],
        p + "down": [m + "down_proj.weight"],
    }
    if cfg.attention_bias:
        names[p + "qkv_bias"] = [a + f"{n}_proj.bias" for n in "qkv"]
    if cfg.qk_norm:
        names[p + "q_norm"], names[p + "k_norm"] = [a + "q_norm.weight"], [a + "k_norm.weight"]
    if cfg.mlp_bias:
        names[p + "gate_up_bias"] = [m + "gate_proj.bias", m + "up_proj.bias"]
        names[p + "down_bias"] = [m + "down_proj.bias"]
    return names


def load_transformer(
    path: str | Path, cfg: ModelConfig, *, device: torch.device, dtype: torch.dtype, narrow: Narrow | None = None
) -> Transformer:
    """Read a Hugging Face safetensors checkpoint (sharded or not) into fused inference weights.

    ``narrow`` reads only a slice of some tensors (a tensor-parallel rank's shard).
    """
    fused = {"embed": ["embed_tokens.weight"], "norm": ["norm.weight"]}
    for i in range(cfg.num_layers):
        fused.update(_layer_names(cfg, i))
    index = tensor_index(shard_files(Path(path)))
    check_tensor_shapes(cfg, {name: shape for name, (_, _, shape) in index.items()}, str(path))
    output_biases = [f"layers.{i}.self_attn.o_proj.bias" for i in range(cfg.num_layers) if cfg.output_bias]
    names = [n for parts in fused.values() for n in parts] + output_biases
    missing = [n for n in names if n not in index]
    if "lm_head.weight" not in index and not cfg.tie_word_embeddings:
        missing.append("lm_head.weight")
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise ModelLoadError(f"checkpoint at {path} lacks tensors: {shown}")
    names += ["lm_head.weight"] if "lm_head.weight" in index else []
    _check_room(index, names, device, dtype, narrow)
    raw = read_tensors(index, names, device, dtype, narrow)
    weights = {}
    for name, parts in fused.items():
        # Joined on the device; each part is dropped once used, so the joins need little room.
        tensors = [raw.pop(n) for n in parts]
        weights[name] = tensors[0] if len(tensors) == 1 else torch.cat(tensors)
        del tensors
    weights["lm_head"] = raw.pop("lm_head.weight", weights["embed"])
    for i in range(cfg.num_layers):
        bias = raw.pop(f"layers.{i}.self_attn.o_proj.bias", None)
        if bias is not None:
            weights[f"layers.{i}.o_bias"] = bias
    expect = (cfg.vocab_size, cfg.hidden_size)
    if tuple(weights["embed"].shape) != expect:
        raise ModelLoadError(f"embedding shape {tuple(weights['embed'].shape)} does not match config {expect}")
    return Transformer(cfg, weights, device)
