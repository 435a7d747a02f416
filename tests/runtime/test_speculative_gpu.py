"""Speculation on CUDA with the DeFT kernels and graphed forwards (skipped without a GPU)."""

from __future__ import annotations

import pytest
import torch

from thoughttree import LM, RuntimeConfig, Sampling, Speculative, ThoughtTree
from thoughttree.commands.model import bundled_model_path
from thoughttree.runtime.speculative import DraftModel

# A pool of its own size: a pool sized from free memory would take the GPU from the tests beside it.
RUNTIME = RuntimeConfig(kv_memory_bytes=1 << 30)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


@pytest.mark.parametrize("drafter,shape", [("lookup", "dynamic"), ("twin", "dynamic"), ("twin", "chain")])
def test_speculation_on_the_gpu_keeps_the_tokens(drafter, shape):
    """bf16 logits move with the batch's shape by rounding, so a near-tie may flip a path: most
    children must match plain decoding whole, and every draft's KV must be freed each step.
    Chains and trees verify on the decode buffers, replayed as CUDA graphs."""
    lm = LM.from_pretrained(bundled_model_path(), device="cuda", runtime=RUNTIME)
    lm.engine.after_step = lambda: lm.kv.check_integrity()
    spec = Speculative(
        drafter=DraftModel(LM.from_pretrained(bundled_model_path(), device="cuda", runtime=RUNTIME))
        if drafter == "twin"
        else "lookup",
        shape=shape,
        adaptive=False,
    )
    trees = []
    for speculative in (None, spec):
        before = (lm.stats.speculative_steps, lm.stats.fast_steps, lm.stats.graph_replays)
        tree = ThoughtTree(lm, prompt="Input: 4 5 6 10\nSteps:\n", seed=3)
        for _ in range(2):
            tree.expand(
                tree.frontier()[:4],
                n=8,
                sampling=Sampling(max_tokens=32, temperature=0.7, stop="\n", speculative=speculative),
            )
        trees.append(tree)
    spec_steps, fast, replays = (
        a - b for a, b in zip((lm.stats.speculative_steps, lm.stats.fast_steps, lm.stats.graph_replays), before)
    )
    # Every step but each call's first verified on the fixed buffers.
    assert spec_steps > 0 and fast >= spec_steps - 2 and replays > 0
    same = sum(a.tokens == b.tokens for a, b in zip(trees[0].nodes, trees[1].nodes))
    assert same >= 0.8 * len(trees[0].nodes)
    assert lm.stats.accepted_tokens > 0
    lm.check_integrity(*trees)
