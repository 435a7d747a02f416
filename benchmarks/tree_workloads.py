"""Tree-attention benchmark workloads (Llama-3-8B heads) and their unique-byte / FLOP floors."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import torch

from thoughttree.kernels import TreePlan, plan_tree_attention

H_Q, H_KV, HEAD_DIM, PAGE_SIZE = 32, 8, 128, 16
DTYPE = torch.bfloat16


@dataclass(frozen=True)
class Workload:
    """A tree of token segments and its query rows (one decode step, or a token-tree verify)."""

    name: str
    parents: tuple[int, ...]
    lengths: tuple[int, ...]
    query_nodes: tuple[int, ...]
    query_visible: tuple[int, ...] | None = None
    star_16k: bool = False  # a star with a prompt of 16k+ tokens: must beat per-sequence by 3x


def _star(name: str, prompt: int, branches: int, tokens: int) -> Workload:
    parents = (-1,) + (0,) * branches
    return Workload(name, parents, (prompt,) + (tokens,) * branches, tuple(range(1, branches + 1)), None, prompt >= 16384 and tokens == 1)


def _levels(prompt: int, mids: int, mid_len: int, leaves: int, leaf_len: int) -> Workload:
    """A prompt, ``mids`` children of ``mid_len`` tokens, each with ``leaves`` leaves: one query per leaf."""
    parents, lengths = [-1], [prompt]
    for _ in range(mids):
        mid = len(parents)
        parents.append(0)
        lengths.append(mid_len)
        parents += [mid] * leaves
        lengths += [leaf_len] * leaves
    has_child = set(parents)
    queries = tuple(i for i in range(len(parents)) if i not in has_child)
    return Workload(f"{prompt // 1024}k/{mids}x{mid_len}/{leaves}x{leaf_len}", tuple(parents), tuple(lengths), queries)


def _token_tree(prompt: int, nodes: int, seed: int = 0) -> Workload:
    rng = np.random.default_rng(seed)
    # A draft tree shaped like speculative decoders': wide near the prompt, narrowing with depth.
    parents = [-1] + [0] * 4 + [int(rng.integers(max(1, i - 12), i)) for i in range(5, nodes + 1)]
    queries = tuple(range(1, nodes + 1))
    return Workload(f"{prompt // 1024}k+{nodes}-node token tree", tuple(parents), (prompt,) + (1,) * nodes, queries, (1,) * nodes)


WORKLOADS = (
    _star("4k/64x1", 4096, 64, 1),
    _star("16k/64x1", 16384, 64, 1),
    _star("20k/256x1", 20480, 256, 1),
    _star("4k/50x200", 4096, 50, 200),
    _star("20k/50x400", 20480, 50, 400),
    _star("4k/256x32", 4096, 256, 32),
    _levels(2048, 8, 256, 8, 64),
    _star("1.1k/10x1000", 1100, 10, 1000),
    _star("32k/32x256", 32768, 32, 256),
    _token_tree(6144, 64),
)


# Prompt-and-leaves stars (one query per leaf) where a prompt's wide launch shares the GPU with
# its leaves': 36 over a grid, and eleven off it that the work sizing's constants were not
# fitted to.
OFF_GRID = ((10240, 80, 250), (12288, 48, 300), (24576, 40, 500), (28672, 24, 700), (6144, 96, 300), (12288, 120, 600),
            (3072, 128, 500), (16384, 90, 200), (10240, 84, 800), (16384, 40, 300), (6144, 48, 150))
FAMILY = tuple(
    _star(f"{p // 1024}k/{n}x{t}", p, n, t)
    for p, n, t in (*itertools.product((4096, 8192, 20480), (16, 32, 64, 100), (200, 400, 1000)), *OFF_GRID)
)
# Three levels, as a search's second step: the prompt's 128-row launch beside its children's
# 64-row one (each child under several leaves, whose own keys the merge reads).
LEVELS = tuple(
    _levels(p, m, ml, n, nl) for p in (4096, 8192) for m, ml in ((8, 256), (8, 512), (16, 300), (5, 1000)) for n, nl in ((8, 64), (5, 100))
)
TREES = {"ten": WORKLOADS, "family": FAMILY, "levels": LEVELS}


def node_slot_arrays(w: Workload, seed: int = 0) -> tuple[list[np.ndarray], int]:
    """Each node's slots on its own pages, pages handed out in a shuffled order; and the page count."""
    pages_per_node = [-(-n // PAGE_SIZE) for n in w.lengths]
    num_pages = sum(pages_per_node)
    order = np.random.default_rng(seed).permutation(num_pages)
    out, first = [], 0
    for n, p in zip(w.lengths, pages_per_node):
        pages = order[first : first + p]
        first += p
        out.append((pages[:, None] * PAGE_SIZE + np.arange(PAGE_SIZE)[None, :]).reshape(-1)[:n])
    return out, num_pages


def make_plan(w: Workload, node_slots: list[np.ndarray], device: str) -> TreePlan:
    return plan_tree_attention(
        np.asarray(w.parents), node_slots, np.asarray(w.query_nodes),
        None if w.query_visible is None else np.asarray(w.query_visible),
        page_size=PAGE_SIZE, device=device,
    )


def unique_bytes_and_flops(plan: TreePlan) -> tuple[int, int]:
    """(bytes of the K/V slots some query sees + Q + O, useful attention FLOPs)."""
    offsets, flat = plan.query_views
    elem = torch.finfo(DTYPE).bits // 8
    kv = len(np.unique(flat)) * H_KV * HEAD_DIM * 2 * elem
    qo = plan.num_queries * H_Q * HEAD_DIM * 2 * elem
    flops = int(offsets[-1]) * H_Q * HEAD_DIM * 4  # QK^T and PV, 2 FLOPs per multiply-add
    return kv + qo, flops
