"""Every runtime path checked against transformers on tiny random models of each architecture."""

from __future__ import annotations

import random

import pytest
import torch
import transformers

from thoughttree import LM, RuntimeConfig, Sampling, ThoughtTree


@pytest.fixture(scope="module")
def pair(arch_model_dir):
    arch, path = arch_model_dir
    hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    lm = LM.from_pretrained(path, device="cpu", runtime=RuntimeConfig(page_size=4, num_pages=512))
    return arch, hf, lm


def _random_tree_sequences(rng: random.Random, vocab: int, count: int) -> list[list[int]]:
    """Sequences that share prefixes the way branches of a tree do (some are prefixes of others)."""
    seqs = [[1] + [rng.randrange(3, vocab) for _ in range(rng.randint(1, 40))]]
    while len(seqs) < count:
        base = rng.choice(seqs)
        cut = rng.randint(1, len(base))
        seqs.append(base[:cut] + [rng.randrange(3, vocab) for _ in range(rng.randint(0, 25))])
    return seqs


def test_tree_logits_equal_each_sequence_alone(pair) -> None:
    arch, hf, lm = pair
    rng = random.Random(arch)
    for _ in range(3):
        seqs = _random_tree_sequences(rng, lm.config.vocab_size, 9)
        got = lm.tree_logits(seqs)
        assert got.shape == (len(seqs), lm.config.vocab_size) and got.dtype == torch.float32
        for i, seq in enumerate(seqs):
            with torch.no_grad():
                want = hf(torch.tensor([seq])).logits[0, -1].float()
            assert (got[i] - want).abs().max().item() <= 1e-4, (arch, i)
        lm.check_integrity()
    assert lm.kv.pool.num_used == 0, "tree_logits must free its KV"


def test_tree_logits_share_prefixes(pair) -> None:
    _, _, lm = pair
    before = lm.stats.prefill_tokens
    prefix = list(range(3, 40))
    lm.tree_logits([[1] + prefix + [50 + i] for i in range(8)])
    assert lm.stats.prefill_tokens - before == 1 + len(prefix) + 8


def _hf_greedy(hf, tokens: list[int], n: int) -> list[int]:
    with torch.no_grad():
        out = hf.generate(
            torch.tensor([tokens]), attention_mask=torch.ones(1, len(tokens), dtype=torch.long),
            max_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0,
        )
    return out[0, len(tokens):].tolist()


def test_greedy_tree_decoding_equals_generate_per_path(pair) -> None:
    arch, hf, lm = pair
    tree = ThoughtTree(lm, prompt="Use 4 5 6 10 to make 24.\n", seed=3)
    branches = [tree.root.extend(text) for text in ("10 - 4 = 6", "4 + 5 = 9 (left:", "the lazy dog")]
    greedy = Sampling(max_tokens=12, temperature=0, ignore_eos=True)
    kids = tree.expand(branches, n=2, sampling=greedy)
    grandkids = tree.expand([kids[0][0], kids[2][1]], n=1, sampling=Sampling(max_tokens=7, temperature=0, ignore_eos=True))
    lm.check_integrity(tree)
    for parent, children in zip(branches, kids):
        want = _hf_greedy(hf, parent.path_tokens(), 12)
        for child in children:
            assert child.tokens == want, arch
    for child, (gk,) in zip([kids[0][0], kids[2][1]], grandkids):
        assert gk.tokens == _hf_greedy(hf, child.path_tokens(), 7), arch
    tree.prune(tree.root)
    lm.check_integrity(tree)
    assert lm.kv.pool.num_used == 0


def test_sharded_checkpoint_loads(tmp_path, pair) -> None:
    arch, hf, lm = pair
    hf.save_pretrained(tmp_path, max_shard_size="20KB")
    lm.tokenizer.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors.index.json").is_file()
    sharded = LM.from_pretrained(tmp_path, device="cpu", runtime=RuntimeConfig(num_pages=64))
    seq = [[1, 5, 9, 13, 17]]
    torch.testing.assert_close(sharded.tree_logits(seq), lm.tree_logits(seq), atol=1e-6, rtol=0)


def _assert_last_logits_agree(path, seqs: list[list[int]]) -> tuple[transformers.PreTrainedModel, LM]:
    """The checkpoint at ``path`` loaded by both (returned): the logits at each sequence's last token agree."""
    hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    lm = LM.from_pretrained(path, device="cpu", runtime=RuntimeConfig(num_pages=64))
    for row, seq in zip(lm.tree_logits(seqs), seqs):
        with torch.no_grad():
            want = hf(torch.tensor([seq])).logits[0, -1]
        assert (row - want).abs().max().item() <= 1e-4
    return hf, lm


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_tied_embeddings(tmp_path, arch: str) -> None:
    from tiny_models import make_model

    path = make_model(tmp_path, arch, tie=True)
    hf, _ = _assert_last_logits_agree(path, [[1, 7, 9, 11, 13], [1, 7, 9, 40]])
    assert hf.config.tie_word_embeddings


