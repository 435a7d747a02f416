"""The CPU KV pool fits the model, and the bundled tokenizer agrees with the model's context."""

from __future__ import annotations

import dataclasses
import json

import torch

from thoughttree import LM, RuntimeConfig
from thoughttree.commands.model import bundled_model_path
from thoughttree.runtime.load_options import CPU_PATHS, pool_pages
from thoughttree.runtime.model_config import ModelConfig


def test_the_cpu_pool_holds_full_context_paths_not_a_fixed_gibibyte(tiny_model_dir):
    lm = LM.from_pretrained(tiny_model_dir, device="cpu")
    assert lm.kv.pool.capacity_tokens == CPU_PATHS * lm.max_context
    bundled = LM.from_pretrained(bundled_model_path(), device="cpu")
    pool = bundled.kv.pool
    usable = pool.num_pages * pool.k[0, 0].numel() * pool.k.shape[0] * pool.k.element_size() * 2  # the scratch page aside
    assert pool.capacity_tokens == CPU_PATHS * 256 and usable <= 256 << 20


def test_a_large_model_on_the_cpu_stays_within_a_gibibyte():
    cfg = ModelConfig.from_dict(json.loads((bundled_model_path() / "config.json").read_text()))
    big = dataclasses.replace(cfg, num_layers=64, num_kv_heads=8, head_dim=128, max_position_embeddings=32768)
    pages = pool_pages(big, RuntimeConfig(), torch.float32, torch.device("cpu"))
    per_page = 2 * 64 * 16 * 8 * 128 * 4
    assert pages == (1 << 30) // per_page
    assert pool_pages(cfg, RuntimeConfig(kv_memory_bytes=1 << 20), torch.float32, torch.device("cpu")) == 8


def test_the_bundled_tokenizer_knows_the_models_context():
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(bundled_model_path()), local_files_only=True)
    config = json.loads((bundled_model_path() / "config.json").read_text())
    assert tokenizer.model_max_length == config["max_position_embeddings"] == 256


def test_running_out_of_gpu_memory_while_copying_weights_says_so(tmp_path, monkeypatch):
    """Memory taken by another program after the room was checked: a clear error, not a raw one."""
    import pytest
    from safetensors.torch import save_file

    from thoughttree.runtime import checkpoint
    from thoughttree.runtime.model_config import ModelLoadError

    save_file({"model.w": torch.zeros(2, 3)}, str(tmp_path / "model.safetensors"))
    index = checkpoint.tensor_index([tmp_path / "model.safetensors"])

    class Full:
        def __init__(self, *args, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def get_tensor(self, key):
            raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(checkpoint, "safe_open", Full)
    with pytest.raises(ModelLoadError, match=r"ran out of memory while the weights of model\.safetensors"):
        checkpoint.read_tensors(index, ["w"], torch.device("cpu"), torch.float32)
