"""FlashInfer 0.7.2 on the tree-attention benchmark: page tables for a tree, and timed callables.

FlashInfer addresses K/V as requests of whole pages: every page of a request but the last must be
full, and a request starts at a page's first slot. The benchmark's pool gives every tree node its
own pages (a node starts on a page boundary), so

* the cascade gets one level per tree depth; at depth d each query's request is its ancestor at
  depth d (its own node's visible tokens at its own depth), queries sharing that node forming one
  request, so no request spans two nodes. Levels are merged with ``merge_state_in_place`` exactly
  as ``MultiLevelCascadeAttentionWrapper.run`` does; a query with no node at depth d (a shallower
  leaf) gets a one-token stand-in request and a merge mask that leaves its row alone;
* plain batch decode gets each query's whole path as one request: the nodes' own pages while every
  node before the last fills its pages, and from the first node that ends mid-page on, a private
  copy of the rest of the path on fresh pages (built once, outside timing, appended to the pool).

The page tables are plain numpy (tested on CPU); tree_flashinfer_run.py calls FlashInfer with them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from thoughttree.kernels import TreePlan


@dataclass(frozen=True)
class Requests:
    """One batch of FlashInfer requests (CSR page tables) over the query rows in FlashInfer order."""

    qo_indptr: np.ndarray  # [R + 1] query rows of each request
    kv_indptr: np.ndarray  # [R + 1] pages of each request in kv_indices
    kv_indices: np.ndarray  # [sum] page ids
    last_page_len: np.ndarray  # [R] tokens on each request's last page (1..page_size)
    merge: np.ndarray | None  # [Q] bool: rows whose result this level contributes (None: all)


@dataclass(frozen=True)
class PagedTree:
    """A tree plan as FlashInfer page tables over the pool plus ``copy_slots`` appended as pages."""

    order: np.ndarray  # [Q] FlashInfer's row i is the plan's query order[i] (depth-first)
    decode: Requests  # one request per query row: its whole visible path
    levels: tuple[Requests, ...]  # cascade levels, root depth first; levels[0] covers every row
    copy_slots: np.ndarray  # [P * page_size] pool slots copied to pages num_pages.. (-1: padding)

    @property
    def copied_tokens(self) -> int:
        return int((self.copy_slots >= 0).sum())


class _Pages:
    """Pages of node prefixes: the node's own pages when it starts and runs page-aligned, else copies."""

    def __init__(self, plan: TreePlan, num_pages: int) -> None:
        self.plan, self.ps, self.next_page = plan, plan.page_size, num_pages
        self.copies: list[np.ndarray] = []
        self.cache: dict[tuple[int, ...], np.ndarray] = {}
        self.whole: dict[int, bool] = {}

    def node_slots(self, node: int, n: int) -> np.ndarray:
        start = self.plan.node_offsets[node]
        return self.plan.slots[start : start + n]

    def node_aligned(self, node: int, n: int) -> bool:
        """Whether the node's first n tokens start a page and fill its pages in order."""
        if node not in self.whole:
            self.whole[node] = self.aligned(self.node_slots(node, int(self.plan.node_lengths[node])))
        return self.whole[node] or self.aligned(self.node_slots(node, n))

    def aligned(self, slots: np.ndarray) -> bool:
        firsts = slots[:: self.ps]
        expect = np.repeat(firsts, self.ps)[: len(slots)] + np.arange(len(slots)) % self.ps
        return bool((firsts % self.ps == 0).all() and (slots == expect).all())

    def pages(self, segments: list[tuple[int, int]]) -> tuple[np.ndarray, int]:
        """(page ids, tokens on the last page) holding these (node, tokens) segments back to back."""
        direct: list[np.ndarray] = []
        for i, (node, n) in enumerate(segments):
            if not self.node_aligned(node, n) or (i < len(segments) - 1 and n % self.ps):
                tail = np.concatenate([self.node_slots(m, k) for m, k in segments[i:]])
                direct.append(self._copy(tail))
                break
            direct.append(self.node_slots(node, n)[:: self.ps] // self.ps)
        total = sum(n for _, n in segments)
        return np.concatenate(direct), total - self.ps * (-(-total // self.ps) - 1)

    def _copy(self, slots: np.ndarray) -> np.ndarray:
        key = tuple(slots.tolist())
        if key not in self.cache:
            count = -(-len(slots) // self.ps)
            padded = np.full(count * self.ps, -1, dtype=np.int64)
            padded[: len(slots)] = slots
            self.copies.append(padded)
            self.cache[key] = np.arange(self.next_page, self.next_page + count)
            self.next_page += count
        return self.cache[key]


def _csr(rows: list[int], pages: list[np.ndarray], last: list[int], merge: np.ndarray | None) -> Requests:
    return Requests(
        np.concatenate([[0], np.cumsum(rows)]).astype(np.int64),
        np.concatenate([[0], np.cumsum([len(p) for p in pages])]).astype(np.int64),
        np.concatenate(pages).astype(np.int64),
        np.asarray(last, dtype=np.int64),
        merge,
    )


def page_tree(plan: TreePlan, num_pages: int) -> PagedTree:
    """FlashInfer page tables for ``plan`` over a pool of ``num_pages`` pages (see the module doc)."""
    pre, _ = plan.preorder
    order = np.argsort(pre[plan.query_nodes], kind="stable")
    paths = []  # per row in FlashInfer order: [(node, visible tokens)] root first, empty ones kept
    for q in order:
        node, chain = int(plan.query_nodes[q]), []
        while node >= 0:
            chain.append(node)
            node = int(plan.parents[node])
        lengths = plan.node_lengths[chain[::-1]]
        paths.append([(m, int(n)) for m, n in zip(chain[::-1], lengths)])
        paths[-1][-1] = (paths[-1][-1][0], int(plan.query_visible[q]))
    pages = _Pages(plan, num_pages)
    dec = [pages.pages([s for s in p if s[1] > 0]) for p in paths]
    decode = _csr([1] * len(paths), [d[0] for d in dec], [d[1] for d in dec], None)
    levels = []
    for depth in range(max(len(p) for p in paths)):
        keys = [p[depth] if depth < len(p) and p[depth][1] > 0 else None for p in paths]
        if all(k is None for k in keys):
            continue
        if not levels and any(k is None for k in keys):
            raise ValueError("the FlashInfer cascade needs every query to see a token at the shallowest depth any query sees")
        stand_in = next(k for k in keys if k is not None)
        rows, pgs, last = [], [], []
        for i, key in enumerate(keys):
            if i and key == keys[i - 1]:
                rows[-1] += 1
                continue
            p, n_last = pages.pages([key]) if key is not None else pages.pages([(stand_in[0], 1)])
            rows.append(1)
            pgs.append(p)
            last.append(n_last)
        merge = np.array([k is not None for k in keys])
        levels.append(_csr(rows, pgs, last, None if merge.all() else merge))
    copies = np.concatenate(pages.copies) if pages.copies else np.zeros(0, dtype=np.int64)
    return PagedTree(order, decode, tuple(levels), copies)


def paged_pool(k: torch.Tensor, v: torch.Tensor, tree: PagedTree) -> tuple[torch.Tensor, torch.Tensor]:
    """The pool with the tree's private pages appended (the pool itself when nothing is copied)."""
    if not len(tree.copy_slots):
        return k, v
    ids = torch.as_tensor(np.maximum(tree.copy_slots, 0), device=k.device)
    ext = lambda c: torch.cat([c, c.flatten(0, 1)[ids].view(-1, *c.shape[1:])])  # noqa: E731
    return ext(k), ext(v)
