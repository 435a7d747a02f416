"""Rank 1 of a tensor-parallel run dies (``exit``) or stops answering (``hang``) after a few steps.

    python tests/parallel/dying_rank.py exit GAME24_ARGS...   (the CLI, under a launch of 2 ranks)
    python tests/parallel/dying_rank.py hang TIMEOUT_S        (the library, with that collective timeout)
"""

from __future__ import annotations

import os
import sys
import time
from itertools import count

from thoughttree.runtime.engine import Engine

STEPS_BEFORE_FAILING = 6


def fail_in_forward(mode: str) -> None:
    forward, steps = Engine.forward, count()

    def failing_forward(self: Engine, *args, **kwargs):
        if next(steps) == STEPS_BEFORE_FAILING:
            if mode == "exit":
                os._exit(9)
            time.sleep(3600)
        return forward(self, *args, **kwargs)

    Engine.forward = failing_forward


def hang_run(timeout_s: float) -> None:
    from thoughttree import LM, RuntimeConfig, Sampling, ThoughtTree
    from thoughttree.commands.game24 import bundled_model_path

    runtime = RuntimeConfig(num_pages=256, collective_timeout_s=timeout_s)
    lm = LM.from_pretrained(bundled_model_path(), device="cpu", runtime=runtime, tensor_parallel=2)
    tree = ThoughtTree(lm, prompt="4 5 6 10", seed=0)
    began = time.perf_counter()
    try:
        tree.expand([tree.root], n=4, sampling=Sampling(max_tokens=40, ignore_eos=True))
    finally:
        print(f"stopped after {time.perf_counter() - began:.1f}s", flush=True)


if __name__ == "__main__":
    mode = sys.argv[1]
    if os.environ["RANK"] == "1":
        fail_in_forward(mode)
    if mode == "hang":
        hang_run(float(sys.argv[2]))
    else:
        from thoughttree.cli import main

        sys.exit(main(sys.argv[2:]))