@pytest.mark.parametrize("arch,fields", [
    ("qwen2", {"attention_bias": False}),  # Qwen2's q/k/v biases are there whatever the field says
    ("mistral", {"attention_bias": True, "mlp_bias": True}),  # Mistral has no biases to read
])
def test_bias_fields_a_family_does_not_read_are_ignored(tmp_path, arch: str, fields: dict) -> None:
    import json

    from tiny_models import make_model

    path = make_model(tmp_path, arch)
    cfg = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**cfg, **fields}))
    _assert_last_logits_agree(path, [[1, 7, 9, 11, 13, 40]])


@pytest.mark.parametrize("arch,fields", [("llama", {"attention_bias": True}), ("qwen2", {})])
def test_the_output_projection_bias_is_read_where_the_family_has_one(tmp_path, arch: str, fields: dict) -> None:
    from safetensors.torch import load_file, save_file
    from tiny_models import make_model

    path = make_model(tmp_path, arch, **fields)
    tensors = load_file(path / "model.safetensors")
    name = "model.layers.0.self_attn.o_proj.bias"
    if arch == "llama":
        assert name in tensors
        tensors[name] = torch.randn_like(tensors[name])
    else:  # Qwen2's output projection has no bias: a stored one is not read, as transformers does not read it
        tensors[name] = torch.randn(tensors["model.layers.0.self_attn.o_proj.weight"].shape[0])
    save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    _assert_last_logits_agree(path, [[1, 7, 9, 11, 13, 40]])


def test_sliding_window_caps_the_context(tmp_path) -> None:
    import json

    from tiny_models import make_model

    path = make_model(tmp_path, "mistral")
    cfg = json.loads((path / "config.json").read_text())
    cfg["sliding_window"] = 64
    (path / "config.json").write_text(json.dumps(cfg))
    lm = LM.from_pretrained(path, device="cpu", runtime=RuntimeConfig(num_pages=64))
    assert lm.max_context == 64  # beyond the window attention would differ from full attention


@pytest.mark.parametrize("arch", ["qwen2", "qwen3"])
def test_a_sliding_window_switched_off_leaves_the_whole_context(tmp_path, arch: str) -> None:
    import json

    from tiny_models import make_model

    path = make_model(tmp_path, arch)
    cfg = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**cfg, "sliding_window": 32, "use_sliding_window": False}))
    _, lm = _assert_last_logits_agree(path, [[1] + [3 + i % 200 for i in range(99)]])
    assert lm.max_context == 512  # transformers attends to the whole context


@pytest.mark.parametrize("top,inner", [(None, None), (64, 256)])
def test_llama3_rope_reads_its_pretraining_length_as_transformers_does(tmp_path, top, inner) -> None:
    """Missing: the context; a top-level original_max_position_embeddings wins over the one in rope_scaling."""
    import json

    from tiny_models import make_model

    path = make_model(tmp_path, "llama")
    cfg = json.loads((path / "config.json").read_text())
    rope = {k: v for k, v in cfg.pop("rope_parameters").items() if k != "original_max_position_embeddings"}
    rope.update({} if inner is None else {"original_max_position_embeddings": inner})
    cfg.update({"rope_parameters": rope} | ({} if top is None else {"original_max_position_embeddings": top}))
    (path / "config.json").write_text(json.dumps(cfg))
    _assert_last_logits_agree(path, [[1] + [3 + i % 200 for i in range(120)]])


def test_generation_stops_at_the_eos_tokens_of_generation_config(tmp_path) -> None:
    """An end-of-turn token listed only in generation_config.json ends a generation, as in transformers' generate."""
    import json

    from tiny_models import make_model

    path = make_model(tmp_path, "qwen2")
    hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    prompt = [1, 7, 9, 11, 13]
    with torch.no_grad():
        turn_end = int(hf(torch.tensor([prompt])).logits[0, -1].argmax())  # the greedy first token ends the turn
    gen = json.loads((path / "generation_config.json").read_text())
    (path / "generation_config.json").write_text(json.dumps({**gen, "eos_token_id": [2, turn_end]}))
    hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    with torch.no_grad():
        want = hf.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                           max_new_tokens=8, do_sample=False, pad_token_id=0)[0, len(prompt):].tolist()
    assert want == [turn_end]
    lm = LM.from_pretrained(path, device="cpu", runtime=RuntimeConfig(num_pages=64))
    assert turn_end in lm.eos_token_ids
    tree = ThoughtTree(lm, prompt=prompt)
    (kid,) = tree.expand([tree.root], sampling=Sampling(max_tokens=8, temperature=0))[0]
    assert kid.tokens == want and kid.metadata["finish_reason"] == "eos"
