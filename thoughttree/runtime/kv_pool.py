"""A preallocated paged KV pool: K and V pages for every layer, a free list and page refcounts."""

from __future__ import annotations

from collections import Counter

import torch


class KVPoolExhausted(RuntimeError):
    """Not enough free pages for a request; nothing was changed."""


class KVPool:
    """K and V of shape [num_layers, num_pages, page_size, H_kv, D]; a slot is page * page_size + offset.

    Pages are handed out from a free list and reference-counted: each KV segment whose slots
    touch a page holds one reference to it. One extra page past ``num_pages`` is never handed
    out: padding rows of fixed-size decode steps write their keys and values there.
    """

    def __init__(
        self,
        num_layers: int,
        num_pages: int,
        page_size: int,
        num_kv_heads: int,
        head_dim: int,
        *,
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> None:
        if num_pages < 1 or page_size < 1:
            raise ValueError(f"need num_pages >= 1 and page_size >= 1, got {num_pages} and {page_size}")
        shape = (num_layers, num_pages + 1, page_size, num_kv_heads, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.page_size = page_size
        self.num_pages = num_pages
        self.refcount = [0] * num_pages  # a list: one page's count is read and written at a time
        self._free = list(range(num_pages - 1, -1, -1))  # pop() hands out low pages first

    @staticmethod
    def bytes_per_page(num_layers: int, page_size: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
        return 2 * num_layers * page_size * num_kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()

    @property
    def scratch_slot(self) -> int:
        """A slot of the page no segment owns, for rows whose keys and values are thrown away."""
        return self.num_pages * self.page_size

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.num_pages - len(self._free)

    @property
    def capacity_tokens(self) -> int:
        return self.num_pages * self.page_size

    def describe(self) -> str:
        return (
            f"{self.num_used} of {self.num_pages} pages in use ({self.page_size} tokens each, "
            f"{self.capacity_tokens} tokens in all)"
        )

    def alloc(self, n: int) -> list[int]:
        """Take ``n`` free pages (refcount 1 each), or raise KVPoolExhausted and take none."""
        if n > len(self._free):
            raise KVPoolExhausted(
                f"KV pool exhausted: {n} more pages needed but only {len(self._free)} free; {self.describe()}. "
                "Prune or release parts of the tree, release trees no longer used (tree.release_kv(), or "
                "`with ThoughtTree(...) as tree:`), or give the runtime a larger pool "
                "(RuntimeConfig(num_pages=...) or kv_memory_bytes=...)"
            )
        pages = [self._free.pop() for _ in range(n)]
        for page in pages:
            self.refcount[page] = 1
        return pages

    def retain(self, page: int) -> None:
        if self.refcount[page] < 1:
            raise RuntimeError(f"page {page} is free and cannot be shared")
        self.refcount[page] += 1

    def release(self, page: int) -> bool:
        """Drop one reference; returns True when the page went back to the free list."""
        if self.refcount[page] < 1:
            raise RuntimeError(f"page {page} released more often than retained")
        self.refcount[page] -= 1
        if self.refcount[page] == 0:
            self._free.append(page)
            return True
        return False

    def check_integrity(self, owners: Counter[int] | None = None) -> None:
        """Free pages have no references, used pages have some, and (if given) refs equal owners."""
        free = set(self._free)
        assert len(free) == len(self._free), "a page is on the free list twice"
        for page in range(self.num_pages):
            if page in free:
                assert self.refcount[page] == 0, f"page {page} is free but has {self.refcount[page]} refs"
            else:
                assert self.refcount[page] > 0, f"page {page} is neither free nor referenced (leaked)"
            if owners is not None:
                assert self.refcount[page] == owners.get(page, 0), (
                    f"page {page} has {self.refcount[page]} refs but {owners.get(page, 0)} owners"
                )
