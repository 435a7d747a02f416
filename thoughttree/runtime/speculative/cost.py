"""The cost model that sizes each branch's draft per step, down to none.

A step's time is modelled as ``fixed + per_row * rows`` (plus the drafter's own time when it
drafts), both fitted to measured steps by least squares with exponential forgetting. A draft
node's chance of being kept is read from measured acceptance, binned by the node's depth and
its draft score (drafters' scores are only roughly probabilities: a random small model is
unsure of tokens it gets right, a lookup sure of ones it gets wrong). A bin with few
measurements leans on its depth's acceptance over all scores, and that on a prior, so a drafter
whose drafts are rarely kept is not trusted again in each score bin it has not been seen in; and
no depth is expected to keep more than the depth above it.

Each step, draft nodes are taken best first, across all branches, while they raise the expected
tokens per second: a node of acceptance ``p`` is worth its row when ``p * time > per_row *
tokens``, with ``tokens`` and ``time`` the step's expected totals so far. So when drafts are
rarely kept or rows are dear, branches stop drafting and a step costs what a plain one does.
Plain decode steps also overlap the host's work with the GPU's, which a verification step
cannot: the time that saves is measured (:meth:`record_plain`) and a draft must pay for it too.
On the decode buffers a step verifies a node count for every branch, a row per branch each
(:meth:`levels`): there the count is chosen the same way, one node of each branch at a time.
"""

from __future__ import annotations

import bisect
import heapq
from typing import Sequence

_EDGES = (0.02, 0.1, 0.3, 0.6, 0.9)  # score bins
_DEPTHS = 8  # deeper nodes share the last depth bin


def _bin(score: float, depth: int) -> int:
    return min(depth, _DEPTHS) * (len(_EDGES) + 1) + bisect.bisect_right(_EDGES, score)


