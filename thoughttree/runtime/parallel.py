"""Tensor parallelism on torch.distributed: the process group, the weight shards, the collectives.

The Llama-family forward is split Megatron-style over the ranks of a group: each rank holds a
contiguous share of the query heads with their KV heads (column-parallel q/k/v), the same
share of the MLP's intermediate columns (column-parallel gate/up), the matching input columns
of o and down (row-parallel, their partial outputs summed by one all-reduce each), and a slice
of the vocabulary in the LM head (its logits gathered, so every rank holds identical logits and
the seeded sampler draws identical tokens). Embeddings and norms are replicated. Each rank's KV
pool holds only its own KV heads. Every rank runs the same program in lockstep, so each builds
the same tree-attention plan from the same tree; only the forward's collectives talk.

Launch with ``torchrun --nproc-per-node N`` (NCCL on CUDA, Gloo on the CPU). A world of k·N
ranks forms k groups of N consecutive ranks (for data parallelism over tensor-parallel groups).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist

from .ranks import ParallelError, RankFailure, is_main_process
from .model_config import ModelConfig

DEFAULT_TIMEOUT_S = 300.0
_LAUNCH_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
__all__ = ["ParallelError", "RankFailure", "TensorParallel", "check_divisible", "init_distributed",
           "is_main_process", "local_device"]


def local_device(device: torch.device) -> torch.device:
    """Under a launch, a bare CUDA device means this process's own GPU (LOCAL_RANK)."""
    local = os.environ.get("LOCAL_RANK")
    if device.type == "cuda" and local is not None:
        return torch.device("cuda", int(local))
    return device


