"""Speculative decode steps: every speculating branch's draft tree and every plain branch's newest
token go through one target forward, and each branch keeps the tokens plain decoding would draw.

Per step, a branch's draft tree hangs under its newest token as short unsealed KV segments (one
per run of nodes without siblings), so the forward's plan lets each draft token see exactly its
ancestors. The seeded sampler is a function of (logits, seed, position): it is run on every row,
the tip's row and each draft node's, with the position the token after that row would have. The
walk from the tip follows the child whose token equals the sampler's draw; the first draw with
no such child is emitted too, so a step yields at least one token. Emitted tokens go through the
same finish checks as plain decoding one by one (EOS, stop tokens, stop strings, length), so a
finish inside an accepted run cuts it at the same token. The KV of kept draft tokens is copied
into the branch's own segment and every draft segment is released before the step returns.

With the Triton kernels, once every branch's parent path has its KV (all but perhaps the
parent's last token: every step but a prompt's prefill), steps verify on the decode buffers
instead (:class:`VerifyBatch`, a CUDA graph per row bucket on a GPU): the drafts go straight into
the branches' own segments, a row per draft node, and the KV of a kept path that is not already
at the front of them is moved there.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np
import torch

from ...config import Speculative
from ..kv_pool import KVPoolExhausted
from ..kv_tree import Segment
from ..sampler import sample_packed
from ..verify_batch import VerifyBatch
from .cost import CostModel
from .drafter import Branch, Drafter, DraftTree
from .lookup import TreeLookup
from .shapes import order

if TYPE_CHECKING:
    from ..decode_requests import Decoded, DecodeRequest, Ends
    from ..engine import Engine


class Speculator:
    """The engine's speculation state: the default option, drafters and cost models by option."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.default: Speculative | None = None
        # Turns "draft:PATH" into a drafter; the LM sets it (loading a model is its business).
        self.load_draft: Callable[[str], Drafter] | None = None
        self._drafters: dict[object, Drafter] = {}
        self.costs: dict[Speculative, CostModel] = {}
        self._batch: VerifyBatch | None = None  # the decode call's verification steps on fixed buffers
        self._depth = 0  # the most draft nodes of a branch in the decode call
        self._tree = False  # whether the decode call's drafts may be trees (not only chains)
        # Per option sized by its cost model, the deepest draft level it verified in its last
        # drafting step: the drafter is asked for one level more (see _ask_depth).
        self._reach: dict[Speculative, int] = {}

    def options(self, requests: Sequence[DecodeRequest]) -> list[Speculative | None] | None:
        """Each request's speculation option (None: plain); None when no request speculates."""
        out = []
        for r in requests:
            spec = r.sampling.speculative if r.sampling.speculative is not None else self.default
            out.append(spec if spec is not None and spec.on else None)
        return out if any(s is not None for s in out) else None

    def drafter(self, spec: Speculative) -> Drafter:
        d = spec.drafter
        if not isinstance(d, str):
            if not isinstance(d, Drafter):
                raise TypeError(
                    f"Speculative.drafter {type(d).__name__} lacks the Drafter methods begin, propose, accepted and end"
                )
            return d
        key = (d, spec.ngram)
        if key not in self._drafters:
            if d == "lookup":
                self._drafters[key] = TreeLookup(spec.ngram)
            elif self.load_draft is None:
                raise ValueError(f"drafter {d!r} needs a model loader; use it through an LM")
            else:
                self._drafters[key] = self.load_draft(d.removeprefix("draft:"))
        return self._drafters[key]

    def decode(
        self, requests: Sequence[DecodeRequest], outs: list[Decoded], ends: Ends, specs: Sequence[Speculative | None]
    ) -> None:
        """Decode every request to its end in speculative steps (``specs[i]`` None: one row per step)."""
        groups: dict[Speculative, list[int]] = {}
        for i, s in enumerate(specs):
            if s is not None:
                groups.setdefault(s, []).append(i)
        drafters = {s: self.drafter(s) for s in groups}
        begun: list[Drafter] = []
        self._batch = None
        self._tree = any(s.shape != "chain" for s in groups)
        self._depth = max(s.max_nodes if s.shape != "chain" else min(s.max_depth, s.max_nodes) for s in groups)
        try:
            for s, members in groups.items():
                if all(drafters[s] is not d for d in begun):
                    drafters[s].begin(self.engine.kv, [_branch(i, requests, outs) for i in range(len(requests))])
                    begun.append(drafters[s])
            still = list(range(len(requests)))
            while still:
                still, asked = self._step(requests, outs, ends, specs, drafters, still)
                if still and not asked:
                    # No draft pays for its rows now: the rest of the call runs on the plain decode
                    # steps (which on the decode buffers overlap the host's work with the GPU's);
                    # their cost is measured.
                    self._decode_plain(requests, outs, still, ends, groups)
                    still = []
        finally:
            self._batch = None
            for d in begun:
                d.end()

    def _decode_plain(
        self,
        requests: Sequence[DecodeRequest],
        outs: list[Decoded],
        still: list[int],
        ends: Ends,
        groups: dict[Speculative, list[int]],
    ) -> None:
        """The rest of the call on plain decode steps, their mean step time told to the cost models."""
        stats = self.engine.stats
        steps, tokens, t0 = stats.forward_steps, stats.generated_tokens, time.perf_counter()
        self.engine.decode_rest(requests, outs, still, ends)
        steps = stats.forward_steps - steps
        if steps:
            seconds = (time.perf_counter() - t0) / steps
            for spec in groups:
                self.costs.setdefault(spec, CostModel()).record_plain(
                    round((stats.generated_tokens - tokens) / steps), seconds
                )

    def _step(
        self,
        requests: Sequence[DecodeRequest],
        outs: list[Decoded],
        ends: Ends,
        specs: Sequence[Speculative | None],
        drafters: dict[Speculative, Drafter],
        still: list[int],
    ) -> tuple[list[int], bool]:
        """One verification step; returns the requests that go on and whether a drafter was asked."""
        engine, kv = self.engine, self.engine.kv
        stats = engine.stats
        drafts: dict[int, DraftTree] = {}
        by_spec: dict[Speculative, list[int]] = {}
        for i in still:
            spec = specs[i]
            # A branch emits at most its remaining length, the first token of which is the tip's own draw.
            if spec is not None and ends.limit[i] - len(outs[i].tokens) > 1:
                by_spec.setdefault(spec, []).append(i)
        for spec in list(by_spec):
            if spec.adaptive and not self.costs.setdefault(spec, CostModel()).worth_drafting(len(still)):
                del by_spec[spec]  # its branches decode plainly this step, the drafter not even asked
        # The decode buffers can take the step: every branch past its first token or its parent's
        # KV stored (but perhaps for its last token).
        fixed = engine.fast_decode and all(outs[i].tokens or requests[i].parent.has_kv_but_last() for i in still)
        if not by_spec and fixed:
            return still, False  # nothing to verify: the plain decode steps take over at once
        candidates: dict[int, tuple[Speculative, DraftTree, list[int]]] = {}
        for spec, members in by_spec.items():
            t0 = time.perf_counter()
            branches = [_branch(i, requests, outs) for i in members]
            asked = self._ask_depth(spec)
            proposed = drafters[spec].propose(branches, spec.max_nodes, asked)
            for i, d in zip(members, proposed):
                cap = min(asked, ends.limit[i] - len(outs[i].tokens) - 1)
                depth = d.depths()
                fits = [k for k in order(d, spec.shape, spec.top_k) if depth[k] <= cap]
                candidates[i] = (spec, d, fits[: spec.max_nodes])
            seconds = time.perf_counter() - t0
            self.costs.setdefault(spec, CostModel()).record_draft(seconds)
            stats.draft_seconds += seconds
        if fixed and self._buffers_take(candidates):
            return self._fixed_step(requests, outs, ends, specs, drafters, still, by_spec, candidates)
        for spec, members in by_spec.items():
            proposed = [candidates[i][1] for i in members]
            orders = [candidates[i][2] for i in members]
            cost = self.costs[spec]
            levels = [d.depths() for d in proposed]
            nodes = [[(d.scores[k], dep[k]) for k in o] for d, o, dep in zip(proposed, orders, levels)]
            budgets = cost.budgets(len(still), nodes, spec.adaptive)
            for i, d, o, b in zip(members, proposed, orders, budgets):
                if b:
                    drafts[i] = d.subset(o[:b])
            self._reach[spec] = max((dep[k] for dep, o, b in zip(levels, orders, budgets) for k in o[:b]), default=0)
        if self._batch is not None:
            self._batch.reload()  # this general step loads its own work into the decode buffers
        made: list[Segment] = []
        try:
            targets: list[tuple[Segment, int]] = []
            rows: list[tuple[int, int]] = []  # (request, draft node or -1 for the tip) per target
            where: dict[int, list[tuple[Segment, int]]] = {}
            # Pages the emission after the forward needs (every branch's kept tokens and the one it
            # draws go into its own segment while the drafts still hold theirs): a draft is placed
            # only where the pool keeps that room, so speculation never fails a step that plain
            # decoding would take.
            emit = {i: kv.new_pages(outs[i].segment, 1) for i in still}
            reserve = sum(emit.values())
            for i in still:
                tip = _tip(i, requests, outs)
                targets.append((tip, len(tip.tokens) - 1))
                rows.append((i, -1))
                if i in drafts:
                    mine: list[Segment] = []
                    extra = kv.new_pages(outs[i].segment, 1 + max(drafts[i].depths())) - emit[i]
                    try:
                        where[i] = _draft_segments(kv, tip, drafts[i], mine)
                        room = kv.pool.num_free >= reserve + extra
                    except KVPoolExhausted:
                        room = False
                    if not room:  # no room for this draft: the branch decodes plainly this step
                        for seg in reversed(mine):
                            kv.release(seg)
                        drafts.pop(i)
                        where.pop(i, None)
                        continue
                    made += mine
                    reserve += extra
                    targets += where[i]
                    rows += [(i, k) for k in range(len(drafts[i]))]
            t0 = time.perf_counter()
            logits = engine.forward(targets)
            params = [requests[i].sampling for i, _ in rows]
            seeds = [requests[i].seed for i, _ in rows]
            depths = {i: d.depths() for i, d in drafts.items()}
            steps = [len(outs[i].tokens) + (0 if k < 0 else depths[i][k]) for i, k in rows]
            host = sample_packed(logits, params, seeds, steps, fused=logits.device.type == "cuda").cpu().numpy()
            for spec in {s for s in specs if s is not None}:
                self.costs.setdefault(spec, CostModel()).record_step(len(targets), time.perf_counter() - t0)
            draw = {(i, k): (int(host[r, 0]), float(host[r, 1])) for r, (i, k) in enumerate(rows)}
            copies: list[tuple[int, int]] = []
            nxt = []
            for i in still:
                if self._emit(i, requests, outs, ends, drafts.get(i), where.get(i), draw, specs, drafters, copies):
                    nxt.append(i)
            if copies:
                _copy_kv(kv.pool, copies)
        finally:
            for seg in made:
                kv.release(seg)
        for spec in by_spec:
            self.costs[spec].end_step()
        if engine.after_step is not None:
            engine.after_step()
        stats.speculative_steps += 1
        return nxt, bool(by_spec)

    def _ask_depth(self, spec: Speculative) -> int:
        """How many levels to ask ``spec``'s drafter for: with the cost model sizing the drafts,
        one past the deepest level it verified in its last drafting step (a draft model runs a
        forward per level, which a level the cost model would not verify wastes), so the depth
        can grow a level per step; otherwise, and before its first drafting step, ``max_depth``."""
        if not spec.adaptive or spec not in self._reach:
            return spec.max_depth
        return min(spec.max_depth, self._reach[spec] + 1)

    def _buffers_take(self, candidates: dict[int, tuple[Speculative, DraftTree, list[int]]]) -> bool:
        """Whether the decode buffers take this step's drafts: every draft a chain, unless the
        call's batch takes trees."""
        if self._tree:
            return True
        for _, d, o in candidates.values():
            if any(d.parents[k] != (o[n - 1] if n else -1) for n, k in enumerate(o)):
                return False
        return True

    def _fixed_step(
        self,
        requests: Sequence[DecodeRequest],
        outs: list[Decoded],
        ends: Ends,
        specs: Sequence[Speculative | None],
        drafters: dict[Speculative, Drafter],
        still: list[int],
        by_spec: dict[Speculative, list[int]],
        candidates: dict[int, tuple[Speculative, DraftTree, list[int]]],
    ) -> tuple[list[int], bool]:
        """A verification step on the decode buffers (:class:`VerifyBatch`)."""
        engine = self.engine
        batch = self._batch
        if batch is None or not batch.keeps(still):
            batch = self._batch = VerifyBatch(
                engine, still, [requests[i] for i in still], [outs[i].segment for i in still], self._depth, self._tree
            )
        width = len(batch.tails)  # rows per draft node, finished branches' padding rows included
        drafts: dict[int, DraftTree] = {}
        for spec, members in by_spec.items():
            picked = [candidates[i][1:] for i in members]
            nodes = [[(d.scores[k], depth[k]) for k in o] for d, o in picked for depth in (d.depths(),)]
            count = self.costs[spec].levels(width, nodes, spec.adaptive)
            for i, (d, o) in zip(members, picked):
                if count and o:
                    drafts[i] = d.subset(o[:count])
            self._reach[spec] = max((dep for branch in nodes for _, dep in branch[:count]), default=0)
        t0 = time.perf_counter()
        draws = batch.verify(still, {i: d.tokens for i, d in drafts.items()}, {i: d.parents for i, d in drafts.items()})
        rows = width * max(len(d) for d in draws.values())
        if not batch.fresh:  # a step that planned its work or captured a graph is not what steps cost
            for spec in {s for s in specs if s is not None}:
                self.costs.setdefault(spec, CostModel()).record_step(rows, time.perf_counter() - t0)
        paths = {i: _walk(drafts.get(i), draws[i]) for i in still}
        # The kept nodes' KV to the front of the drafts, in path order (a chain's is there already).
        copies = []
        for i in still:
            seg, base = outs[i].segment, len(outs[i].tokens)
            copies += [(seg.slots[base + k], seg.slots[base + e]) for e, k in enumerate(paths[i]) if k != e]
        if copies:
            _copy_kv(engine.kv.pool, copies)
        nxt = [
            i
            for i in still
            if self._emit_path(i, requests, outs, ends, drafts.get(i), paths[i], draws[i], specs, drafters)
        ]
        for spec in by_spec:
            self.costs[spec].end_step()
        if engine.after_step is not None:
            engine.after_step()
        engine.stats.speculative_steps += 1
        return nxt, bool(by_spec)

    def _emit_path(
        self,
        i: int,
        requests: Sequence[DecodeRequest],
        outs: list[Decoded],
        ends: Ends,
        draft: DraftTree | None,
        path: list[int],
        draws: np.ndarray,
        specs: Sequence[Speculative | None],
        drafters: dict[Speculative, Drafter],
    ) -> bool:
        """Append what request ``i`` keeps of its verified draft (``draws`` [j + 1, 2]: the draw
        after its newest token and after each of the j draft nodes its segment holds, then a
        placeholder; ``path``: the nodes kept, their KV already moved to the front); returns
        whether it goes on."""
        engine = self.engine
        out = outs[i]
        seg = out.segment
        verified = len(draws) - 1
        rows = [0, *(k + 1 for k in path)]  # the draw of each emitted token: after the tip, then each kept node
        drawn, logprobs = draws[rows, 0].astype(np.int64).tolist(), draws[rows, 1].tolist()
        kept = len(path)
        base = len(out.tokens)
        seg.tokens[base : base + kept + 1] = drawn  # the kept tokens, then the emitted one in the first slot not kept
        engine.kv.truncate(seg, base + kept + 1)
        seg.written = base + kept  # the emitted token's KV comes with the next step
        going = True
        # Only a stop string, a token that ends the request or its length can finish it.
        on_token, strings, limit = ends.on_token[i], bool(ends.stops[i]), ends.limit[i]
        for e in range(kept + 1):
            out.tokens.append(drawn[e])
            out.logprobs.append(logprobs[e])
            engine.stats.generated_tokens += 1
            if (strings or drawn[e] in on_token or len(out.tokens) >= limit) and not engine._still_active(
                [i], outs, ends
            ):
                engine.kv.truncate(seg, base + e + 1)
                going = False
                break
        self._tally(i, requests, outs, specs, drafters, base, draft, path, verified)
        return going

    def _emit(
        self,
        i: int,
        requests: Sequence[DecodeRequest],
        outs: list[Decoded],
        ends: Ends,
        draft: DraftTree | None,
        where: list[tuple[Segment, int]] | None,
        draw: dict[tuple[int, int], tuple[int, float]],
        specs: Sequence[Speculative | None],
        drafters: dict[Speculative, Drafter],
        copies: list[tuple[int, int]],
    ) -> bool:
        """Append what request ``i`` keeps this step; returns whether it goes on."""
        engine = self.engine
        nodes = len(draft) if draft is not None else 0
        draws = np.array([draw[(i, -1)], *(draw[(i, k)] for k in range(nodes))], dtype=np.float64)
        path = _walk(draft, draws)
        assert where is not None or not path  # a kept draft has places
        sources = [where[k][0].slots[where[k][1]] for k in path] if where is not None else []
        rows = [0, *(k + 1 for k in path)]  # the draw of each token kept, then of the one emitted
        # (token, log-probability, draft slot holding its KV or -1) per token.
        run = zip(draws[rows, 0].astype(np.int64).tolist(), draws[rows, 1].tolist(), [*sources, -1])
        out = outs[i]
        seg = out.segment
        base = len(out.tokens)
        seg.written = len(seg.tokens)  # the tip's KV was written by this step's forward
        kept_kv = 0
        going = True
        for token, lp, src in run:
            engine.kv.append_each([seg], [token])
            out.tokens.append(token)
            out.logprobs.append(lp)
            engine.stats.generated_tokens += 1
            if src >= 0:
                copies.append((src, seg.slots[-1]))
                kept_kv += 1
            if not engine._still_active([i], outs, ends):
                going = False
                break
        seg.written = base + kept_kv
        self._tally(i, requests, outs, specs, drafters, base, draft, path, nodes)
        return going

    def _tally(
        self,
        i: int,
        requests: Sequence[DecodeRequest],
        outs: list[Decoded],
        specs: Sequence[Speculative | None],
        drafters: dict[Speculative, Drafter],
        base: int,
        draft: DraftTree | None,
        path: Sequence[int],
        verified: int,
    ) -> None:
        """Count request ``i``'s first ``verified`` draft nodes and those of them kept (``path``),
        feed its cost model and tell its drafter the tokens appended from ``base`` on."""
        stats = self.engine.stats
        stats.draft_tokens += verified
        stats.accepted_tokens += len(path)
        spec = specs[i]
        if spec is not None:
            if draft is not None and verified:
                on_path = set(path)
                kept = [k in on_path for k in range(verified)]
                self.costs[spec].record_acceptance(draft.scores[:verified], draft.depths()[:verified], kept)
            drafters[spec].accepted(_branch(i, requests, outs), outs[i].tokens[base:])


