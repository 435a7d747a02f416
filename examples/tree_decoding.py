"""The runtime without a search: grow a tree by hand, batch its branches, watch the shared KV.

    python examples/tree_decoding.py [path/to/model]      (default: the bundled Game of 24 model)

Every ``expand`` call decodes all requested children together (one forward per step for the
whole batch); the prompt's KV is stored once and read by every branch below it.
"""

from __future__ import annotations

import sys

import thoughttree as tt
from thoughttree.commands.model import bundled_model_path


def main(path: str | None = None) -> tt.ThoughtTree:
    lm = tt.LM.from_pretrained(path or bundled_model_path())
    tree = tt.ThoughtTree(lm, prompt="propose: 4 5 6 10\n", seed=0)
    one_step = tt.Sampling(max_tokens=32, temperature=1.0, stop="\n")

    before = lm.stats.forward_steps
    (kids,) = tree.expand([tree.root], n=16, sampling=one_step)
    longest = max(len(k.tokens) for k in kids)
    print(f"16 branches, longest {longest} tokens, in {lm.stats.forward_steps - before} forward steps")

    # Score every distinct proposal under the model in one tree-shaped prefill.
    distinct = {k.text: k for k in kids}
    logits = lm.tree_logits([k.path_tokens() for k in distinct.values()])
    print(f"{len(distinct)} distinct proposals scored in one call: logits {tuple(logits.shape)}")

    for kid in kids:
        if kid is not distinct[kid.text]:
            tree.prune(kid)  # duplicates: their KV goes back to the pool at once
    lm.check_integrity(tree)
    tt.show(tree, max_children=6)
    paths = sum(n.num_path_tokens for n in tree.nodes if n.alive and n.is_leaf)
    print(f"KV stored: {lm.kv.num_tokens} tokens for {paths} tokens of live root-to-leaf paths; "
          f"per-sequence attention would have read {lm.stats.reuse_factor:.1f}x more KV")
    return tree


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
