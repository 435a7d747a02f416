"""The rows of a general forward step (:meth:`engine.Engine.forward`).

A general step computes every token on the paths it touches that has a slot but no KV yet
(prefill rows, and the pending last token of finished generations), segment by segment, then
adds a row for each wanted token whose KV is written already: it recomputes that token for its
logits only and writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .kv_tree import Segment


@dataclass(frozen=True, eq=False)
class StepRows:
    """The rows of one general step, T of them.

    segments: the segments on the paths the step touches, each after its parent; parents: the
    index in ``segments`` of each one's parent (-1: a root).
    tokens, slots [T]: each row's token and the KV slot it writes (-1: a recomputed row, which
    writes nothing); the first ``num_write`` rows are those that write.
    nodes [T]: each row's segment (an index into ``segments``); positions [T]: its token's position;
    visible [T]: how many tokens of its segment it sees, its own the last.
    targets: the row whose logits each target of the step asked for.
    prefill: how many rows hold given text rather than generated tokens.
    """

    segments: list[Segment]
    parents: list[int]
    tokens: list[int]
    slots: list[int]
    nodes: np.ndarray
    positions: np.ndarray
    visible: np.ndarray
    targets: list[int]
    num_write: int
    prefill: int


def step_rows(targets: Sequence[tuple[Segment, int]], extra: Sequence[Segment] = ()) -> StepRows:
    """The rows of a step that wants the logits at ``targets`` ((segment, offset) pairs) and the KV
    of every token on the paths of ``targets`` and ``extra``."""
    segments: list[Segment] = []
    index: dict[int, int] = {}
    for target in [t[0] for t in targets] + list(extra):
        for s in target.path():
            if s.id not in index:
                index[s.id] = len(segments)
                segments.append(s)
    # The rows that write: every token without KV, segment by segment (tokens and slots copied as
    # list slices, nodes and offsets computed for all rows at once).
    n = len(segments)
    written = np.fromiter((s.written for s in segments), dtype=np.int64, count=n)
    counts = np.fromiter((len(s.tokens) for s in segments), dtype=np.int64, count=n) - written
    starts = np.fromiter((s.start for s in segments), dtype=np.int64, count=n)
    tokens: list[int] = []
    slots: list[int] = []
    for s in segments:
        if s.written < len(s.tokens):
            tokens += s.tokens[s.written :]
            slots += s.slots[s.written :]
    num_write = len(tokens)
    first = np.cumsum(counts) - counts  # each segment's first row
    written_nodes = np.repeat(np.arange(n), counts)
    written_offsets = np.arange(num_write) - first[written_nodes] + written[written_nodes]  # within the segment
    # Then a row per target whose token has KV already, once per token.
    recomputed: dict[tuple[int, int], int] = {}  # (segment, offset) -> its recomputed row
    target_rows = []
    for s, j in targets:
        i = index[s.id]
        if j >= written[i]:
            target_rows.append(int(first[i] + j - written[i]))
            continue
        if (i, j) not in recomputed:
            recomputed[(i, j)] = len(tokens)
            tokens.append(s.tokens[j])
            slots.append(-1)
        target_rows.append(recomputed[(i, j)])
    n_re = len(recomputed)
    nodes = np.concatenate([written_nodes, np.fromiter((i for i, _ in recomputed), dtype=np.int64, count=n_re)])
    offsets = np.concatenate([written_offsets, np.fromiter((j for _, j in recomputed), dtype=np.int64, count=n_re)])
    given = np.fromiter((not s.generated for s in segments), dtype=bool, count=n)
    return StepRows(
        segments=segments,
        parents=[index[s.parent.id] if s.parent is not None else -1 for s in segments],
        tokens=tokens,
        slots=slots,
        nodes=nodes,
        positions=starts[nodes] + offsets,
        visible=offsets + 1,
        targets=target_rows,
        num_write=num_write,
        prefill=int(counts[given].sum()),
    )