def _walk(draft: DraftTree | None, draws: np.ndarray) -> list[int]:
    """The draft nodes kept: from the newest token, the child whose token was drawn, as long as
    there is one (``draws`` [j + 1, 2]: row 0 after the newest token, row k + 1 after node k;
    only the first j nodes were verified)."""
    if draft is None:
        return []
    verified = len(draws) - 1
    kids = {(p, t): k for k, (p, t) in enumerate(zip(draft.parents[:verified], draft.tokens[:verified]))}
    path: list[int] = []
    at, row = -1, 0
    while (child := kids.get((at, int(draws[row, 0])))) is not None:
        path.append(child)
        at, row = child, child + 1
    return path


def _branch(i: int, requests: Sequence[DecodeRequest], outs: list[Decoded]) -> Branch:
    return Branch(i, _tip(i, requests, outs), outs[i].tokens, requests[i].sampling, requests[i].seed)


def _tip(i: int, requests: Sequence[DecodeRequest], outs: list[Decoded]) -> Segment:
    """The segment ending in request ``i``'s newest token: its own, or its parent before the first."""
    return outs[i].segment if outs[i].tokens else requests[i].parent


def _draft_segments(kv, tip: Segment, draft: DraftTree, made: list[Segment]) -> list[tuple[Segment, int]]:
    """Put ``draft`` under ``tip`` as unsealed segments (a new one where a node has siblings or
    follows the tip); returns each node's (segment, offset). Segments go into ``made``."""
    count = [0] * (len(draft) + 1)
    for p in draft.parents:
        count[p + 1] += 1
    where: list[tuple[Segment, int]] = []
    for p, token in zip(draft.parents, draft.tokens):
        if p >= 0 and count[p + 1] == 1:
            seg = where[p][0]
        else:
            seg = kv.open_child(tip if p < 0 else where[p][0])
            made.append(seg)
            if p >= 0 and where[p][1] != len(where[p][0].tokens) - 1:
                raise AssertionError("a draft segment must end at the parent it branches from")
        kv.append_each([seg], [token])
        where.append((seg, len(seg.tokens) - 1))
    return where


def _copy_kv(pool, copies: list[tuple[int, int]]) -> None:
    """Copy the KV of every layer from each (source slot, destination slot)."""
    src = torch.tensor([s for s, _ in copies], dtype=torch.long, device=pool.k.device)
    dst = torch.tensor([d for _, d in copies], dtype=torch.long, device=pool.k.device)
    for cache in (pool.k, pool.v):
        flat = cache.view(cache.shape[0], -1, cache.shape[3], cache.shape[4])  # [L, slots, H_kv, D]
        flat[:, dst] = flat[:, src]