def init_distributed(device: torch.device, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """Join the default process group of a torchrun launch (no-op when it exists already).

    NCCL for CUDA devices, Gloo otherwise; ``timeout_s`` bounds forming the group and every
    collective, so a rank that dies or hangs stops the others with an error instead of a hang.
    """
    if not dist.is_available():
        raise ParallelError("this torch build has no torch.distributed; install a build with distributed support")
    if dist.is_initialized():
        return
    missing = [v for v in _LAUNCH_VARS if v not in os.environ]
    if missing:
        raise ParallelError(
            f"no process group: {', '.join(missing)} not set; start every rank with "
            "torchrun --nproc-per-node N (and --nnodes/--rdzv-endpoint across hosts)"
        )
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    where = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
    try:
        dist.init_process_group(
            backend, timeout=timedelta(seconds=timeout_s), device_id=device if device.type == "cuda" else None
        )
    except Exception as exc:  # the store and backends raise several types (timeouts, network errors)
        raise ParallelError(
            f"cannot form the {backend} process group of {os.environ['WORLD_SIZE']} ranks at {where} "
            f"(rank {os.environ['RANK']}): {exc}; check that every rank was started and can reach {where}"
        ) from exc


def check_divisible(cfg: ModelConfig, size: int) -> None:
    """Heads and MLP columns must split evenly over ``size`` ranks."""
    if size < 1:
        raise ParallelError(f"tensor_parallel must be >= 1, got {size}")
    for what, count in (
        ("query heads", cfg.num_heads),
        ("KV heads", cfg.num_kv_heads),
        ("MLP intermediate columns", cfg.intermediate_size),
    ):
        if count % size:
            raise ParallelError(
                f"the model's {count} {what} do not divide by tensor_parallel={size}; "
                f"pick a tensor_parallel size that divides {count}"
            )


@dataclass(frozen=True)
class TensorParallel:
    """This rank's place in its tensor-parallel group and the group's collectives."""

    size: int
    rank: int  # rank inside the group
    group: Any  # torch.distributed ProcessGroup
    timeout_s: float

    @classmethod
    def join(cls, size: int, device: torch.device, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> TensorParallel:
        """Form (or join) the process group and this rank's group of ``size`` consecutive ranks."""
        init_distributed(device, timeout_s=timeout_s)
        world, rank = dist.get_world_size(), dist.get_rank()
        if world % size:
            raise ParallelError(
                f"tensor_parallel={size} does not match the world of {world} ranks; launch with "
                f"torchrun --nproc-per-node {size} (or a multiple of {size} for data-parallel groups)"
            )
        if world == size:
            group = dist.group.WORLD
        else:  # every rank must create every group, in the same order
            group, _ = dist.new_subgroups(group_size=size, timeout=timedelta(seconds=timeout_s))
        return cls(size=size, rank=rank % size, group=group, timeout_s=timeout_s)

    # -- collectives ------------------------------------------------------------------------------
    def _fail(self, what: str, exc: BaseException) -> RankFailure:
        return RankFailure(
            f"tensor-parallel {what} failed on rank {dist.get_rank()} of {dist.get_world_size()}: another rank "
            f"died or did not answer within {self.timeout_s:g}s ({exc}); stopping"
        )

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum ``x`` over the group, in place (the row-parallel o and down projections)."""
        try:
            dist.all_reduce(x, group=self.group)
        except Exception as exc:  # Gloo and NCCL raise backend-specific errors
            raise self._fail("all-reduce", exc) from exc
        return x

    def gather_vocab(self, vocab: int) -> Callable[[torch.Tensor], torch.Tensor]:
        """A function joining each rank's [R, V/size] logits slice into the full [R, vocab] on every rank."""

        def gather(x: torch.Tensor) -> torch.Tensor:
            if x.shape[0] == 0:
                return x.new_empty(0, vocab)
            parts = [torch.empty_like(x) for _ in range(self.size)]
            try:
                dist.all_gather(parts, x.contiguous(), group=self.group)
            except Exception as exc:
                raise self._fail("logits gather", exc) from exc
            return torch.cat(parts, dim=-1)[:, :vocab]

        return gather

    # -- weights ----------------------------------------------------------------------------------
    def narrow(self, cfg: ModelConfig) -> Callable[[str, Sequence[int]], tuple[int, int, int] | None]:
        """Which slice (dim, start, stop) of a checkpoint tensor this rank reads; None reads it whole."""
        d, n, r = cfg.head_dim, self.size, self.rank
        q = cfg.num_heads // n * d
        kv = cfg.num_kv_heads // n * d
        mlp = cfg.intermediate_size // n
        rules = {
            "self_attn.q_proj": (0, q), "self_attn.k_proj": (0, kv), "self_attn.v_proj": (0, kv),
            "self_attn.o_proj.weight": (1, q),
            "mlp.gate_proj": (0, mlp), "mlp.up_proj": (0, mlp), "mlp.down_proj.weight": (1, mlp),
        }

        def pick(name: str, shape: Sequence[int]) -> tuple[int, int, int] | None:
            if not name.removeprefix("model.").startswith("layers."):
                return None
            for key, (dim, width) in rules.items():
                if f".{key}." in name or name.endswith(f".{key}"):
                    return (dim, r * width, (r + 1) * width)
            return None

        return pick

    def attach(self, model: Any) -> None:
        """Finish a model loaded with :meth:`narrow`: local head counts, LM head slice, hooks."""
        cfg, w = model.cfg, model.w
        model.num_heads = cfg.num_heads // self.size
        model.num_kv_heads = cfg.num_kv_heads // self.size
        if self.rank:  # the row-parallel biases are added once, by the group's first rank
            for i in range(cfg.num_layers):
                w.pop(f"layers.{i}.o_bias", None)
                w.pop(f"layers.{i}.down_bias", None)
        rows = -(-cfg.vocab_size // self.size)
        head = w["lm_head"][self.rank * rows:(self.rank + 1) * rows]
        pad = rows - head.shape[0]
        w["lm_head"] = torch.cat([head, head.new_zeros(pad, head.shape[1])]) if pad else head.clone()
        model.reduce = self.all_reduce
        model.gather = self.gather_vocab(cfg.vocab_size)
