"""A tensor-parallel or data-parallel run whose rank 1 dies, or stops answering, after a few forward steps.

    python tests/parallel/dying_rank.py GAME24_ARGS...   (the CLI, under a launch of 2 ranks)

With ``RANK1_HANGS=S`` in the environment rank 1 hangs for S seconds (alive, silent) and then
dies, instead of dying at once.
"""

from __future__ import annotations

import os
import sys
import time
from itertools import count

from thoughttree.cli import main
from thoughttree.runtime.engine import Engine

STEPS_BEFORE_DYING = 6


def die_in_forward(hang_s: float) -> None:
    forward, steps = Engine.forward, count()

    def dying_forward(self: Engine, *args, **kwargs):
        if next(steps) == STEPS_BEFORE_DYING:
            time.sleep(hang_s)
            os._exit(9)
        return forward(self, *args, **kwargs)

    Engine.forward = dying_forward


if __name__ == "__main__":
    if os.environ["RANK"] == "1":
        die_in_forward(float(os.environ.get("RANK1_HANGS", "0")))
    sys.exit(main(sys.argv[1:]))
