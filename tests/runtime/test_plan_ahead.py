"""Planning a batch's next decode run while its last step runs: the same tokens as planning after."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tiny_models import make_model, prefill_on_pytorch
from thoughttree import LM, RuntimeConfig, Sampling, ThoughtTree
from thoughttree.runtime.engine import DecodeRequest

CUDA = torch.cuda.is_available()


@pytest.fixture(scope="module")
def lm(tmp_path_factory) -> LM:
    path = make_model(tmp_path_factory.mktemp("ahead"), "llama", num_hidden_layers=1)
    rc = RuntimeConfig(page_size=4, num_pages=512, attention="deft")
    lm = LM.from_pretrained(path, device="cuda" if CUDA else "cpu", dtype="bfloat16" if CUDA else "float16", runtime=rc)
    lm.model.fused = True  # the fast decode path (Triton interpreter on the CPU)
    return lm


def _decode(lm: LM, samplings: list[Sampling], plan_ahead: bool) -> tuple[list[tuple], dict[str, int]]:
    lm.engine.runtime = dataclasses.replace(lm.engine.runtime, plan_ahead=plan_ahead)
    tree = ThoughtTree(lm, prompt=list(range(3, 15)), seed=0)
    prefill_on_pytorch(lm, tree, [tree.root])  # the steps are what the test checks
    before = dataclasses.replace(lm.stats)
    outs = lm.engine.decode([DecodeRequest(tree.root.kv, sp, seed) for seed, sp in enumerate(samplings)])
    got = [(o.tokens, o.logprobs, o.finish_reason) for o in outs]
    for o in outs:
        lm.kv.release(o.segment)
    lm.check_integrity(tree)
    tree.release_kv()
    counts = {k: getattr(lm.stats, k) - getattr(before, k) for k in ("plan_builds", "plans_ahead", "fast_steps")}
    return got, counts


def test_the_run_after_half_the_batch_finishes_is_planned_while_its_last_step_runs(lm) -> None:
    # Four branches end by length after two tokens: the two that go on get a run of their own,
    # planned while step 1 runs.
    samplings = [Sampling(max_tokens=2, ignore_eos=True)] * 4 + [Sampling(max_tokens=5, ignore_eos=True)] * 2
    on, ahead = _decode(lm, samplings, True)
    off, after = _decode(lm, samplings, False)
    assert on == off
    assert ahead == {"plan_builds": 2, "plans_ahead": 1, "fast_steps": 5} and after == {**ahead, "plans_ahead": 0}


def test_a_plan_made_ahead_is_dropped_when_a_branch_stops_in_that_step(lm) -> None:
    # A greedy branch stops at its first token p that is new to it, in the step where the short
    # branches end by length: the rows that go on are not those planned for.
    probe = ThoughtTree(lm, prompt=list(range(3, 15)), seed=0)
    prefill_on_pytorch(lm, probe)
    (ref,) = probe.expand([probe.root], n=1, sampling=Sampling(max_tokens=4, temperature=0, ignore_eos=True))[0]
    probe.release_kv()
    p = next((i for i in range(1, 4) if ref.tokens[i] not in ref.tokens[:i]), None)
    if p is None:
        pytest.skip("the greedy branch repeats one token")
    stops = Sampling(max_tokens=p + 4, temperature=0, ignore_eos=True, stop_token_ids=(ref.tokens[p],))
    samplings = [Sampling(max_tokens=p + 1, ignore_eos=True)] * 4 + [Sampling(max_tokens=p + 4, ignore_eos=True), stops]
    on, ahead = _decode(lm, samplings, True)
    off, after = _decode(lm, samplings, False)
    assert on == off and on[5][2] == "stop" and len(on[5][0]) == p + 1
    assert ahead == {"plan_builds": 3, "plans_ahead": 0, "fast_steps": p + 4} and after == {**ahead, "plan_builds": 2}
