"""Frozen, validated configuration objects (no torch here)."""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import Any

import numpy as np


def _whole(value: object) -> bool:
    """An integer (numpy's too) that is not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def _real(value: object) -> bool:
    """A real number that is not a bool (NaN included: the range checks reject it)."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def _tuple_of_str(value: str | tuple[str, ...] | list[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    return tuple(value)


@dataclass(frozen=True)
class Speculative:
    """Speculative decoding: a drafter proposes a small token tree after each branch's newest
    token, the target model verifies it in the step's one forward, and the tokens the seeded
    sampler would have drawn anyway are kept, so the output equals plain decoding.

    ``drafter``: "lookup" (n-grams of the thought tree's own tokens), "draft:PATH" (a smaller
    model with the same tokenizer, loaded from PATH), "off", or an object implementing
    ``thoughttree.runtime.speculative.Drafter``. ``shape``: "chain" (one path), "tree" (the
    ``top_k`` best continuations at each draft node) or "dynamic" (the ``max_nodes`` nodes of
    highest cumulative draft probability). ``max_depth`` bounds a draft path, ``max_nodes`` a
    branch's draft per step. With ``adaptive`` a cost model fed by measured acceptance and
    measured step times sizes each branch's draft per step, down to none; without it every
    branch drafts its full budget. ``ngram``: the longest suffix the lookup drafter matches.
    """

    drafter: Any = "lookup"
    shape: str = "dynamic"
    max_depth: int = 8
    max_nodes: int = 16
    top_k: int = 2
    adaptive: bool = True
    ngram: int = 3

    def __post_init__(self) -> None:
        problems = []
        d = self.drafter
        if isinstance(d, str) and not (d in ("lookup", "off") or (d.startswith("draft:") and len(d) > 6)):
            problems.append(f"drafter must be 'lookup', 'draft:PATH', 'off' or a Drafter object, got {d!r}")
        if self.shape not in ("chain", "tree", "dynamic"):
            problems.append(f"shape must be 'chain', 'tree' or 'dynamic', got {self.shape!r}")
        for name in ("max_depth", "max_nodes", "top_k", "ngram"):
            value = getattr(self, name)
            if not _whole(value) or value < 1:
                problems.append(f"{name} must be an integer >= 1, got {value!r}")
        if not isinstance(self.adaptive, bool):
            problems.append(f"adaptive must be True or False, got {self.adaptive!r}")
        if problems:
            raise ValueError("invalid Speculative: " + "; ".join(problems))

    @property
    def on(self) -> bool:
        return self.drafter != "off"

    @staticmethod
    def parse(value: Speculative | str | None) -> Speculative | None:
        """A Speculative from the command-line form: "off", "lookup", "draft:PATH" or "auto" (the
        lookup drafter, sized by the cost model); None stays None."""
        if value is None or isinstance(value, Speculative):
            return value
        if not isinstance(value, str):
            raise ValueError(
                f"speculative must be 'off', 'lookup', 'draft:PATH', 'auto' or a Speculative, got {value!r}"
            )
        return Speculative(drafter="lookup" if value == "auto" else value)


@dataclass(frozen=True)
class Sampling:
    """How to sample a continuation.

    temperature 0 means greedy. top_k 0 and top_p 1 and min_p 0 switch those filters off.
    Generation stops at ``max_tokens``, at EOS (unless ``ignore_eos``), at any ``stop_token_ids``,
    or when the text generated so far contains any of the ``stop`` strings (also when a stop
    string spans several tokens); the token that completes a stop string is kept, so a node's
    text always equals its decoded tokens. ``seed`` mixes into every request's own seed.
    ``speculative`` ("lookup", "draft:PATH", "auto", "off" or a :class:`Speculative`) drafts and
    verifies several tokens per forward with the same output; None uses the model's default
    (``LM.speculative``).
    ``distinct`` samples the ``n`` continuations of one expansion without replacement: distinct
    token sequences, by stochastic beam search (:mod:`thoughttree.runtime.distinct`).
    """

    max_tokens: int = 64
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    stop: tuple[str, ...] = field(default=())
    stop_token_ids: tuple[int, ...] = field(default=())
    ignore_eos: bool = False
    seed: int = 0
    speculative: Speculative | None = None
    distinct: bool = False

    def __post_init__(self) -> None:
        problems = []
        try:
            object.__setattr__(self, "speculative", Speculative.parse(self.speculative))
        except ValueError as exc:
            problems.append(str(exc))
        stop = _tuple_of_str(self.stop) if isinstance(self.stop, (str, tuple, list)) or self.stop is None else None
        if stop is None or not all(isinstance(s, str) and s for s in stop):
            problems.append(f"stop must be a non-empty string or a list of them, got {self.stop!r}")
        else:
            object.__setattr__(self, "stop", stop)
        ids = self.stop_token_ids
        if isinstance(ids, (tuple, list)) and all(_whole(t) and t >= 0 for t in ids):
            object.__setattr__(self, "stop_token_ids", tuple(int(t) for t in ids))
        else:
            problems.append(f"stop_token_ids must be a list of token ids (whole numbers >= 0), got {ids!r}")
        if not _whole(self.max_tokens) or self.max_tokens < 1:
            problems.append(f"max_tokens must be an integer >= 1, got {self.max_tokens!r}")
        if not (_real(self.temperature) and self.temperature >= 0):
            problems.append(f"temperature must be >= 0 (0 = greedy), got {self.temperature!r}")
        if not _whole(self.top_k) or self.top_k < 0:
            problems.append(f"top_k must be an integer >= 0 (0 = off), got {self.top_k!r}")
        if not (_real(self.top_p) and 0 < self.top_p <= 1):
            problems.append(f"top_p must be in (0, 1] (1 = off), got {self.top_p!r}")
        if not (_real(self.min_p) and 0 <= self.min_p < 1):
            problems.append(f"min_p must be in [0, 1) (0 = off), got {self.min_p!r}")
        if not isinstance(self.ignore_eos, bool):
            problems.append(f"ignore_eos must be True or False, got {self.ignore_eos!r}")
        if not isinstance(self.distinct, bool):
            problems.append(f"distinct must be True or False, got {self.distinct!r}")
        if not _whole(self.seed):
            problems.append(f"seed must be an integer, got {self.seed!r}")
        if problems:
            raise ValueError("invalid Sampling: " + "; ".join(problems))
        for name in ("max_tokens", "top_k", "seed"):  # numpy's integers as Python's: seeds hash their repr
            object.__setattr__(self, name, int(getattr(self, name)))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass(frozen=True)
