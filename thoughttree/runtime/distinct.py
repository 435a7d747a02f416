"""Distinct continuations: sampling whole sequences without replacement (stochastic beam search).

Each request asks for ``n`` distinct continuations of one parent segment. They are the ``n``
sequences with the largest Gumbel-perturbed log-probabilities under the sampling distribution
(temperature and filters applied per token), found exactly by a beam search over the token trie
that perturbs each prefix with the maximum of its completions' perturbed values (Kool, van Hoof
and Welling, 2019): a child's perturbed value is a Gumbel draw around its log-probability
conditioned on the largest among its siblings being its parent's. The search keeps ``n + 1``
candidates per request; the last one's perturbed value is the threshold ``kappa`` from which
each sample's inclusion probability given the threshold, ``1 - exp(-exp(phi - kappa))``, is
computed (the weights of the priority-sampling estimator).

Every beam of every request runs in one engine forward per step. A beam's noise depends only
on the request's seed and its own tokens, so the samples depend on nothing else in the batch.
A thought ends exactly where plain sampling would end it: stop tokens, EOS, stop strings and
the length limit. With temperature 0 the perturbation is dropped: the search is a beam search
for the ``n`` most probable continuations.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch

from ..config import Sampling
from ..kernels.reference import uniform_noise
from ..tree import Generation, Node
from ..tree.backend import inclusion_probability
from .decode_requests import DecodeRequest, Ends
from .kv_tree import Segment
from .sampler import _filter

if TYPE_CHECKING:
    from .engine import Engine
    from .lm import LM


@dataclass(frozen=True)
class DistinctRequest:
    """``n`` distinct continuations of ``parent`` under ``sampling``, seeded by ``seed``."""

    parent: Segment
    n: int
    sampling: Sampling
    seed: int


@dataclass
class DistinctDecoded:
    """One sampled continuation; ``segment`` is its KV tail (the caller owns one reference).

    ``sample_logprob`` is its log-probability under the sampling distribution, ``perturbed`` its
    Gumbel-perturbed value, ``threshold`` the request's ``kappa`` (-inf when the output space had
    no more than ``n`` sequences: every one of them was taken).
    """

    segment: Segment
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)  # per token, temperature 1, unfiltered
    text: str = ""
    finish_reason: str = ""
    sample_logprob: float = 0.0
    perturbed: float = 0.0
    threshold: float = -math.inf

    @property
    def inclusion(self) -> float:
        """Probability that a sequence of this log-probability is among the samples, given the threshold."""
        return inclusion_probability(self.sample_logprob, self.threshold)


def child_key(key: int, token: int) -> int:
    """The noise key of a beam extended by ``token`` (a 63-bit hash of the parent's key and the token)."""
    digest = hashlib.blake2b(key.to_bytes(8, "little") + token.to_bytes(8, "little"), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def root_gumbel(key: int) -> float:
    """The perturbed value of the empty sequence: a standard Gumbel drawn from the request's key
    (kept unconditioned so that the threshold gives unbiased inclusion probabilities)."""
    u = uniform_noise(torch.tensor([key], dtype=torch.int64), torch.tensor([-1], dtype=torch.int64), 1)
    return float(-torch.log(-torch.log(u[0, 0].double())))


def conditioned_gumbels(phi: torch.Tensor, noise: torch.Tensor, parent: torch.Tensor) -> torch.Tensor:
    """Perturbed values of every child of each row, their maximum set to the row's ``parent`` value.

    phi: [R, V] children's log-probabilities (-inf outside the support); noise: [R, V] uniform in
    (0, 1); parent: [R] the parents' perturbed values. Returns [R, V] (-inf outside the support).
    """
    g = phi - torch.log(-torch.log(noise))  # [R, V] unconditioned Gumbels around phi
    top = g.max(dim=-1, keepdim=True).values  # [R, 1]
    t = parent[:, None]
    # -log(exp(-t) - exp(-top) + exp(-g)) in a stable form: v = t - g + log(1 - exp(g - top)).
    gap = (g - top).clamp(max=0.0)
    log1mexp = torch.where(gap > -0.6931, torch.log(-torch.expm1(gap)), torch.log1p(-torch.exp(gap)))
    v = t - g + log1mexp
    out = t - v.clamp(min=0.0) - torch.log1p(torch.exp(-v.abs()))
    return torch.where(torch.isfinite(phi), out, torch.full_like(out, -math.inf))


@dataclass
class _Beam:
    group: int
    seg: Segment  # its newest token is the last of seg (the request's parent for the empty beam)
    own: bool  # holds a reference on seg
    tokens: list[int]
    logprobs: list[float]
    phi: float
    perturbed: float
    key: int
    reason: str = ""


@dataclass
class _Child:
    beam: _Beam
    token: int
    phi: float
    perturbed: float
    logprob: float


def _scores(logits: torch.Tensor, params: Sequence[Sampling]) -> torch.Tensor:
    """[R, V] log-probabilities of the sampling distribution (temperature 1 for greedy rows)."""
    dev = logits.device
    temp = torch.tensor([p.temperature if p.temperature > 0 else 1.0 for p in params], device=dev)
    scaled = logits / temp[:, None]
    if any(p.top_k > 0 or p.top_p < 1 or p.min_p > 0 for p in params):
        scaled = _filter(scaled, params)
    return scaled.log_softmax(dim=-1)


class _Search:
    """The beams of one ``decode_distinct`` call and the KV they hold."""

    def __init__(self, engine: Engine, requests: Sequence[DistinctRequest]) -> None:
        self.engine, self.requests = engine, list(requests)
        self.ends = Ends(
            [DecodeRequest(r.parent, r.sampling, r.seed) for r in requests], engine.eos, engine.max_context
        )
        keys = [int(r.seed) & ((1 << 63) - 1) for r in requests]
        self.groups: list[list[_Beam]] = [
            [_Beam(g, r.parent, False, [], [], 0.0, root_gumbel(key), key)]
            for g, (r, key) in enumerate(zip(requests, keys))
        ]

    def expanding(self) -> list[_Beam]:
        """Open beams among each request's ``n`` best (the candidate after them waits)."""
        return [b for g, r in zip(self.groups, self.requests) for b in g[: r.n] if not b.reason]

    def step(self, beams: list[_Beam]) -> None:
        """One forward over ``beams``; each request keeps its ``n + 1`` best candidates."""
        logits = self.engine.forward([(b.seg, len(b.seg.tokens) - 1) for b in beams])
        params = [self.requests[b.group].sampling for b in beams]
        dev = logits.device
        # float64: sequence log-probabilities and perturbed values add up over a thought's tokens
        phi = torch.tensor([b.phi for b in beams], device=dev, dtype=torch.float64)[:, None]
        phi = phi + _scores(logits, params).double()  # [R, V]
        keys = torch.tensor([b.key for b in beams], device=dev, dtype=torch.int64)
        steps = torch.tensor([len(b.tokens) for b in beams], device=dev, dtype=torch.int64)
        parent = torch.tensor([b.perturbed for b in beams], device=dev, dtype=torch.float64)
        perturbed = conditioned_gumbels(phi, uniform_noise(keys, steps, logits.shape[1]).double(), parent)
        greedy = torch.tensor([p.temperature == 0 for p in params], device=dev)
        perturbed = torch.where(greedy[:, None], phi, perturbed)
        width = min(max(self.requests[b.group].n for b in beams) + 1, logits.shape[1])
        top = perturbed.topk(width, dim=-1)
        ids = top.indices
        raw = logits.log_softmax(dim=-1).gather(1, ids)
        host = torch.stack([ids.double(), top.values, phi.gather(1, ids), raw.double()]).cpu().numpy()  # [4, R, W]
        rooms = np.array([self.requests[b.group].n + 1 for b in beams])
        values = np.where(np.arange(width)[None, :] < rooms[:, None], host[1], -math.inf)  # a beam's n + 1 best
        expanded = {id(b) for b in beams}
        grown: list[tuple[_Beam, list[_Child]]] = []
        first = 0  # the expanding beams of each request are consecutive in ``beams``
        for g, r in enumerate(self.requests):
            count = 0
            while first + count < len(beams) and beams[first + count].group == g:
                count += 1
            rows = slice(first, first + count)
            waiting = [b for b in self.groups[g] if id(b) not in expanded]
            # Candidates in the order a stable sort breaks ties by: waiting beams, then each beam's children.
            ranked_values = np.concatenate([[b.perturbed for b in waiting], values[rows].reshape(-1)])
            order = np.argsort(-ranked_values, kind="stable")
            order = order[ranked_values[order] > -math.inf][: r.n + 1]
            kept_beams: list[_Beam] = []
            by_beam: dict[int, list[_Child]] = {}
            for c in order.tolist():
                if c < len(waiting):
                    kept_beams.append(waiting[c])
                    continue
                i, j = divmod(c - len(waiting), width)
                beam = beams[first + i]
                row = first + i
                child = _Child(
                    beam, int(host[0, row, j]), float(host[2, row, j]), float(values[row, j]), float(host[3, row, j])
                )
                by_beam.setdefault(id(beam), []).append(child)
            kept_ids = {id(b) for b in kept_beams}
            for b in waiting:
                if id(b) not in kept_ids:
                    self._drop(b)
            for b in self.groups[g]:
                if id(b) in expanded:
                    grown.append((b, by_beam.get(id(b), [])))
            self.groups[g] = kept_beams  # children join below, then re-sorted
            first += count
        self._grow(grown)
        for g in range(len(self.groups)):
            self.groups[g].sort(key=lambda b: -b.perturbed)

    def _grow(self, grown: list[tuple[_Beam, list[_Child]]]) -> None:
        """Give kept children their KV segments (in place for a beam's only child) and their tokens."""
        kv = self.engine.kv
        segs: list[Segment] = []
        tokens: list[int] = []
        fresh: list[_Beam] = []
        for beam, kids in grown:
            if not kids:
                self._drop(beam)
                continue
            in_place = beam.own and len(kids) == 1 and not beam.seg.sealed
            if beam.own and not in_place:
                beam.seg.sealed = True
            for c in kids:
                seg = beam.seg if in_place else kv.open_child(beam.seg)
                segs.append(seg)
                tokens.append(c.token)
                child = _Beam(
                    beam.group,
                    seg,
                    True,
                    beam.tokens + [c.token],
                    beam.logprobs + [c.logprob],
                    c.phi,
                    c.perturbed,
                    child_key(beam.key, c.token),
                )
                fresh.append(child)
                self.groups[beam.group].append(child)
            if beam.own and not in_place:
                kv.release(beam.seg)  # its children hold it now
        kv.append_each(segs, tokens)
        self.engine.stats.generated_tokens += len(segs)
        self._finish(fresh)

    def _finish(self, beams: list[_Beam]) -> None:
        """Set the finish reason of beams whose newest token ends them, as plain decoding would."""
        ends = self.ends
        by_stops: dict[tuple[str, ...], list[_Beam]] = {}
        for b in beams:
            reason = ends.on_token[b.group].get(b.tokens[-1])
            if reason is not None:
                b.reason = reason
            elif ends.stops[b.group]:
                by_stops.setdefault(ends.stops[b.group], []).append(b)
        for strings, group in by_stops.items():
            for b, hit in zip(group, self.engine.stops.hits(strings, [b.tokens for b in group])):
                if hit:
                    b.reason = "stop"
        for b in beams:
            if not b.reason and len(b.tokens) >= ends.limit[b.group]:
                b.reason = "length"

    def _drop(self, beam: _Beam) -> None:
        if beam.own:
            self.engine.kv.release(beam.seg)
            beam.own = False

    def results(self) -> list[list[DistinctDecoded]]:
        out = []
        for g, r in zip(self.groups, self.requests):
            kappa = g[r.n].perturbed if len(g) > r.n else -math.inf
            for b in g[r.n :]:
                self._drop(b)
            del g[r.n :]
            outs = []
            for b in g:
                b.seg.sealed = True
                b.own = False  # handed to the caller
                outs.append(
                    DistinctDecoded(
                        b.seg,
                        b.tokens,
                        b.logprobs,
                        self.engine.detokenize(b.tokens),
                        b.reason,
                        b.phi,
                        b.perturbed,
                        kappa,
                    )
                )
            out.append(outs)
        return out

    def release(self) -> None:
        for g in self.groups:
            for b in g:
                self._drop(b)


def decode_distinct(engine: Engine, requests: Sequence[DistinctRequest]) -> list[list[DistinctDecoded]]:
    """Up to ``n`` distinct continuations per request (fewer only when the sampling distribution
    has fewer sequences), most perturbed first; every beam of every request in one forward per
    step. On failure nothing is left allocated."""
    for r in requests:
        if r.n < 1:
            raise ValueError(f"a distinct request needs n >= 1, got {r.n}")
        if r.parent.end >= engine.max_context:
            raise ValueError(
                f"a path of {r.parent.end} tokens leaves no room in the model's context of {engine.max_context}"
            )
    search = _Search(engine, requests)
    try:
        while beams := search.expanding():
            search.step(beams)
        return search.results()
    except BaseException:
        search.release()
        raise


def generation(out: DistinctDecoded) -> Generation:
    """A :class:`Generation` of ``out`` whose ``extra`` carries its sampling-without-replacement numbers."""
    extra = {
        "sample_logprob": out.sample_logprob,
        "perturbed": out.perturbed,
        "threshold": out.threshold,
        "inclusion": out.inclusion,
    }
    return Generation(
        tokens=out.tokens,
        text=out.text,
        logprob=float(sum(out.logprobs)),
        token_logprobs=out.logprobs,
        finish_reason=out.finish_reason,
        kv=out.segment,
        extra=extra,
    )


def generate_distinct(
    lm: LM, nodes: Sequence[Node], samples: Sequence[int], sampling: Sampling, seeds: Sequence[int]
) -> list[list[Generation]]:
    """``samples[i]`` distinct continuations of ``nodes[i]`` (one seed per node); the caller owns their KV."""
    made = lm._attach(nodes)
    try:
        requests = [DistinctRequest(x.kv, n, sampling, s) for x, n, s in zip(nodes, samples, seeds)]
        outs = decode_distinct(lm.engine, requests)
    except BaseException:  # the call fails whole: the KV it gave the nodes goes too
        lm._detach(made)
        raise
    return [[generation(o) for o in group] for group in outs]


def complete_distinct(
    lm: LM, prompts: Sequence[str | Sequence[int]], n: int, sampling: Sampling, seeds: Sequence[int]
) -> list[list[Generation]]:
    """``n`` distinct continuations of each prompt (fresh roots, shared prefixes stored once); KV freed after."""
    if len(seeds) != len(prompts):
        raise ValueError(f"need one seed per prompt, got {len(seeds)} seeds for {len(prompts)} prompts")
    tails: list[Segment] = []
    outs: list[list[DistinctDecoded]] = []
    try:
        for i, tokens in enumerate(lm._encode_each(prompts, add_bos=True)):
            tails.append(lm.kv.insert(None, lm._check_tokens(tokens, f"prompt {i}")))
        outs = decode_distinct(lm.engine, [DistinctRequest(t, n, sampling, s) for t, s in zip(tails, seeds)])
        return [[dataclasses.replace(generation(o), kv=None) for o in group] for group in outs]
    finally:
        for group in outs:
            for o in group:
                lm.kv.release(o.segment)
        for t in tails:
            lm.kv.release(t)