class CostModel:
    """Measured step costs and acceptance; :meth:`budgets` picks the draft sizes of a step."""

    def __init__(
        self, decay: float = 0.95, explore_every: int = 16, prior: float = 0.6, prior_weight: float = 2.0
    ) -> None:
        self.decay = decay
        self.explore_every = explore_every
        # Weighted sums for the least-squares fit of time = fixed + per_row * rows.
        self._w = self._x = self._y = self._xx = self._xy = 0.0
        self._draft_time = 0.0  # drafter time per drafting step (decayed mean)
        bins = (_DEPTHS + 1) * (len(_EDGES) + 1)
        self._seen = [0.0] * bins  # decayed counts of nodes verified and kept, per bin
        self._kept = [0.0] * bins
        self._prior, self._prior_weight = prior, prior_weight
        # Exploration: while drafting does not pay, the drafter is still asked now and then (one
        # node verified), so estimates that fell too low can recover. The interval between such
        # asks doubles each time (a draft model's proposal costs forwards), back to
        # ``explore_every`` once drafting pays.
        self._asks = 0  # worth_drafting calls
        self._next_explore = explore_every
        self._interval = explore_every
        self._exploring = False  # whether the current step is such an ask
        # Seconds a plain decode step saves against a verification step of the same rows that
        # drafts nothing (decayed mean): plain steps overlap the host's work with the GPU's,
        # which verification cannot, since its drafts wait for what the step before kept.
        self._plain_gain = 0.0

    # -- measurements --------------------------------------------------------------------------
    def record_step(self, rows: int, seconds: float) -> None:
        d = self.decay
        self._w, self._x, self._y = d * self._w + 1, d * self._x + rows, d * self._y + seconds
        self._xx, self._xy = d * self._xx + rows * rows, d * self._xy + rows * seconds

    def record_plain(self, rows: int, seconds: float) -> None:
        """A plain decode step of ``rows`` rows took ``seconds`` (mean of a run of such steps)."""
        if self._w == 0:
            return  # nothing to compare it with yet
        fixed, per_row = self.line()
        gain = max(0.0, fixed + per_row * rows - seconds)
        self._plain_gain = self.decay * self._plain_gain + (1 - self.decay) * gain if self._plain_gain else gain

    def record_draft(self, seconds: float) -> None:
        self._draft_time = self.decay * self._draft_time + (1 - self.decay) * seconds

    def record_acceptance(self, scores: Sequence[float], depths: Sequence[int], kept: Sequence[bool]) -> None:
        """A branch verified draft nodes of these ``scores`` and ``depths``; ``kept[k]``: node k was kept."""
        for score, depth, ok in zip(scores, depths, kept):
            b = _bin(score, depth)
            self._seen[b] += 1
            self._kept[b] += ok

    def end_step(self) -> None:
        """Older acceptance counts weigh less with every step."""
        d = self.decay
        self._seen = [x * d for x in self._seen]
        self._kept = [x * d for x in self._kept]

    def acceptance(self, score: float, depth: int) -> float:
        """The estimated chance that a node of this draft score and depth is kept (never above
        the chance that a node one level up is: a node is kept only after its parent)."""
        b = _bin(score, depth)
        w = self._prior_weight
        p = (self._kept[b] + self._depth_rate(depth) * w) / (self._seen[b] + w)
        return min(p, self._depth_rate(depth - 1)) if depth > 1 else p

    def _depth_rate(self, depth: int) -> float:
        """Acceptance at ``depth`` over every score bin, leaning on the prior while few are
        measured, and never above the rate of the depths before it."""
        w, width = self._prior_weight, len(_EDGES) + 1
        rate = 1.0
        for d in range(1, min(depth, _DEPTHS) + 1):
            bins = slice(d * width, (d + 1) * width)
            raw = (sum(self._kept[bins]) + self._prior**d * w) / (sum(self._seen[bins]) + w)
            rate = min(rate, raw)
        return rate

    def line(self) -> tuple[float, float]:
        """(fixed, per_row) seconds; per_row falls back to a share of the fixed cost until rows vary."""
        if self._w == 0:
            return 1.0, 1.0 / 64
        mean_x, mean_y = self._x / self._w, self._y / self._w
        var = self._xx / self._w - mean_x * mean_x
        if var <= 1e-9 * max(1.0, mean_x * mean_x):
            return mean_y, mean_y / 64 / max(1.0, mean_x)
        slope = max(0.0, (self._xy / self._w - mean_x * mean_y) / var)
        return max(mean_y - slope * mean_x, 1e-9), slope

    # -- decisions -----------------------------------------------------------------------------
    def worth_drafting(self, plain_rows: int) -> bool:
        """Whether a first-level draft node of the best measured kind could pay for its row this
        step; when not, the drafter is not asked at all, but now and then it is (after
        ``explore_every`` asks, then twice as many each time, up to 64 times as many) so the
        measurements keep up."""
        self._asks += 1
        self._exploring = False
        if self._pays(plain_rows):
            self._interval = self.explore_every
            return True
        if self._asks >= self._next_explore:
            self._exploring = True
            self._next_explore = self._asks + self._interval
            self._interval = min(2 * self._interval, 64 * self.explore_every)
            return True
        return False

    def _pays(self, plain_rows: int) -> bool:
        if self._w == 0:
            return True  # nothing measured yet
        fixed, per_row = self.line()
        # The first level's bins this drafter has been measured in (its scores fall in few of them).
        first = range(len(_EDGES) + 1, 2 * (len(_EDGES) + 1))
        seen = [b for b in first if self._seen[b] >= 0.5]
        w, rate = self._prior_weight, self._depth_rate(1)
        p = max((self._kept[b] + rate * w) / (self._seen[b] + w) for b in seen) if seen else rate
        extra = (per_row + self._draft_time) * plain_rows + (1 + p) * self._plain_gain
        return p * (fixed + per_row * plain_rows) > extra

    def budgets(self, plain_rows: int, nodes: Sequence[Sequence[tuple[float, int]]], adaptive: bool) -> list[int]:
        """How many leading nodes of each branch's ordered candidates to verify.

        ``nodes[b]``: (draft score, depth) of branch b's candidates in the order its shape spends
        them; ``plain_rows``: the rows the step has anyway (one per live branch).
        """
        if not adaptive:
            return [len(n) for n in nodes]
        fixed, per_row = self.line()
        tokens = float(plain_rows)
        time = fixed + per_row * plain_rows
        drafting = False
        take = [0] * len(nodes)
        heap = [(-self.acceptance(*n[0]), b) for b, n in enumerate(nodes) if n]
        heapq.heapify(heap)
        while heap:
            neg, b = heapq.heappop(heap)
            p = -neg
            extra = per_row + (0.0 if drafting else self._draft_time)
            if p * time <= extra * tokens:
                break
            tokens, time, drafting = tokens + p, time + extra, True
            take[b] += 1
            if take[b] < len(nodes[b]):
                heapq.heappush(heap, (-self.acceptance(*nodes[b][take[b]]), b))
        if not drafting and nodes and self._exploring:
            # Now and then one node is verified anyway, so estimates that fell too low can recover.
            best = max(range(len(nodes)), key=lambda b: nodes[b][0][0] if nodes[b] else -1.0)
            if nodes[best]:
                take[best] = 1
        return take

    def levels(self, width: int, chains: Sequence[Sequence[tuple[float, int]]], adaptive: bool) -> int:
        """How many draft levels a step on the decode buffers verifies: there every branch of a
        batch of ``width`` has a row at each level the step runs, so a level costs ``width`` rows
        and every chain drafts as deep as it can up to it.

        ``chains[b]``: (draft score, depth) of branch b's chain nodes, shallowest first.
        """
        deepest = max((len(c) for c in chains), default=0)
        if not adaptive or not deepest:
            return deepest
        fixed, per_row = self.line()
        tokens, time = float(width), fixed + per_row * width
        best, best_rate = 0, tokens / max(time - self._plain_gain, 1e-9)  # plain steps, overlapped
        time += self._draft_time
        for level in range(1, deepest + 1):
            tokens += sum(self.acceptance(*c[level - 1]) for c in chains if len(c) >= level)
            time += per_row * width
            if tokens / time > best_rate:
                best, best_rate = level, tokens / time
        if not best and self._exploring:
            best = 1  # now and then one level anyway, so estimates that fell too low can recover
        return best
