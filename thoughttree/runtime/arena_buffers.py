"""The sizes and layout of a decode arena's fixed buffers (:mod:`graphs`).

:class:`Capacity` says how big they are; :class:`RunBuffers` names the views of the one int32
device buffer a run's work is loaded into, and packs a run's work for it; :class:`StepInputs`
names what each step uploads per row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..kernels.plan.decode_work import DecodeWork
from ..kernels.plan.workplan import ITEM_FIELDS, OWN_RANGES, aligned_starts

ROW_BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)


def _grow(n: int, floor: int = 16) -> int:
    return max(floor, 1 << max(0, n - 1).bit_length())


def row_bucket(rows: int) -> int:
    """The smallest bucket holding ``rows`` rows (beyond the table: the next multiple of 256)."""
    for b in ROW_BUCKETS:
        if rows <= b:
            return b
    return -(-rows // 256) * 256


@dataclass(frozen=True)
class Capacity:
    """Sizes of an arena's buffers: rows, slots, items per tile class, partial rows, tail pieces."""

    rows: int
    slots: int
    items: tuple[int, ...]
    partials: int
    tail_pieces: int

    @staticmethod
    def needed(work: DecodeWork, rows: int, num_classes: int) -> Capacity:
        counts = np.bincount(work.host.item_class, minlength=num_classes)
        return Capacity(
            row_bucket(rows),
            len(work.host.slots),
            tuple(int(c) for c in counts),
            work.host.num_partials,
            len(work.tail_items),
        )

    def holds(self, other: Capacity) -> bool:
        return (
            self.rows >= other.rows
            and self.slots >= other.slots
            and self.partials >= other.partials
            and self.tail_pieces >= other.tail_pieces
            and all(a >= b for a, b in zip(self.items, other.items))
        )

    def union(self, other: Capacity) -> Capacity:
        """The smallest capacity that holds both."""
        return Capacity(
            max(self.rows, other.rows),
            max(self.slots, other.slots),
            tuple(max(a, b) for a, b in zip(self.items, other.items)),
            max(self.partials, other.partials),
            max(self.tail_pieces, other.tail_pieces),
        )

    def grown(self, other: Capacity | None, min_rows: int = 1) -> Capacity:
        """Capacities for the need ``self`` over the arena ``other`` had (None: the first arena).

        A size ``other`` holds stays. One it does not is rounded up to a power of two; slots,
        partials and tail pieces twice over, since trees grow during a search and each rebuild
        recaptures every graph, while their spare room costs only memory. Items stay tight: a
        launch runs a program per item of capacity. Rows are at least ``min_rows``' bucket.
        """
        o = other or Capacity(0, 0, (0,) * len(self.items), 0, 0)

        def room(need: int, had: int) -> int:
            return had if other is not None and need <= had else _grow(2 * need)

        return Capacity(
            max(self.rows, o.rows, row_bucket(min_rows)),
            room(self.slots, o.slots),
            tuple(_grow(max(a, b), 0) if max(a, b) else 0 for a, b in zip(self.items, o.items)),
            room(self.partials, o.partials),
            room(self.tail_pieces, o.tail_pieces),
        )