class RuntimeConfig:
    """The KV runtime of one model.

    The KV pool holds ``num_pages`` pages of ``page_size`` tokens per layer; when ``num_pages`` is
    None it is sized from ``kv_memory_bytes`` (or, when that is None too, from a share of free
    device memory on CUDA; on the CPU, room for 128 paths of the model's full context, at most
    1 GiB). On CUDA the pool is sized after room for the steps' buffers, and a pool asked for that
    does not fit beside them fails while loading (``runtime.memory.NotEnoughMemory``, a
    ValueError). ``attention`` picks the tree-attention backend:
    "auto" uses the DeFT Triton kernels on CUDA with fp16/bf16 weights and the PyTorch
    reference elsewhere; "per_sequence" runs split-KV decoding over each query's own path (the
    kernel a runtime without tree sharing would use), for comparison. On CUDA, decode steps
    after a batch's first token replay CUDA graphs captured per bucket of row counts
    (``cuda_graphs=False`` runs the same steps eagerly); batches of more than
    ``graph_max_rows`` rows run eagerly, which bounds the graphs' number and memory (a batch is
    graphed in the row bucket that holds it, 1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256,
    384, 512, 768, 1024 rows, so a limit between buckets acts as the bucket below it).
    ``collective_timeout_s`` bounds how long a tensor-parallel rank waits for the others (forming
    the group, and in each collective) before it stops with an error. On CUDA, forwards of up
    to ``few_row_projections`` rows (a decode step's) run each projection through a Triton kernel
    that streams the weight once, where it fits the weight (0 leaves every projection to
    cuBLAS; at most 64); with ``projection_epilogues`` those projections also form the SiLU
    product, rotary + KV store, the residual add and RMSNorm themselves, so no small kernel
    runs between them (False launches those kernels instead; tokens can differ by a rounding).
    With ``plan_ahead``, when half of a batch's branches are about to finish, the plan of the
    rows that go on is built while the batch's last step runs on the device (False builds it
    after that step's tokens are read; the tokens drawn are the same either way).
    """

    page_size: int = 16
    num_pages: int | None = None
    kv_memory_bytes: int | None = None
    attention: str = "auto"
    cuda_graphs: bool = True
    graph_max_rows: int = 512
    collective_timeout_s: float = 300.0
    few_row_projections: int = 32
    projection_epilogues: bool = True
    plan_ahead: bool = True

    def __post_init__(self) -> None:
        if self.page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {self.page_size}")
        if self.num_pages is not None and self.num_pages < 1:
            raise ValueError(f"num_pages must be >= 1, got {self.num_pages}")
        if self.kv_memory_bytes is not None and self.kv_memory_bytes < 1:
            raise ValueError(f"kv_memory_bytes must be >= 1, got {self.kv_memory_bytes}")
        if self.graph_max_rows < 1:
            raise ValueError(f"graph_max_rows must be >= 1, got {self.graph_max_rows}")
        if not 0 <= self.few_row_projections <= 64:
            raise ValueError(
                f"few_row_projections must be between 0 (cuBLAS for all) and 64, got {self.few_row_projections}"
            )
        if not self.collective_timeout_s > 0:
            raise ValueError(f"collective_timeout_s must be > 0, got {self.collective_timeout_s!r}")
        if self.attention not in ("auto", "deft", "per_sequence", "reference"):
            raise ValueError(f"attention must be 'auto', 'deft', 'per_sequence' or 'reference', got {self.attention!r}")
