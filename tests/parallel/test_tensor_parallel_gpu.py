"""Two NCCL ranks in bf16 against one GPU and float32 transformers (skipped without 2 GPUs)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers
from launch import run
from tiny_models import ARCHS, make_model
from tp_workload import RUNTIME, sequences, workload

from thoughttree import LM

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices"),
]
SHAPE = dict(hidden_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=64, intermediate_size=512)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> tuple[Path, list[Path]]:
    root = tmp_path_factory.mktemp("tp-gpu")
    dirs = [make_model(root / arch, arch, **SHAPE) for arch in ARCHS]
    outs = run([str(Path(__file__).with_name("tp_workload.py")), str(root), "cuda", "bfloat16", *map(str, dirs)],
               world=2, extra_env={"NCCL_NVLS_ENABLE": "0"})
    for status, text in outs:
        assert status == 0, text[-3000:]
    return root, dirs


@pytest.mark.parametrize("index", range(len(ARCHS)))
def test_nccl_bf16_tensor_parallel(models, index: int) -> None:
    root, dirs = models
    path = dirs[index]
    a, b = (torch.load(root / f"{path.name}-rank{r}.pt", map_location="cpu") for r in range(2))
    assert a["attention"] == "deft"
    assert torch.equal(a["logits"], b["logits"]) and a["greedy"] == b["greedy"] and a["sampled"] == b["sampled"]
    ref = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).cuda().eval()
    low = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).cuda().eval()
    one_gpu = workload(LM.from_pretrained(path, device="cuda", dtype="bfloat16", runtime=RUNTIME))
    for i, seq in enumerate(sequences(a["logits"].shape[1])):
        ids = torch.tensor([seq], device="cuda")
        with torch.no_grad():
            want, hf_low = ref(ids).logits[0, -1].float(), low(ids).logits[0, -1].float()
        theirs = (hf_low - want).abs().max().item()
        for name, got in (("2 GPUs", a["logits"][i]), ("1 GPU", one_gpu["logits"][i])):
            ours = (got.cuda() - want).abs().max().item()
            assert ours <= 2 * theirs + 1e-2, (path.name, name, i, ours, theirs)
    # bf16 rounding in a different reduction order may flip a near-tie, and a greedy path differs
    # from there on; the logits above are the exactness check, and this bound only catches a
    # broken path (docs/perf-log/2026-11-30-multi-gpu.md has the agreement measured).
    agree = [x == y for tp, one in zip(a["greedy"], one_gpu["greedy"]) for s, t in zip(tp, one) for x, y in zip(s, t)]
    assert sum(agree) >= 0.75 * len(agree), (path.name, sum(agree), len(agree))