@dataclass(frozen=True, eq=False)
class RunBuffers:
    """A decode run's work on the device: views of one int32 buffer, ``meta``, each starting
    16-byte aligned (Triton compiles a kernel per alignment of its pointers), so that a run is
    loaded in one host-to-device copy and every graph keeps reading the same addresses.

    For a :class:`Capacity` of R rows, S slots, I items over all tile classes, P partial rows and
    T tail pieces:

    - slots [S + 1]: the work's KV slot ids (each row's tail window among them), then a dummy
      slot that padding rows' newest tokens are written to;
    - items [I + 1, ITEM_FIELDS]: the work items, each tile class in a region of its capacity,
      then a dummy item that padding tail pieces update;
    - q_perm, q_node, q_vis [R]: each reordered query's row, node and visible keys;
    - merge_offsets [R + 1], merge_rows [P]: each row's partial rows, in merge order;
    - tail_base [R]: where each row's tail window starts in ``slots``;
    - tail_items, tail_rows, tail_starts [T]: each tail piece's item, row and first tail token;
    - own_start, own_len [OWN_RANGES, R]: the slot ranges each row's merge reads itself (range
      1: its tail, when the tails are folded);
    - tail_fold [1]: 1 when the tails are read by the merges, else 0.
    """

    meta: torch.Tensor
    slots: torch.Tensor
    items: torch.Tensor
    q_perm: torch.Tensor
    q_node: torch.Tensor
    q_vis: torch.Tensor
    merge_offsets: torch.Tensor
    merge_rows: torch.Tensor
    tail_base: torch.Tensor
    tail_items: torch.Tensor
    tail_rows: torch.Tensor
    tail_starts: torch.Tensor
    own_start: torch.Tensor
    own_len: torch.Tensor
    tail_fold: torch.Tensor

    @staticmethod
    def layout(cap: Capacity) -> tuple[dict[str, slice], int]:
        """Where each view lies in ``meta`` (by field name, in field order), and its length."""
        r, pieces = cap.rows, cap.tail_pieces
        sizes = {
            "slots": cap.slots + 1,
            "items": (sum(cap.items) + 1) * ITEM_FIELDS,
            "q_perm": r,
            "q_node": r,
            "q_vis": r,
            "merge_offsets": r + 1,
            "merge_rows": cap.partials,
            "tail_base": r,
            "tail_items": pieces,
            "tail_rows": pieces,
            "tail_starts": pieces,
            "own_start": OWN_RANGES * r,
            "own_len": OWN_RANGES * r,
            "tail_fold": 1,
        }
        starts = aligned_starts(list(sizes.values()))
        return {name: slice(a, a + n) for (name, n), a in zip(sizes.items(), starts)}, starts[-1]

    @classmethod
    def allocate(cls, cap: Capacity, device: torch.device) -> RunBuffers:
        """Zeroed buffers of capacity ``cap`` on ``device``."""
        places, total = cls.layout(cap)
        meta = torch.zeros(total, dtype=torch.int32, device=device)
        views = {name: meta[place] for name, place in places.items()}
        views["items"] = views["items"].view(-1, ITEM_FIELDS)
        views["own_start"] = views["own_start"].view(OWN_RANGES, cap.rows)
        views["own_len"] = views["own_len"].view(OWN_RANGES, cap.rows)
        return cls(meta=meta, **views)

    @staticmethod
    def pack(cap: Capacity, work: DecodeWork, rows: int) -> dict[str, np.ndarray]:
        """A run's work of ``rows`` rows as the int64 contents of each view (by field name, in
        field order; ``items`` and the own ranges flat), padded to ``cap``: padding items do
        nothing, padding rows see nothing."""
        host = work.host
        counts = np.bincount(host.item_class, minlength=len(cap.items))
        first = np.cumsum([0, *counts[:-1]])
        # Item i of class c moves from first[c] + j to the class's region offset + j.
        regions = np.cumsum([0, *cap.items])
        dest = regions[host.item_class] + np.arange(len(host.items)) - first[host.item_class]
        items = np.zeros((sum(cap.items) + 1, ITEM_FIELDS), dtype=np.int64)
        items[dest] = host.items
        dummy_slot, dummy_item = cap.slots, sum(cap.items)
        slots = np.zeros(cap.slots + 1, dtype=np.int64)
        slots[: len(host.slots)] = host.slots
        r = cap.rows
        offsets = np.full(r + 1, host.merge_offsets[-1], dtype=np.int64)
        offsets[: rows + 1] = host.merge_offsets

        def pad(a: np.ndarray, n: int, fill: int = 0) -> np.ndarray:
            out = np.full(n, fill, dtype=np.int64)
            out[: len(a)] = a
            return out

        return {
            "slots": slots,
            "items": items.reshape(-1),
            "q_perm": pad(host.q_perm, r),
            "q_node": pad(host.q_node, r),
            "q_vis": pad(host.q_vis, r),
            "merge_offsets": offsets,
            "merge_rows": pad(host.merge_rows, cap.partials),
            "tail_base": pad(work.tail_base, r, dummy_slot),
            "tail_items": pad(dest[work.tail_items], cap.tail_pieces, dummy_item),
            "tail_rows": pad(work.tail_rows, cap.tail_pieces),
            "tail_starts": pad(work.tail_starts, cap.tail_pieces),
            "own_start": np.concatenate([pad(host.own_start[0], r), pad(host.own_start[1], r, dummy_slot)]),
            "own_len": np.concatenate([pad(a, r) for a in host.own_len]),
            "tail_fold": np.array([int(work.folded)]),
        }


@dataclass(frozen=True, eq=False)
class StepInputs:
    """One step's inputs, a column per row, as the rows of one int64 array [4, R] (``array``,
    what the step uploads):

    - tokens: the token each row forwards (-1: the one it drew in the step before, still on the
      device);
    - positions: that token's position in its sequence;
    - slots: the KV slot its key and value are written to (the pool's scratch slot for a row
      whose KV is never read);
    - tail_lens: tokens the row has drawn so far in its run, its tail (0 in a general forward).
    """

    array: np.ndarray

    @classmethod
    def empty(cls, rows: int) -> StepInputs:
        return cls(np.empty((4, rows), dtype=np.int64))

    @property
    def tokens(self) -> np.ndarray:
        return self.array[0]

    @property
    def positions(self) -> np.ndarray:
        return self.array[1]

    @property
    def slots(self) -> np.ndarray:
        return self.array[2]

    @property
    def tail_lens(self) -> np.ndarray:
        return self.array[3]

    @property
    def rows(self) -> int:
        return self.array.shape[1]
