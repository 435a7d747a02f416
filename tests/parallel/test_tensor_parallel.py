"""Two Gloo ranks give the single-process results on tiny random models of every architecture."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from launch import run
from tiny_models import ARCHS, make_model
from tp_workload import RUNTIME, workload

from thoughttree import LM

# Each architecture also exercises a sharding edge: biases on every projection (o and down
# included, added once after the all-reduce), a vocabulary that does not split evenly, a tied
# LM head, per-head q/k norms.
VARIANTS = {
    "llama": dict(attention_bias=True, mlp_bias=True),
    "mistral": dict(vocab_size=301),
    "qwen2": dict(tie=True),
    "qwen3": {},
}


@pytest.fixture(scope="module")
def launched(tmp_path_factory) -> tuple[Path, list[Path]]:
    """One launch of 2 ranks runs the workload on every model, then checks a silent rank."""
    root = tmp_path_factory.mktemp("tp")
    dirs = [make_model(root / arch, arch, **VARIANTS[arch]) for arch in ARCHS]
    outs = run([str(Path(__file__).with_name("tp_workload.py")), str(root), "cpu", "float32", *map(str, dirs)], world=2)
    for status, text in outs:
        assert status == 0, text[-3000:]
    return root, dirs


@pytest.fixture(scope="module")
def results(launched) -> dict[str, tuple[dict, list[dict]]]:
    root, dirs = launched
    single = {d.name: workload(LM.from_pretrained(d, device="cpu", runtime=RUNTIME)) for d in dirs}
    return {
        arch: (single[arch], [torch.load(root / f"{arch}-rank{r}.pt") for r in range(2)]) for arch in ARCHS
    }


@pytest.mark.parametrize("arch", ARCHS)
def test_ranks_agree_exactly(results, arch: str) -> None:
    _, (a, b) = results[arch]
    assert torch.equal(a["logits"], b["logits"])
    assert a["greedy"] == b["greedy"] and a["sampled"] == b["sampled"]
    assert a["sampled_logprobs"] == b["sampled_logprobs"]
    assert a["kv_heads_per_rank"] == 1  # 2 KV heads split over 2 ranks


@pytest.mark.parametrize("arch", ARCHS)
def test_tensor_parallel_equals_single_process(results, arch: str) -> None:
    single, (rank0, _) = results[arch]
    assert rank0["logits"].shape == single["logits"].shape
    assert (rank0["logits"] - single["logits"]).abs().max().item() <= 1e-4, arch
    assert rank0["greedy"] == single["greedy"], arch
    assert len(set(map(tuple, rank0["sampled"]))) > 1  # sampling really sampled


def test_silent_rank_fails_the_collective_after_the_timeout(launched) -> None:
    root, _ = launched
    report = json.loads((root / "silent-rank.json").read_text())
    assert "tensor-parallel all-reduce failed on rank 0 of 2" in report["error"]
    assert "did not answer within 3s" in report["error"]
    assert 2.5 < report["waited"] < 20
