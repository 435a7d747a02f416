"""One fixed piece of work on an LM, run by every tensor-parallel rank and by a single process.

    python tests/parallel/tp_workload.py OUT_DIR DEVICE DTYPE MODEL_DIR...   (under a launch of 2 ranks)
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch

from thoughttree import LM, RuntimeConfig, Sampling, ThoughtTree

RUNTIME = RuntimeConfig(page_size=4, num_pages=1024, collective_timeout_s=60)


def sequences(vocab: int) -> list[list[int]]:
    """Sequences sharing prefixes the way tree branches do."""
    rng = random.Random(7)
    seqs = [[1] + [rng.randrange(3, vocab) for _ in range(30)]]
    while len(seqs) < 8:
        base = rng.choice(seqs)
        cut = rng.randint(1, len(base))
        seqs.append(base[:cut] + [rng.randrange(3, vocab) for _ in range(rng.randint(0, 20))])
    return seqs


def workload(lm: LM) -> dict[str, Any]:
    """tree_logits, greedy tree decoding two levels deep, and seeded sampling."""
    logits = lm.tree_logits(sequences(lm.config.vocab_size))
    tree = ThoughtTree(lm, prompt="Use 4 5 6 10 to make 24.\n", seed=3)
    branches = [tree.root.extend(text) for text in ("10 - 4 = 6", "4 + 5 = 9 (left:", "the lazy dog")]
    greedy = Sampling(max_tokens=10, temperature=0, ignore_eos=True)
    kids = tree.expand(branches, n=2, sampling=greedy)
    grandkids = tree.expand([kids[0][0], kids[2][1]], n=1, sampling=greedy)
    sampled = tree.expand([tree.root], n=4, sampling=Sampling(max_tokens=10, temperature=1.0, ignore_eos=True))
    lm.check_integrity(tree)
    tree.prune(tree.root)
    assert lm.kv.pool.num_used == 0
    return {
        "logits": logits,
        "greedy": [[c.tokens for c in cs] for cs in kids + grandkids],
        "sampled": [c.tokens for c in sampled[0]],
        "sampled_logprobs": [c.logprob for c in sampled[0]],
    }


def silent_rank(out: Path, timeout_s: float = 3.0) -> None:
    """Rank 1 stops answering: rank 0's next all-reduce must fail after the timeout, not hang."""
    import torch.distributed as dist

    from thoughttree.runtime.parallel import RankFailure, TensorParallel

    group = dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_s))
    tp = TensorParallel(size=2, rank=dist.get_rank(), group=group, timeout_s=timeout_s)
    report = out / "silent-rank.json"
    if tp.rank == 1:
        for _ in range(600):  # stay alive (a closed connection fails at once) until rank 0 is done
            if report.exists():
                return
            time.sleep(0.1)
        return
    began = time.perf_counter()
    try:
        tp.all_reduce(torch.ones(4))
        error = ""
    except RankFailure as exc:
        error = str(exc)
    report.write_text(json.dumps({"error": error, "waited": time.perf_counter() - began}))


def main(out: Path, device: str, dtype: str, models: list[str]) -> None:
    import torch.distributed as dist

    for model in models:
        lm = LM.from_pretrained(model, device=device, dtype=dtype, runtime=RUNTIME, tensor_parallel=2)
        result = workload(lm)
        result["kv_heads_per_rank"] = lm.kv.pool.k.shape[3]
        result["attention"] = lm.engine.attention
        torch.save(result, out / f"{Path(model).name}-rank{dist.get_rank()}.pt")
    silent_rank(out)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:])
    # Everything is written. Rank 0 holds a group whose all-reduce timed out on purpose, and
    # gloo may abort while the interpreter tears that group down (status -6 on about a third of
    # runs): end here instead, so the status says how the work went.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
