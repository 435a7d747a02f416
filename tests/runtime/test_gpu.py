"""The runtime on CUDA with the DeFT kernels, checked against transformers (skipped without a GPU)."""

from __future__ import annotations

import random

import pytest
import torch
import transformers

from tiny_models import ARCHS, make_model
from thoughttree import LM, RuntimeConfig, Sampling, ThoughtTree

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


@pytest.mark.parametrize("arch", ARCHS)
def test_deft_runtime_matches_transformers_in_bf16(arch: str, tmp_path) -> None:
    path = make_model(tmp_path, arch, hidden_size=256, num_attention_heads=4, num_key_value_heads=1, head_dim=64)
    ref = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).cuda().eval()
    low = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).cuda().eval()
    lm = LM.from_pretrained(path, device="cuda", dtype="bfloat16", runtime=RuntimeConfig(page_size=16, num_pages=2048))
    assert lm.engine.attention == "deft"
    rng = random.Random(0)
    prefix = [1] + [rng.randrange(3, 250) for _ in range(300)]
    seqs = [prefix + [rng.randrange(3, 250) for _ in range(rng.randint(0, 40))] for _ in range(12)]
    got = lm.tree_logits(seqs)
    for i, seq in enumerate(seqs):
        ids = torch.tensor([seq], device="cuda")
        with torch.no_grad():
            want = ref(ids).logits[0, -1].float()
            hf_low = low(ids).logits[0, -1].float()
        ours, theirs = (got[i] - want).abs().max().item(), (hf_low - want).abs().max().item()
        assert ours <= 2 * theirs + 1e-2, (arch, i, ours, theirs)
    tree = ThoughtTree(lm, prompt=prefix, seed=0)
    kids = tree.expand([tree.root], n=8, sampling=Sampling(max_tokens=20, ignore_eos=True))[0]
    tree.expand(kids[:4], n=4, sampling=Sampling(max_tokens=10, temperature=0, ignore_eos=True))
    lm.check_integrity(tree)
    greedy = [k.children[0].tokens for k in kids[:4]]
    for k, toks in zip(kids[:4], greedy):
        with torch.no_grad():
            logits = low(torch.tensor([k.path_tokens() + toks[:-1]], device="cuda")).logits[0, -len(toks):]
        # Each greedy choice is the top token or within bf16 noise of it under transformers.
        top = logits.max(-1).values
        chosen = logits.gather(1, torch.tensor(toks, device="cuda")[:, None])[:, 0]
        assert (top - chosen).max().item() < 0.25, arch
    tree.prune(tree.root)
    assert lm.kv.pool.num_used == 0


@pytest.mark.parametrize("arch", ARCHS)
def test_weights_reach_the_gpu_through_the_staging_buffers_unchanged(arch: str, tmp_path, monkeypatch) -> None:
    """Buffers far smaller than the tensors: each crosses in many pieces, the two buffers
    alternating; the weights must equal those read on the CPU, bit for bit."""
    from thoughttree.runtime import checkpoint
    from thoughttree.runtime.model_config import ModelConfig

    path = make_model(tmp_path, arch)
    cfg = ModelConfig.from_dir(path)
    host = checkpoint.load_transformer(path, cfg, device=torch.device("cpu"), dtype=torch.bfloat16).w
    monkeypatch.setattr(checkpoint, "STAGING_BYTES", 1000)
    gpu = checkpoint.load_transformer(path, cfg, device=torch.device("cuda"), dtype=torch.bfloat16).w
    assert sorted(gpu) == sorted(host)
    for name, t in gpu.items():
        assert t.device.type == "cuda" and t.dtype == torch.bfloat16, name
        assert torch.equal(t.cpu(), host[name]), name



def test_narrowed_reads_reach_the_gpu_unchanged(tmp_path, monkeypatch) -> None:
    """A tensor-parallel rank's slices (columns: strided in the file) through the staging buffers."""
    from pathlib import Path

    from thoughttree.runtime import checkpoint

    path = make_model(tmp_path, "qwen2")
    index = checkpoint.tensor_index(checkpoint.shard_files(Path(path)))
    names = sorted(index)

    def narrow(key, shape):
        return (len(shape) - 1, 1, shape[-1] - 2) if shape[-1] > 3 else None

    host = checkpoint.read_tensors(index, names, torch.device("cpu"), torch.bfloat16, narrow)
    monkeypatch.setattr(checkpoint, "STAGING_BYTES", 999)
    gpu = checkpoint.read_tensors(index, names, torch.device("cuda"), torch.bfloat16, narrow)
    assert sorted(gpu) == names
    for name in names:
        assert gpu[name].shape == host[name].shape and torch.equal(gpu[name].cpu(), host[name]), name

def test_weights_larger_than_the_free_gpu_memory_fail_before_any_copy(tmp_path, monkeypatch) -> None:
    from thoughttree.runtime import ModelLoadError

    path = make_model(tmp_path, "llama")
    before = torch.cuda.memory_allocated()
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (1000, 80 << 30))
    with pytest.raises(ModelLoadError, match=r"weights take 0\.0 GiB in bfloat16 but cuda(:0)? has 0\.0 GiB free.*tensor_parallel"):
        LM.from_pretrained(path, device="cuda", dtype="bfloat16")
    assert torch.cuda.memory_allocated() == before


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_a_model_on_a_gpu_that_is_not_the_current_one_runs_there(tmp_path) -> None:
    """Triton launches and graph captures follow the current device: the model's steps make its GPU current."""
    path = make_model(tmp_path, "llama", hidden_size=256, num_attention_heads=4, num_key_value_heads=1, head_dim=64)

    def greedy(device: str) -> tuple[list[list[int]], int]:
        lm = LM.from_pretrained(path, device=device, dtype="bfloat16", runtime=RuntimeConfig(page_size=16, num_pages=256))
        tree = ThoughtTree(lm, prompt=[1] + list(range(3, 120)), seed=0)
        kids = tree.expand([tree.root], n=4, sampling=Sampling(max_tokens=12, temperature=0, ignore_eos=True))[0]
        lm.check_integrity(tree)
        return [k.tokens for k in kids], lm.stats.graph_replays

    torch.cuda.set_device(0)
    here, _ = greedy("cuda:0")
    there, replays = greedy("cuda:1")
    assert torch.cuda.current_device() == 0
    assert there == here and replays > 0
