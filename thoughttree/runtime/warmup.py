"""Compiling the kernels a user's searches will launch before the first search needs them.

:func:`warm_up` grows a throwaway tree for each batch size a user will decode (a prompt's
prefill, decode steps of every row bucket asked for, and a scoring forward of sequences that
share a prefix), so that Triton compiles every kernel variant those steps launch into its
persistent cache (:mod:`kernels.cache`). A later process on the machine loads them from there
instead of compiling; its first step then pays only the loading and the graph captures.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from ..config import Sampling
from ..kernels.cache import CACHE_ENV
from ..tree import ThoughtTree

if TYPE_CHECKING:
    from .lm import LM


@dataclass(frozen=True)
class WarmedShape:
    """One batch warmed: its branches, wall seconds, and the forward steps and graph captures it ran."""

    branches: int
    seconds: float
    forward_steps: int
    graph_captures: int


@dataclass(frozen=True)
class WarmupReport:
    device: str
    attention: str
    compiles: bool  # whether its steps compiled Triton kernels (on a GPU; the CPU interprets them)
    cache_dir: Path | None  # where their binaries are kept (None: nothing compiled)
    prompt_tokens: int
    shapes: tuple[WarmedShape, ...]


def launches_triton(lm: LM) -> bool:
    """Whether ``lm``'s steps launch Triton kernels (its attention backend or its fused layers)."""
    return lm.engine.attention in ("deft", "per_sequence") or lm.model.fused


def warm_up(lm: LM, *, prompt_tokens: int, branches: Sequence[int], tokens: int = 4) -> WarmupReport:
    """Run the steps of a search of ``branches`` children of a ``prompt_tokens``-token prompt,
    ``tokens`` tokens each, for every count in ``branches``, and release their KV.

    Raises ValueError when the prompt and tokens do not fit the model's context or a count is < 1.
    """
    if prompt_tokens < 1 or tokens < 1 or prompt_tokens + tokens > lm.max_context:
        raise ValueError(
            f"a {prompt_tokens}-token prompt and {tokens} tokens per branch do not fit the model's "
            f"context of {lm.max_context} (each must be at least 1)"
        )
    if not branches or min(branches) < 1:
        raise ValueError(f"branch counts must be at least 1, got {list(branches)}")
    vocab = lm.config.vocab_size
    prompt = [(7 * i + 3) % vocab for i in range(prompt_tokens)]
    sampling = Sampling(max_tokens=tokens, temperature=1.0, ignore_eos=True)
    shapes = []
    for n in branches:
        before = (lm.stats.forward_steps, lm.stats.graph_captures)
        start = time.perf_counter()
        tree = ThoughtTree(lm, prompt=prompt, seed=n)
        try:
            kids = tree.expand([tree.root], n=n, sampling=sampling)[0]
            # A scoring forward: each child's tokens and one more, the way a value prompt runs.
            lm.tree_logits([[*prompt[-16:], *kid.tokens, 3] for kid in kids])
        finally:
            tree.release_kv()
        if lm.device.type == "cuda":
            import torch

            torch.cuda.synchronize(lm.device)
        shapes.append(
            WarmedShape(
                n, time.perf_counter() - start, lm.stats.forward_steps - before[0], lm.stats.graph_captures - before[1]
            )
        )
    compiles = launches_triton(lm) and lm.device.type == "cuda"
    cache = Path(os.environ[CACHE_ENV]) if compiles and os.environ.get(CACHE_ENV) else None
    return WarmupReport(str(lm.device), lm.engine.attention, compiles, cache, prompt_tokens, tuple(shapes))
