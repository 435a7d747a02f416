"""Bad input gets a clear error naming the problem and the fix, and leaves the tree usable."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from thoughttree import LM, RuntimeConfig, Sampling, ThoughtTree
from thoughttree.runtime import KVPoolExhausted, ModelLoadError
from thoughttree.tree import TreeError


def test_missing_directory(tmp_path) -> None:
    with pytest.raises(ModelLoadError, match="does not exist.*never downloaded"):
        LM.from_pretrained(tmp_path / "nope")


def test_directory_without_config(tmp_path) -> None:
    with pytest.raises(ModelLoadError, match="no config.json"):
        LM.from_pretrained(tmp_path)


def test_malformed_config(tmp_path) -> None:
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ModelLoadError, match="not valid JSON"):
        LM.from_pretrained(tmp_path)


def test_unsupported_architecture_lists_supported(tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}))
    with pytest.raises(ModelLoadError, match="unsupported architecture 'GPT2LMHeadModel'.*LlamaForCausalLM.*Qwen3ForCausalLM"):
        LM.from_pretrained(tmp_path)


def test_an_activation_other_than_silu_is_refused(tmp_path, tiny_model_dir) -> None:
    from thoughttree.runtime.model_config import ModelConfig

    config = json.loads((tiny_model_dir / "config.json").read_text())
    assert ModelConfig.from_dict({**config, "hidden_act": "swish"}).hidden_size == config["hidden_size"]
    (tmp_path / "config.json").write_text(json.dumps({**config, "hidden_act": "relu"}))  # e.g. ReluLLaMA
    with pytest.raises(ModelLoadError, match="unsupported hidden_act 'relu'.*SiLU"):
        LM.from_pretrained(tmp_path, device="cpu")


@pytest.mark.parametrize("key", ["rope_scaling", "rope_parameters"])
def test_a_rope_scaling_without_its_fields_names_them(tmp_path, key) -> None:
    from tiny_models import make_model

    path = make_model(tmp_path, "llama")
    config = json.loads((path / "config.json").read_text())
    config.pop("rope_parameters", None)
    (path / "config.json").write_text(json.dumps({**config, key: {"rope_type": "llama3", "factor": 8.0}}))
    with pytest.raises(ModelLoadError, match="RoPE scaling 'llama3' lacks low_freq_factor, high_freq_factor; add them"):
        LM.from_pretrained(path, device="cpu")


def test_missing_weights_and_tokenizer(tmp_path, tiny_model_dir) -> None:
    shutil.copy(tiny_model_dir / "config.json", tmp_path / "config.json")
    with pytest.raises(ModelLoadError, match="tokenizer"):
        LM.from_pretrained(tmp_path, device="cpu")
    for f in tiny_model_dir.iterdir():
        if f.name.startswith(("tokenizer", "special")):
            shutil.copy(f, tmp_path / f.name)
    with pytest.raises(ModelLoadError, match="no \\*.safetensors"):
        LM.from_pretrained(tmp_path, device="cpu")
    (tmp_path / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(ModelLoadError, match="cannot read weights"):
        LM.from_pretrained(tmp_path, device="cpu")


def test_a_config_transformers_refuses_is_not_blamed_on_missing_tokenizer_files(tmp_path) -> None:
    from tiny_models import make_model

    path = make_model(tmp_path, "llama")
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "layer_types": ["full_attention"]}))  # 2 layers
    with pytest.raises(ModelLoadError, match="layer_types.*; check tokenizer.json, tokenizer_config.json and "
                                             "config.json"):
        LM.from_pretrained(path, device="cpu")


def test_prompt_longer_than_context(tiny_model_dir) -> None:
    lm = LM.from_pretrained(tiny_model_dir, device="cpu", runtime=RuntimeConfig(num_pages=256))
    with pytest.raises(TreeError, match="longer than the model's context of 512"):
        ThoughtTree(lm, prompt=[1] + [5] * 600)
    tree = ThoughtTree(lm, prompt=[1] + [5] * 505)
    (kid,) = tree.expand([tree.root], sampling=Sampling(max_tokens=50, ignore_eos=True))[0]
    assert kid.metadata["finish_reason"] == "length" and kid.num_path_tokens == 512
    with pytest.raises(TreeError, match=f"node {kid.id}'s path of 512 tokens leaves no room"):
        tree.expand([kid])
    with pytest.raises(ValueError, match="longer than the model's context"):
        lm.tree_logits([[1] * 513])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        lm.tree_logits([[1, 10**6]])
    with pytest.raises(ValueError, match="a path of 512 tokens leaves no room in the model's context of 512"):
        lm.complete([[1] + [5] * 511], Sampling(max_tokens=3, ignore_eos=True), [0])
    tree.prune(tree.root)
    lm.check_integrity(tree)
    assert lm.kv.pool.num_used == 0


def test_a_given_child_is_checked_against_the_vocabulary_and_its_whole_path(tiny_model_dir) -> None:
    lm = LM.from_pretrained(tiny_model_dir, device="cpu", runtime=RuntimeConfig(num_pages=256))
    vocab = lm.config.vocab_size
    tree = ThoughtTree(lm, prompt=[1] + [5] * 499)
    with pytest.raises(TreeError, match=f"token id {vocab}; token ids are whole numbers from 0 below {vocab}"):
        tree.add_child(tree.root, [5, vocab], "")
    with pytest.raises(TreeError, match="a path of 513 tokens is longer than the model's context of 512"):
        tree.add_child(tree.root, [vocab - 1] * 13, "")
    kid = tree.add_child(tree.root, [vocab - 1] * 12, "")
    assert kid.num_path_tokens == 512 and len(tree) == 2
    tree.check_integrity()


@pytest.mark.parametrize("kwargs, message", [
    ({"device": "gpu"}, "is not a device; use cpu or cuda"),
    ({"device": "meta"}, "thoughttree runs on cpu or cuda, not meta"),
    ({"dtype": torch.int8}, "unsupported dtype torch.int8"),
    ({"dtype": torch.float64}, "unsupported dtype torch.float64"),
    ({"device": "cpu", "runtime": RuntimeConfig(attention="deft")}, "attention 'deft' runs Triton kernels on a CUDA GPU"),
    ({"device": "cpu", "dtype": "float32", "runtime": RuntimeConfig(attention="per_sequence")}, "takes 16-bit weights"),
])
def test_a_device_dtype_or_attention_that_cannot_run_is_refused_before_loading(tiny_model_dir, monkeypatch, kwargs, message) -> None:
    if "runtime" in kwargs and "16-bit" not in message:
        monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr("thoughttree.runtime.lm.load_transformer", lambda *a, **k: pytest.fail("loaded the weights"))
    with pytest.raises(ValueError, match=message):
        LM.from_pretrained(tiny_model_dir, **kwargs)


def test_a_dtype_from_config_or_one_the_gpu_lacks_is_refused_by_name(tiny_model_dir, monkeypatch) -> None:
    from thoughttree.runtime.load_options import resolve_dtype
    from thoughttree.runtime.model_config import ModelConfig

    config = json.loads((tiny_model_dir / "config.json").read_text())
    cfg = ModelConfig.from_dict({**config, "dtype": "float64"})
    gpu = torch.device("cuda")
    with pytest.raises(ValueError, match=r"unsupported dtype in config.json 'float64'; pass dtype= \(--dtype\)"):
        resolve_dtype(None, cfg, gpu)
    assert resolve_dtype(None, cfg, torch.device("cpu")) is torch.float32
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))
    for dtype in (torch.bfloat16, "bfloat16"):
        with pytest.raises(ValueError, match="bfloat16 needs a GPU of compute capability 8.0 or newer; cuda has 7.5"):
            resolve_dtype(dtype, cfg, gpu)
    assert resolve_dtype("float16", cfg, gpu) is torch.float16
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert resolve_dtype(None, ModelConfig.from_dict({**config, "dtype": None}), gpu) is torch.bfloat16


def test_tree_logits_takes_lists_of_whole_token_ids(tiny_model_dir) -> None:
    lm = LM.from_pretrained(tiny_model_dir, device="cpu", runtime=RuntimeConfig(num_pages=64))
    for bad, message in (([1, 5, 6], "pass a list of token-id lists"), ([[1, 5.5]], "whole numbers"),
                         ([["1", "5"]], "whole numbers"), ([[1, True]], "whole numbers"), ([[1, 2**70]], "whole numbers")):
        with pytest.raises(TypeError, match=message):
            lm.tree_logits(bad)
    logits = lm.tree_logits([[1, 5], (1, 6), torch.tensor([1, 7]), np.array([1, 8])])
    assert logits.shape == (4, lm.config.vocab_size)
    torch.testing.assert_close(logits[2], lm.tree_logits([[1, 7]])[0], rtol=1e-5, atol=1e-5)
    lm.check_integrity()
    assert lm.kv.pool.num_used == 0


def test_tree_misuse(tiny_model_dir) -> None:
    lm = LM.from_pretrained(tiny_model_dir, device="cpu", runtime=RuntimeConfig(num_pages=64))
    tree = ThoughtTree(lm, prompt="the quick brown fox")
    kid = tree.root.extend(" jumps")
    tree.prune(kid)
    with pytest.raises(TreeError, match="pruned"):
        tree.expand([kid])
    with pytest.raises(TreeError, match="same node twice"):
        tree.expand([tree.root, tree.root])
    with pytest.raises(TreeError, match="sampling must be a thoughttree Sampling, got dict"):
        tree.expand([tree.root], sampling={"max_tokens": 5})
    with pytest.raises(TreeError, match="non-empty"):
        tree.root.extend("")
    with pytest.raises(TreeError, match="needs a model"):
        ThoughtTree(None, prompt=[1, 2]).expand([])
    assert len(tree.expand([tree.root], n=2, sampling=Sampling(max_tokens=3))[0]) == 2


@pytest.mark.parametrize(
    "arch,change,field",
    [
        ("llama", {"num_hidden_layers": 1}, "num_hidden_layers=1"),
        ("llama", {"num_hidden_layers": 3}, "num_hidden_layers=3"),
        ("llama", {"num_attention_heads": 8, "head_dim": 16}, "num_attention_heads=8"),
        ("llama", {"num_key_value_heads": 4}, "num_key_value_heads=4"),
        ("llama", {"head_dim": 8}, "head_dim=8"),
        ("qwen3", {"head_dim": 32}, "head_dim=32"),
        ("llama", {"intermediate_size": 128}, "intermediate_size=128"),
        ("llama", {"vocab_size": 999}, "vocab_size=999"),
        ("llama", {"hidden_size": 128}, "hidden_size=128"),
    ],
)
def test_config_dimensions_are_checked_against_the_weights(tmp_path, arch, change, field) -> None:
    from tiny_models import make_model

    path = make_model(tmp_path, arch)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(ModelLoadError, match=f"config.json {field} does not match the checkpoint"):
        LM.from_pretrained(path, device="cpu", runtime=RuntimeConfig(num_pages=16))


@pytest.mark.parametrize("field,value", [
    ("page_size", 0), ("num_pages", 0), ("kv_memory_bytes", 0), ("graph_max_rows", 0),
    ("collective_timeout_s", 0.0), ("attention", "flash"), ("few_row_projections", -1), ("few_row_projections", 65),
])
def test_bad_runtime_config_names_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        RuntimeConfig(**{field: value})


def test_projection_settings_reach_the_model_and_match_the_kernels_limits(tiny_model_dir) -> None:
    from thoughttree.kernels import linear

    assert RuntimeConfig().few_row_projections == linear.MAX_ROWS
    rc = RuntimeConfig(num_pages=16, few_row_projections=linear.ROW_LIMIT, projection_epilogues=False)
    lm = LM.from_pretrained(tiny_model_dir, device="cpu", runtime=rc)
    assert (lm.model.few_rows, lm.model.epilogues) == (linear.ROW_LIMIT, False)
    with pytest.raises(ValueError, match="between 0 .* and 64"):
        RuntimeConfig(few_row_projections=linear.ROW_LIMIT + 1)


def test_a_checkpoint_missing_a_tensor_names_it_and_extra_tensors_are_skipped(tmp_path) -> None:
    from safetensors.torch import load_file, save_file
    from tiny_models import make_model

    path = make_model(tmp_path, "llama")
    tensors = load_file(path / "model.safetensors")
    extra = {**tensors, "model.layers.0.self_attn.rotary_emb.inv_freq": torch.ones(8)}
    save_file(extra, path / "model.safetensors", metadata={"format": "pt"})
    lm = LM.from_pretrained(path, device="cpu", runtime=RuntimeConfig(num_pages=16))
    assert not any("rotary" in name for name in lm.model.w)
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ModelLoadError, match="lacks tensors: layers.1.mlp.up_proj.weight"):
        LM.from_pretrained(path, device="cpu", runtime=RuntimeConfig(num_pages=16))


def test_a_missing_output_projection_bias_is_named(tmp_path) -> None:
    from safetensors.torch import load_file, save_file
    from tiny_models import make_model

    path = make_model(tmp_path, "llama", attention_bias=True)
    tensors = load_file(path / "model.safetensors")
    del tensors["model.layers.1.self_attn.o_proj.bias"]
    save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ModelLoadError, match=r"lacks tensors: layers.1.self_attn.o_proj.bias$"):
        LM.from_pretrained(path, device="cpu", runtime=RuntimeConfig(num_pages=16))


@pytest.mark.parametrize("where", ["rope", "top"])
def test_a_partial_rotary_factor_is_refused_where_transformers_applies_it(tmp_path, where: str) -> None:
    from thoughttree.runtime.model_config import ModelConfig
    from tiny_models import make_model

    config = json.loads((make_model(tmp_path, "llama") / "config.json").read_text())
    rope = dict(config.get("rope_parameters") or config["rope_scaling"])
    changed = {"rope_parameters": {**rope, "partial_rotary_factor": 0.5}} if where == "rope" else {
        "partial_rotary_factor": 0.5}
    with pytest.raises(ModelLoadError, match="unsupported partial_rotary_factor 0.5 with 'llama3' RoPE"):
        ModelConfig.from_dict({**config, **changed})
    default = {**config, **changed, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}
    assert ModelConfig.from_dict(default).rope_scaling is None  # default RoPE rotates whole heads regardless


def test_given_text_is_kept_as_the_model_reads_it() -> None:
    # The bundled model's tokenizer has no tab and no accented letters: the nodes show what it reads.
    from thoughttree.commands.model import bundled_model_path

    lm = LM.from_pretrained(bundled_model_path(), device="cpu", runtime=RuntimeConfig(num_pages=64))
    tree = ThoughtTree(lm, prompt="4 5\t6 10\n")
    kid = tree.root.extend("a\tb é")
    assert (tree.root.text, kid.text) == ("4 56 10\n", "ab ")
    assert tree.root.text == lm.decode(tree.root.tokens) and kid.text == lm.decode(kid.tokens)


def test_a_failed_expansion_leaves_no_kv_and_a_tree_releases_its_kv_as_a_context(tiny_model_dir) -> None:
    lm = LM.from_pretrained(tiny_model_dir, device="cpu", runtime=RuntimeConfig(num_pages=64, page_size=4))
    with ThoughtTree(lm, prompt=[1] + [5] * 40) as tree:
        kid = tree.root.extend(" jumps")
        tree.release_kv()
        with pytest.raises(KVPoolExhausted):  # more branches than the pool holds
            tree.expand([kid], n=40, sampling=Sampling(max_tokens=60, ignore_eos=True))
        assert lm.kv.pool.num_used == 0 and kid.kv is None and tree.root.kv is None
        lm.check_integrity(tree)
        tree.expand([kid], n=2, sampling=Sampling(max_tokens=3))
        assert lm.kv.pool.num_used > 0
        tree.prune(kid.children[0])
        with pytest.raises(TreeError, match="pruned"):
            tree.materialize([kid.children[0]])
    assert lm.kv.pool.num_used == 0
    lm.check_integrity()
