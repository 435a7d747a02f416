"""How the split-KV planners size their work and how its launches run: :class:`WorkConfig`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .tiles import TileConfig

# Keys per step when the merge reads a query's own keys: 16 (the least a tensor-core tile takes)
# when every own range of the plan fits in it, else 32.
OWN_BLOCKS = (16, 32)


@dataclass(frozen=True)
class WorkConfig:
    """How work is sized.

    waves: programs per SM to size chunks for, over all classes; None (the default) sizes each
    tile class on its own by :func:`sizing.round_chunks`, trying half a round of resident programs and
    each of ``rounds``: how many rounds its launch may take. num_sms: None = the device's; min_chunk: fewest KV
    tokens per chunk, None = four times the tile's rows (so a chunk's fp32 partials stay small
    next to its KV); max_block_m: cap on a tile's query rows (16, 64 or 128), None = the largest that fits;
    small_node: nodes shorter than this (chains of them, where ``chains``) are not shared: each
    query reads their tokens itself, together with its other short nodes (a speculative token
    tree's one-token nodes would otherwise each cost every query below them a partial output
    that is bigger than the node). A short node in a longer chain is read with the chain.
    fold_own: a query's own keys (its short nodes) up to this many are read by its merge program
    instead of by partial items: one launch and one partial round trip fewer per call. 0 never
    folds.
    fold_tail: the same for a decode run's tails (:mod:`decode_work`), by the most a tail may grow
    in the run. The merge reads a tail while the partial launch runs, so it folds longer ranges
    than ``fold_own``: runs of a few hundred tokens per branch measured faster with their tails
    read by the merge than as tail items wherever many branches shared a long prompt, and runs of
    1024 tokens slower (docs/perf-log/, tree-decode). 0 never folds.
    fold_unshared: a node (chain) that only one query sees, and of at most ``fold_own`` keys, counts as
    short too (a leaf of one branch gains nothing from a partial item of its own).
    fold_launches: a launch of short shared nodes beside another launch (not one of an SM per
    program) is read by the merges instead, where that keeps each query's own keys within
    ``fold_own`` and adds at most the other launches' reads (:func:`tree_work._short_launches`); not for
    nodes whose own queries see a causal prefix of them (a prefill's).
    own_block: keys per step when the merge reads a query's own keys (one of OWN_BLOCKS; a
    program over several KV heads divides them among its heads); None
    (the default) takes the small block when every own range of the plan fits in it. Decode
    graphs, whose tails grow from step to step, always take the large one.
    wide_tiles: (query rows, keys) a node needs for tiles of more than 64 rows; smaller nodes
    use 64-row tiles, whose four warps leave room for more resident programs. Measured with
    launches sized by rounds: 128-row tiles win from 128 rows and 4096 keys (each node's keys
    read by half as many blocks), and lose on short nodes (too few programs).
    chains: a path of nodes that the same queries see (each the only child of the one above it
    with queries below it, its slots stored right after that one's) is chunked as one node,
    however short its nodes, so how a prompt is cut into nodes does not change a call's work: a
    search that expands one node at depth d has such a path from the root. False chunks every
    node alone.
    """

    waves: float | None = None
    rounds: tuple[int, ...] = (1, 2, 3, 4, 6, 8)
    num_sms: int | None = None
    min_chunk: int | None = None
    max_block_m: int | None = None
    small_node: int = 8
    fold_own: int = 128
    fold_tail: int = 512
    fold_unshared: bool = True
    fold_launches: bool = True
    own_block: int | None = None
    wide_tiles: tuple[int, int] = (128, 4096)
    chains: bool = True
    # SMs the class whose programs each take an SM (the 128-row tiles) is sized for where other
    # launches share the call; None: the share :func:`sizing.wide_split` gives it; 0: all of them, as
    # every other class.
    wide_sms: int | None = None
    tiles: tuple[TileConfig, ...] | None = None  # the tile of each class; None: tiles.tile_shapes's defaults
    # Partials the merge takes per step (their ids and log-sum-exps in one load, their outputs
    # all in flight together). 4 measured faster than 1 on nearly every benchmark tree and on
    # decode steps; 16 was slower.
    merge_block: int = 4
    # KV heads per merge program (a power of two; fewer where the model has fewer): None picks
    # per call from its query rows (deft.merge_heads).
    merge_heads: int | None = None
    # Partial launches of different tile classes run side by side on two CUDA streams (they
    # write disjoint partials), so one class's last wave overlaps the next class's programs.
    side_by_side: bool = True
    # On GPUs with programmatic dependent launch (compute capability 9.0 on), the merge is
    # launched while the partial launch before it runs: its programs start as the partials'
    # last wave drains, read their own keys, then wait for the partials. Only where the merge
    # follows one stream's partial launch (one tile class, or ``side_by_side=False``).
    early_merge: bool = True
    # On Hopper GPUs (compute capability 9.x) with head dim 128, the 64- and 128-row tile classes
    # run the warp-specialised kernel of :mod:`deft_ws` (the same partials, bitwise; faster per
    # launch, most with 128 rows). False keeps the Triton tiles everywhere.
    warp_specialized: bool = True

    @property
    def launch(self) -> dict[str, Any]:
        """The settings a launch reads, apart from how work is sized, by :class:`workplan.WorkPlan` field
        name (merge_block, merge_heads, side_by_side, early_merge, warp_specialized). Work planned
        under configs that differ only in sizing launches alike."""
        return dict(
            merge_block=self.merge_block,
            merge_heads=self.merge_heads,
            side_by_side=self.side_by_side,
            early_merge=self.early_merge,
            warp_specialized=self.warp_specialized,
        )

    def __post_init__(self) -> None:
        if any(
            x is not None and x <= 0 for x in (self.waves, self.num_sms, self.min_chunk, self.max_block_m, *self.rounds)
        ):
            raise ValueError(f"waves, num_sms, min_chunk, max_block_m and rounds must be positive, got {self}")
        if not self.rounds or list(self.rounds) != sorted(set(self.rounds)):
            raise ValueError(f"rounds must be increasing and not empty, got {self.rounds}")
        for tile in self.tiles or ():
            bm, bn = tile.block_m, tile.block_n
            if bm < 16 or bn < 16 or bm & (bm - 1) or bn & (bn - 1) or tile.num_warps < 1 or tile.num_stages < 1:
                raise ValueError(f"{tile} needs power-of-two block sizes >= 16")
        if self.merge_block < 1 or self.merge_block & (self.merge_block - 1):
            raise ValueError(f"merge_block must be a power of two, got {self.merge_block}")
        if self.merge_heads is not None and (self.merge_heads < 1 or self.merge_heads & (self.merge_heads - 1)):
            raise ValueError(f"merge_heads must be a power of two or None, got {self.merge_heads}")
        if self.own_block is not None and self.own_block not in OWN_BLOCKS:
            raise ValueError(f"own_block must be one of {OWN_BLOCKS} or None, got {self.own_block}")
        if min(self.small_node, self.fold_own, self.fold_tail, *self.wide_tiles, self.wide_sms or 0) < 0:
            raise ValueError(
                f"small_node, fold_own, fold_tail, wide_tiles and wide_sms must be non-negative, got {self}"
            )
