"""Run in a fresh process with TRITON_INTERPRET=1: the runtime on the DeFT kernels against transformers.

    TRITON_INTERPRET=1 python tests/runtime/deft_interpreted.py ARCH [ARCH ...]

float16 on the CPU (the interpreter's tl.dot is wrong for bfloat16). Checks tree logits of
prefix-sharing sequences within twice transformers' own float16 error (measured against float32)
and greedy tree decoding: each token is transformers' float32 top choice after the tokens before
it, or short of it by no more than twice transformers' own float16 error there (two tokens that
close are a tie at float16 precision, which either run may break its own way). Each
architecture is checked in turn, one line each (its match, or the reason it does not); exits
non-zero if any does not match.
"""

from __future__ import annotations

import os
import sys
import tempfile
import traceback
from pathlib import Path

import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tiny_models import make_model  # noqa: E402

from thoughttree import LM, RuntimeConfig, Sampling, ThoughtTree  # noqa: E402

SEQUENCES = [[1, 5, 9, 14, 20, 33], [1, 5, 9, 14, 40], [1, 5, 9, 14, 20, 33, 7, 8, 60], [1, 70, 71]]


def hf_logits(model, seq: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([seq])).logits[0, -1].float()


def greedy_mismatch(hf16, hf32, prefix: list[int], tokens: list[int]) -> str | None:
    """Why ``tokens`` are not a greedy continuation of ``prefix`` under transformers, or None."""
    ids = torch.tensor([prefix + tokens[:-1]])
    with torch.no_grad():
        exact = hf32(ids).logits[0, -len(tokens):].float()
        noise = (hf16(ids).logits[0, -len(tokens):].float() - exact).abs().amax(dim=-1).clamp(min=1e-3)
    gap = exact.max(dim=-1).values - exact.gather(1, torch.tensor(tokens)[:, None])[:, 0]
    bad = torch.nonzero(gap > 2 * noise)[:, 0]
    if not len(bad):
        return None
    i = int(bad[0])
    return (f"token {i} ({tokens[i]}) is {gap[i]:.3g} below transformers' top token {int(exact[i].argmax())}; "
            f"its float16 error there is {noise[i]:.3g}")


def check(arch: str) -> str | None:
    """Why the runtime on ``arch`` does not match transformers, or None."""
    with tempfile.TemporaryDirectory() as tmp:
        path = make_model(Path(tmp), arch)
        hf16 = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float16).eval()
        hf32 = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        lm = LM.from_pretrained(path, device="cpu", dtype="float16",
                                runtime=RuntimeConfig(page_size=4, num_pages=128, attention="deft"))
    assert lm.engine.attention == "deft" and lm.model.dtype == torch.float16
    got = lm.tree_logits(SEQUENCES)
    for i, seq in enumerate(SEQUENCES):
        exact = hf_logits(hf32, seq)
        yardstick = max((hf_logits(hf16, seq) - exact).abs().max().item(), 1e-3)
        err = (got[i] - exact).abs().max().item()
        if err > 2 * yardstick:
            return f"logits of sequence {i} off by {err:.3g}; transformers float16 is off by {yardstick:.3g}"
    tree = ThoughtTree(lm, prompt=[1, 5, 9, 14], seed=0)
    branches = [tree.add_child(tree.root, t, "") for t in ([20, 33], [40], [20, 33, 7])]
    greedy = Sampling(max_tokens=4, temperature=0, ignore_eos=True)
    kids = tree.expand(branches, n=2, sampling=greedy)
    lm.check_integrity(tree)
    for parent, children in zip(branches, kids):
        for child in children:
            why = greedy_mismatch(hf16, hf32, parent.path_tokens(), child.tokens)
            if why:
                return f"greedy decoding under node {parent.id} gave {child.tokens}: {why}"
    tree.prune(tree.root)
    lm.check_integrity(tree)
    if lm.kv.pool.num_used:
        return f"{lm.kv.pool.num_used} KV pages still in use after pruning everything"
    return None


def main(archs: list[str]) -> None:
    if os.environ.get("TRITON_INTERPRET") != "1":
        sys.exit("set TRITON_INTERPRET=1 before running this check")
    failed = False
    for arch in archs:
        try:
            why = check(arch)
        except Exception:  # noqa: BLE001 - reported, and the other architectures still checked
            why = traceback.format_exc()
        print(f"{arch}: DeFT runtime matches transformers" if why is None else f"{arch}: {why}", flush=True)
        failed |= why is not None
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main(sys.argv[1:])
