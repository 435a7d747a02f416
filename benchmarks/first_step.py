"""The first step of a fresh process: how long until a new process has expanded its first node.

Run it after ``thoughttree warmup`` (same model, same batch size) in a new process: it times the
import, the model load, the first expansion (prompt prefill and the decode steps of
``--tokens`` tokens: kernel loads or compiles and graph captures included) and the same
expansion again, and says where Triton's cache is and whether it held kernels before the run.

    python benchmarks/first_step.py --model bundled --branches 16 --json out.json
"""

from __future__ import annotations

import argparse
import json
import time

START = time.perf_counter()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="bundled")
    p.add_argument("--device", default=None)
    p.add_argument("--branches", type=int, default=16)
    p.add_argument("--prompt-tokens", type=int, default=512)
    p.add_argument("--tokens", type=int, default=4)
    p.add_argument("--json", help="write the times here as JSON")
    args = p.parse_args()
    from thoughttree.kernels.cache import use_persistent_cache

    cache = use_persistent_cache()
    cached = sum(1 for _ in cache.rglob("*")) if cache.is_dir() else 0
    import torch

    from thoughttree import Sampling, ThoughtTree
    from thoughttree.commands.model import load_model

    imported = time.perf_counter()
    lm = load_model(args.model, args.device, None)
    loaded = time.perf_counter()
    prompt = [(7 * i + 3) % lm.config.vocab_size for i in range(min(args.prompt_tokens, lm.max_context - args.tokens))]
    sampling = Sampling(max_tokens=args.tokens, temperature=1.0, ignore_eos=True)
    times = []
    for seed in range(2):
        t0 = time.perf_counter()
        with ThoughtTree(lm, prompt=prompt, seed=seed) as tree:
            tree.expand([tree.root], n=args.branches, sampling=sampling)
            if lm.device.type == "cuda":
                torch.cuda.synchronize(lm.device)
        times.append(time.perf_counter() - t0)
    result = {
        "device": torch.cuda.get_device_name(lm.device) if lm.device.type == "cuda" else "cpu",
        "model": args.model,
        "branches": args.branches,
        "prompt_tokens": len(prompt),
        "tokens": args.tokens,
        "triton_cache_dir": str(cache),
        "cache_files_before": cached,
        "import_s": imported - START,
        "load_s": loaded - imported,
        "first_expand_s": times[0],
        "second_expand_s": times[1],
        "graph_captures": lm.stats.graph_captures,
    }
    print(json.dumps(result, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
