"""Run in a fresh process with TRITON_INTERPRET=1: the runtime on the DeFT kernels against transformers.

    TRITON_INTERPRET=1 python tests/runtime/deft_interpreted.py ARCH

float16 on the CPU (the interpreter's tl.dot is wrong for bfloat16). Checks tree logits of
prefix-sharing sequences within twice transformers' own float16 error (measured against float32)
and greedy tree decoding token for token; exits non-zero with the reason on a mismatch.
"""

from __future__ import annotations

import os
import sys
import tempfile
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


def hf_greedy(model, tokens: list[int], n: int) -> list[int]:
    with torch.no_grad():
        out = model.generate(torch.tensor([tokens]), attention_mask=torch.ones(1, len(tokens), dtype=torch.long),
                             max_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0)
    return out[0, len(tokens):].tolist()


def main(arch: str) -> None:
    if os.environ.get("TRITON_INTERPRET") != "1":
        sys.exit("set TRITON_INTERPRET=1 before running this check")
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
            sys.exit(f"{arch}: logits of sequence {i} off by {err:.3g}; transformers float16 is off by {yardstick:.3g}")
    tree = ThoughtTree(lm, prompt=[1, 5, 9, 14], seed=0)
    branches = [tree.add_child(tree.root, t, "") for t in ([20, 33], [40], [20, 33, 7])]
    greedy = Sampling(max_tokens=6, temperature=0, ignore_eos=True)
    kids = tree.expand(branches, n=2, sampling=greedy)
    lm.check_integrity(tree)
    for parent, children in zip(branches, kids):
        want = hf_greedy(hf16, parent.path_tokens(), 6)
        for child in children:
            if child.tokens != want:
                sys.exit(f"{arch}: greedy decoding under node {parent.id} gave {child.tokens}, transformers {want}")
    tree.prune(tree.root)
    lm.check_integrity(tree)
    if lm.kv.pool.num_used:
        sys.exit(f"{arch}: {lm.kv.pool.num_used} KV pages still in use after pruning everything")
    print(f"{arch}: DeFT runtime matches transformers")


if __name__ == "__main__":
    main(sys.argv[1])
