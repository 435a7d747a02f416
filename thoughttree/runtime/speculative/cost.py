"""The cost model that sizes each branch's draft per step, down to none.

A step's time is modelled as ``fixed + per_row * rows`` (plus the drafter's own time when it
drafts), both fitted to measured steps by least squares with exponential forgetting; a draft
node's chance of being kept is its draft score times a calibration factor, the measured ratio
of tokens kept to scores spent. Each step, draft nodes are taken best first, across all
branches, while they raise the expected tokens per second: a node of acceptance ``p`` is worth
its row when ``p * time > per_row * tokens``, with ``tokens`` and ``time`` the step's expected
totals so far. So when drafts are rarely kept or rows are dear, branches stop drafting and a
step costs what a plain one does.
"""

from __future__ import annotations

import heapq
from typing import Sequence


class CostModel:
    """Measured step costs and acceptance; :meth:`budgets` picks the draft sizes of a step."""

    def __init__(self, decay: float = 0.95, explore_every: int = 16) -> None:
        self.decay = decay
        self.explore_every = explore_every
        # Weighted sums for the least-squares fit of time = fixed + per_row * rows.
        self._w = self._x = self._y = self._xx = self._xy = 0.0
        self._draft_time = 0.0  # drafter time per drafting step (decayed mean)
        self._score = 1.0  # decayed sums of draft scores verified and of nodes kept, prior 1 : 0.5
        self._kept = 0.5
        self._steps = 0

    # -- measurements --------------------------------------------------------------------------
    def record_step(self, rows: int, seconds: float) -> None:
        d = self.decay
        self._w, self._x, self._y = d * self._w + 1, d * self._x + rows, d * self._y + seconds
        self._xx, self._xy = d * self._xx + rows * rows, d * self._xy + rows * seconds
        self._steps += 1

    def record_draft(self, seconds: float) -> None:
        self._draft_time = self.decay * self._draft_time + (1 - self.decay) * seconds

    def record_acceptance(self, scores: Sequence[float], kept: int) -> None:
        """A branch verified nodes of these ``scores`` and kept ``kept`` of them."""
        self._score = self.decay * self._score + sum(scores)
        self._kept = self.decay * self._kept + kept

    @property
    def calibration(self) -> float:
        return self._kept / self._score if self._score > 0 else 0.0

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
        """Whether even a sure-looking draft node (score 1) could pay for its row this step; when
        not, the drafter is not asked at all (but every ``explore_every`` steps it is, so the
        measurements keep up)."""
        if self._steps % self.explore_every == 0:
            return True
        fixed, per_row = self.line()
        p = min(1.0, self.calibration)
        return p * (fixed + per_row * plain_rows) > (per_row + self._draft_time) * plain_rows

    def budgets(self, plain_rows: int, scores: Sequence[Sequence[float]], adaptive: bool) -> list[int]:
        """How many leading nodes of each branch's ordered candidates (``scores[b]``) to verify.

        ``plain_rows``: the rows the step has anyway (one per live branch).
        """
        if not adaptive:
            return [len(s) for s in scores]
        fixed, per_row = self.line()
        c = self.calibration
        tokens = float(plain_rows)
        time = fixed + per_row * plain_rows
        drafting = False
        take = [0] * len(scores)
        heap = [(-min(1.0, c * s[0]), b) for b, s in enumerate(scores) if s]
        heapq.heapify(heap)
        while heap:
            neg, b = heapq.heappop(heap)
            p = -neg
            extra = per_row + (0.0 if drafting else self._draft_time)
            if p * time <= extra * tokens:
                break
            tokens, time, drafting = tokens + p, time + extra, True
            take[b] += 1
            if take[b] < len(scores[b]):
                heapq.heappush(heap, (-min(1.0, c * scores[b][take[b]]), b))
        if not drafting and scores and self._steps % self.explore_every == 0:
            # Now and then one node is verified anyway, so a calibration that fell too low can recover.
            best = max(range(len(scores)), key=lambda b: scores[b][0] if scores[b] else -1.0)
            if scores[best]:
                take[best] = 1
        return take
