"""FlashInfer 0.7.2 on the tree-attention benchmark: planned callables, JIT warm-up, timed rows.

Backends (see tree_flashinfer.py for the page tables they read):
    fi-decode        BatchDecodeWithPagedKVCacheWrapper over each query's path (no sharing)
    fi-decode-tc     the same with use_tensor_cores=True
    fi-cascade-fa2   one BatchPrefillWithPagedKVCacheWrapper(backend="fa2") per tree depth, merged
                     in place with merge_state_in_place, as MultiLevelCascadeAttentionWrapper.run does
    fi-cascade-fa3   the same with backend="fa3" (Hopper)
    fi-cascade-auto  MultiLevelCascadeAttentionWrapper itself (its levels use backend "auto")
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import numpy as np
import torch

from tree_flashinfer import PagedTree, page_tree, paged_pool
from tree_timing import Timer, median_ms, sync

from thoughttree.kernels import TreePlan

WORKSPACE_BYTES = 256 * 2**20
TOLERANCE = 2e-2  # max |Δ| to the reference above which a result is a failure
FLASHINFER_BACKENDS = ("fi-decode", "fi-decode-tc", "fi-cascade-fa2", "fi-cascade-fa3", "fi-cascade-auto")
LABELS = {
    "fi-decode": "batch decode (CUDA cores)",
    "fi-decode-tc": "batch decode (tensor cores)",
    "fi-cascade-fa2": "cascade FA2",
    "fi-cascade-fa3": "cascade FA3",
    "fi-cascade-auto": "MultiLevelCascadeAttentionWrapper (auto)",
}
Planned = tuple[Callable[[], None], Callable[[], torch.Tensor]]  # (plan again, run)


def load_flashinfer(device: torch.device) -> tuple[Any | None, str]:
    """(the flashinfer module or None, a note: its version or why it is not used)."""
    try:
        import flashinfer
    except ImportError as e:
        return None, f"not installed ({e.name or e})"
    if device.type != "cuda":
        return None, f"flashinfer {flashinfer.__version__} needs CUDA"
    return flashinfer, f"flashinfer {flashinfer.__version__}"


def _dims(q: torch.Tensor, k: torch.Tensor) -> dict[str, Any]:
    return dict(num_qo_heads=q.shape[1], num_kv_heads=k.shape[2], page_size=k.shape[1], q_data_type=q.dtype, kv_data_type=k.dtype)


def _tables(req: Any) -> list[torch.Tensor]:
    return [torch.as_tensor(a, dtype=torch.int32) for a in (req.qo_indptr, req.kv_indptr, req.kv_indices, req.last_page_len)]


def decode_runner(fi: Any, tree: PagedTree, q: torch.Tensor, kv: tuple[torch.Tensor, torch.Tensor], workspace: torch.Tensor, tensor_cores: bool) -> Planned:
    wrapper = fi.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD", use_tensor_cores=tensor_cores)

    def plan() -> None:
        _, indptr, indices, last = _tables(tree.decode)
        wrapper.plan(indptr, indices, last, head_dim=q.shape[2], **_dims(q, kv[0]))

    plan()
    return plan, lambda: wrapper.run(q, kv)


def cascade_runner(fi: Any, tree: PagedTree, q: torch.Tensor, kv: tuple[torch.Tensor, torch.Tensor], workspace: torch.Tensor, backend: str) -> Planned:
    wrappers = [fi.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD", backend=backend) for _ in tree.levels]
    masks = [None if lv.merge is None else torch.as_tensor(lv.merge, device=q.device) for lv in tree.levels]

    def plan() -> None:
        for w, lv in zip(wrappers, tree.levels):
            w.plan(*_tables(lv), head_dim_qk=q.shape[2], causal=False, **_dims(q, kv[0]))

    def run() -> torch.Tensor:
        out, lse = wrappers[0].run(q, kv, return_lse=True)
        for w, m in zip(wrappers[1:], masks[1:]):
            o, s = w.run(q, kv, return_lse=True)
            fi.merge_state_in_place(out, lse, o, s, mask=m)
        return out

    plan()
    return plan, run


def library_cascade_runner(fi: Any, tree: PagedTree, q: torch.Tensor, kv: tuple[torch.Tensor, torch.Tensor], workspace: torch.Tensor) -> Planned | str:
    if any(lv.merge is not None for lv in tree.levels):
        return "n/a: leaves at several depths need masked merges"
    wrapper = fi.MultiLevelCascadeAttentionWrapper(len(tree.levels), workspace, "NHD")

    def plan() -> None:
        tables = [_tables(lv) for lv in tree.levels]
        wrapper.plan(*([t[i] for t in tables] for i in range(4)), head_dim=q.shape[2], **_dims(q, kv[0]))

    plan()
    return plan, lambda: wrapper.run(q, kv)


def runners(fi: Any, names: list[str], tree: PagedTree, q: torch.Tensor, kv: tuple[torch.Tensor, torch.Tensor], workspace: torch.Tensor) -> dict[str, Planned | str]:
    """Each named backend planned over the paged pool (q in ``tree.order``), or why it failed."""
    out: dict[str, Planned | str] = {}
    for name in names:
        try:
            if name in ("fi-decode", "fi-decode-tc"):
                out[name] = decode_runner(fi, tree, q, kv, workspace, tensor_cores=name == "fi-decode-tc")
            elif name in ("fi-cascade-fa2", "fi-cascade-fa3"):
                out[name] = cascade_runner(fi, tree, q, kv, workspace, backend=name[-3:])
            else:
                out[name] = library_cascade_runner(fi, tree, q, kv, workspace)
        except Exception as e:  # noqa: BLE001 - one backend failing must not stop the others
            out[name] = f"error: {type(e).__name__}: {_last_line(e)}"
    return out


def _last_line(e: Exception) -> str:
    lines = str(e).strip().splitlines()
    return lines[-1][:200] if lines else ""


def warm_up(fi: Any, names: list[str], plan: TreePlan, num_pages: int, log: Callable[[str], None]) -> None:
    """Build or load every kernel the named backends use, on a small plan, before any timing.

    FlashInfer writes a module's generated sources outside its build lock, so two threads must
    never build the same module. First, one thread per distinct module (batch decode, FA2 and FA3
    prefill as ``plan()`` loads them, the merge kernel) builds in parallel; then every backend
    plans and runs once in turn, loading what is built.
    """
    dev = plan.device
    tree = page_tree(plan, num_pages)
    k = torch.randn(num_pages, 16, 8, 128, device=dev, dtype=torch.bfloat16)
    kv = paged_pool(k, torch.randn_like(k), tree)
    q = torch.randn(plan.num_queries, 32, 128, device=dev, dtype=torch.bfloat16)
    log(f"FlashInfer: building or loading the kernels of {', '.join(names)} (a first build JIT-compiles for minutes)...")
    start = time.perf_counter()

    def build(name: str) -> str:
        if name == "merge":
            o, s = torch.zeros(2, 32, 128, device=dev, dtype=torch.bfloat16), torch.zeros(2, 32, device=dev)
            fi.merge_state_in_place(o, s, o.clone(), s.clone())
            sync(dev)
            return "built"
        made = runners(fi, [name], tree, q, kv, torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=dev))[name]
        return made if isinstance(made, str) else "built"

    first = [n for n in ("fi-decode", "fi-cascade-fa2", "fi-cascade-fa3") if n in names]
    first += ["merge"] if any(n.startswith("fi-cascade") for n in names) else []
    with ThreadPoolExecutor(len(first)) as pool:
        for name, result in zip(first, pool.map(build, first)):
            log(f"  {name}: {result} after {time.perf_counter() - start:.0f} s")
    workspace = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=dev)
    for name in names:
        made = runners(fi, [name], tree, q, kv, workspace)[name]
        if not isinstance(made, str):
            made[1]()
            sync(dev)
        log(f"  {name}: {made if isinstance(made, str) else 'ready'} after {time.perf_counter() - start:.0f} s")


def time_rows(fi: Any, names: list[str], label: str, plan: TreePlan, num_pages: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ref: torch.Tensor, timer: Timer, workspace: torch.Tensor) -> list[list[str]]:
    """Rows [workload, backend, µs, plan() ms, tables ms, copied tokens, max |Δ|], one per backend."""
    t = time.perf_counter()
    tree = page_tree(plan, num_pages)
    tables_ms = f"{(time.perf_counter() - t) * 1e3:.2f}"
    order = torch.as_tensor(tree.order, device=q.device)
    qf, want = q[order].contiguous(), ref[order].float()
    kv = paged_pool(k, v, tree)
    rows = []
    for name, made in runners(fi, names, tree, qf, kv, workspace).items():
        cell, plan_cell, check = (made, "", "") if isinstance(made, str) else _measure(made, want, timer)
        rows.append([label, LABELS[name], cell, plan_cell, tables_ms, str(tree.copied_tokens), check])
    return rows


def _measure(made: Planned, want: torch.Tensor, timer: Timer) -> tuple[str, str, str]:
    plan, run = made
    try:
        us, graphed = timer(run)
        diff = (run().float() - want).abs().max().item()
        # Re-planning last: it replaces the buffers a captured graph read.
        plan_ms = median_ms(plan, want.device)
    except Exception as e:  # noqa: BLE001 - report, keep benchmarking the rest
        return f"error: {type(e).__name__}: {_last_line(e)}", "", ""
    ok = bool(np.isfinite(diff)) and diff <= TOLERANCE
    return f"{us:.1f}" + ("" if graphed else " (eager)"), f"{plan_ms:.2f}", f"{diff:.1e}" + ("" if ok else " FAIL")


def failed(rows: list[list[str]]) -> list[list[str]]:
    return [r for r in rows if r[6].endswith("FAIL") or r[2].startswith("error")]


def best(rows: list[list[str]]) -> str:
    ok = [(float(r[2].split()[0]), r[1]) for r in rows if r[6] and not r[6].endswith("FAIL")]
    return "%.1f %s" % min(ok) if ok else "no valid result"
