"""FlashInfer page tables of the tree-attention benchmark (CPU), and FlashInfer against the reference (GPU)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from tree_flashinfer import PagedTree, Requests, page_tree, paged_pool  # noqa: E402
from tree_flashinfer_run import load_flashinfer, runners  # noqa: E402
from tree_workloads import PAGE_SIZE, WORKLOADS, Workload, make_plan, node_slot_arrays  # noqa: E402

from thoughttree.kernels import TreePlan, plan_tree_attention, tree_attention_reference  # noqa: E402

from tree_cases import build, leaves, tree_shape  # noqa: E402

SMALL = (
    Workload("star", (-1, 0, 0, 0), (64, 16, 5, 33), (1, 2, 3)),
    Workload("uneven depths", (-1, 0, 0, 1), (40, 16, 5, 3), (2, 3, 1), (5, 2, 16)),
    Workload("shared leaf", (-1, 0, 1), (32, 20, 7), (2, 2, 1, 2), (3, 7, 20, 3)),
)


def page_slots(tree: PagedTree, num_pages: int, page: int) -> np.ndarray:
    if page < num_pages:
        return page * PAGE_SIZE + np.arange(PAGE_SIZE)
    return tree.copy_slots[(page - num_pages) * PAGE_SIZE :][:PAGE_SIZE]


def request_slots(tree: PagedTree, num_pages: int, req: Requests, r: int) -> np.ndarray:
    """The slots request ``r`` covers, read the way FlashInfer reads pages (all full but the last)."""
    pages = req.kv_indices[req.kv_indptr[r] : req.kv_indptr[r + 1]]
    assert len(pages) and 1 <= req.last_page_len[r] <= PAGE_SIZE
    slots = np.concatenate([page_slots(tree, num_pages, p) for p in pages])
    return slots[: (len(pages) - 1) * PAGE_SIZE + req.last_page_len[r]]


def rows_of(req: Requests) -> np.ndarray:
    return np.repeat(np.arange(len(req.qo_indptr) - 1), np.diff(req.qo_indptr))


def check_tables(plan: TreePlan, num_pages: int) -> PagedTree:
    tree = page_tree(plan, num_pages)
    assert sorted(tree.order.tolist()) == list(range(plan.num_queries))
    assert (tree.copy_slots[tree.copy_slots >= 0] < num_pages * PAGE_SIZE).all()
    assert tree.levels[0].merge is None
    seen: list[list[np.ndarray]] = [[] for _ in range(plan.num_queries)]
    for lv in tree.levels:
        assert lv.qo_indptr[-1] == plan.num_queries
        rows = rows_of(lv)
        for i in range(plan.num_queries):
            if lv.merge is None or lv.merge[i]:
                seen[i].append(request_slots(tree, num_pages, lv, rows[i]))
    assert len(tree.decode.qo_indptr) == plan.num_queries + 1
    for i, q in enumerate(tree.order):
        want = plan.visible_slots(int(q))
        # Plain decode reads the whole path in order; the cascade's levels partition it root first.
        np.testing.assert_array_equal(request_slots(tree, num_pages, tree.decode, i), want)
        np.testing.assert_array_equal(np.concatenate(seen[i]), want)
    return tree


@pytest.mark.parametrize("w", WORKLOADS + SMALL, ids=lambda w: w.name)
def test_page_tables_cover_each_query_view_exactly(w: Workload) -> None:
    node_slots, num_pages = node_slot_arrays(w)
    tree = check_tables(make_plan(w, node_slots, "cpu"), num_pages)
    aligned_paths = all(n % PAGE_SIZE == 0 for n, p in zip(w.lengths, range(len(w.lengths))) if p in set(w.parents))
    # Nodes start pages in this pool, so only paths through a node that ends mid-page are copied.
    assert (tree.copied_tokens == 0) == aligned_paths


@pytest.mark.parametrize("kind", ["chain", "star", "deep_narrow", "random", "lopsided"])
def test_page_tables_on_unaligned_slots(kind: str) -> None:
    # Slots handed out in a random permutation: no node starts a page, everything FlashInfer reads is copied.
    parents, lengths = tree_shape(kind, np.random.default_rng(3))
    q, k, v, plan = build(parents, lengths, leaves(parents) + [0], None, h_q=4, h_kv=2, d=8, page_size=PAGE_SIZE, dtype=torch.float32, device="cpu")
    tree = check_tables(plan, k.shape[0])
    kf, _ = paged_pool(k, v, tree)
    assert kf.shape[0] == k.shape[0] + len(tree.copy_slots) // PAGE_SIZE
    live = tree.copy_slots >= 0
    torch.testing.assert_close(kf[k.shape[0] :].flatten(0, 1)[torch.as_tensor(np.nonzero(live)[0])], k.flatten(0, 1)[torch.as_tensor(tree.copy_slots[live])])


def test_first_level_must_cover_every_query() -> None:
    # An empty root is skipped; a forest whose roots are not all seen cannot start the merge chain.
    empty_root = plan_tree_attention([-1, 0], [[], [16, 17]], [1], [2], page_size=PAGE_SIZE, device="cpu")
    assert len(page_tree(empty_root, 2).levels) == 1
    forest = plan_tree_attention([-1, -1, 0], [[], [0, 1], [16, 17]], [2, 1], page_size=PAGE_SIZE, device="cpu")
    with pytest.raises(ValueError, match="every query to see a token"):
        page_tree(forest, 2)


def test_benchmark_imports_and_reports_missing_flashinfer() -> None:
    import tree_attention  # noqa: F401 - the benchmark module must import without a GPU or FlashInfer

    fi, note = load_flashinfer(torch.device("cuda" if torch.cuda.is_available() else "cpu"))
    try:
        import flashinfer  # noqa: F401
    except ImportError:
        assert fi is None and note.startswith("not installed")
    else:
        assert (fi is None) == (not torch.cuda.is_available())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("w", SMALL, ids=lambda w: w.name)
def test_flashinfer_matches_reference(w: Workload) -> None:
    fi, note = load_flashinfer(torch.device("cuda"))
    if fi is None:
        pytest.skip(note)
    node_slots, num_pages = node_slot_arrays(w)
    plan = make_plan(w, node_slots, "cuda")
    g = torch.Generator(device="cuda").manual_seed(0)
    k = torch.randn(num_pages, PAGE_SIZE, 8, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(num_pages, PAGE_SIZE, 8, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    q = torch.randn(plan.num_queries, 32, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    tree = page_tree(plan, num_pages)
    order = torch.as_tensor(tree.order, device="cuda")
    kv = paged_pool(k, v, tree)
    ref = tree_attention_reference(q, k, v, plan)[order].float()
    workspace = torch.zeros(128 * 2**20, dtype=torch.uint8, device="cuda")
    made = runners(fi, ["fi-decode", "fi-cascade-fa2", "fi-cascade-fa3"], tree, q[order].contiguous(), kv, workspace)
    for name, r in made.items():
        assert not isinstance(r, str), f"{name}: {r}"
        torch.testing.assert_close(r[1]().float(), ref, atol=2e-2, rtol=2e-2, msg=lambda m: f"{name}: {m}")
