"""Completions remembered for one search: a prompt completed twice under one seed is decoded once.

A look-ahead evaluator (:class:`~thoughttree.tasks.Lookahead`) values a node by completing its
propose prompt; expanding that node later completes the same prompt under the same seeds
(:func:`~thoughttree.tasks.base.proposal_seed`), so the expansion takes the look-ahead's
completions instead of decoding them again, and their tokens are generated once.

Sampled completions are remembered per (prompt, sampling, seed). Distinct completions are the
``n`` most perturbed sequences of a request (:mod:`thoughttree.runtime.distinct`), returned in
that order, so the first ``n`` of a remembered request for ``k >= n`` are what a request for
``n`` under the same seed returns; their threshold becomes the ``n + 1``-th's perturbed value.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from ..config import Sampling
from ..tasks.base import need_method
from ..tree import Generation
from ..tree.backend import inclusion_probability

Key = tuple[Any, Sampling, int]


class RememberedCompletions:
    """``lm`` as one search sees it: ``complete`` and ``complete_distinct`` remember their results;
    every other attribute is the model's own."""

    def __init__(self, lm: Any) -> None:
        self.lm = lm
        self._sampled: dict[Key, Generation] = {}
        self._distinct: dict[Key, tuple[int, list[Generation]]] = {}  # key -> (n asked, samples)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.lm, name)

    def complete(
        self, prompts: Sequence[str | Sequence[int]], sampling: Sampling, seeds: Sequence[int]
    ) -> list[Generation]:
        """One continuation per prompt, as ``lm.complete``; pairs of prompt and seed seen before are not decoded."""
        if len(seeds) != len(prompts):
            raise ValueError(f"need one seed per prompt, got {len(seeds)} seeds for {len(prompts)} prompts")
        keys = [_key(p, sampling, s) for p, s in zip(prompts, seeds)]
        todo = {k: i for i, k in enumerate(keys) if k not in self._sampled}
        if todo:
            fresh = need_method(self.lm, "complete", "proposals")(
                [prompts[i] for i in todo.values()], sampling, [seeds[i] for i in todo.values()]
            )
            self._sampled.update(zip(todo, fresh))
        return [self._sampled[k] for k in keys]

    def complete_distinct(
        self, prompts: Sequence[str | Sequence[int]], n: int, sampling: Sampling, seeds: Sequence[int]
    ) -> list[list[Generation]]:
        """``n`` distinct continuations of each prompt, as ``lm.complete_distinct``; a request for
        at least ``n`` under the same prompt and seed answers it without decoding."""
        if len(seeds) != len(prompts):
            raise ValueError(f"need one seed per prompt, got {len(seeds)} seeds for {len(prompts)} prompts")
        keys = [_key(p, sampling, s) for p, s in zip(prompts, seeds)]
        todo = {k: i for i, k in enumerate(keys) if not self._answers(k, n)}
        if todo:
            fresh = need_method(self.lm, "complete_distinct", "distinct proposals")(
                [prompts[i] for i in todo.values()], n, sampling, [seeds[i] for i in todo.values()]
            )
            for k, group in zip(todo, fresh):
                self._distinct[k] = (n, group)
        return [_first(*self._distinct[k], n) for k in keys]

    def _answers(self, key: Key, n: int) -> bool:
        """Whether the remembered request for ``key`` holds the ``n`` samples a new one would return."""
        hit = self._distinct.get(key)
        if hit is None:
            return False
        asked, group = hit
        return asked >= n or len(group) < asked  # fewer than asked: every sequence there is was taken


def _first(asked: int, group: list[Generation], n: int) -> list[Generation]:
    """The first ``n`` of a request's samples, with the threshold and inclusion of a request for ``n``."""
    if len(group) <= n:
        return group
    kappa = group[n].extra["perturbed"]
    out = []
    for g in group[:n]:
        extra = {**g.extra, "threshold": kappa, "inclusion": inclusion_probability(g.extra["sample_logprob"], kappa)}
        out.append(dataclasses.replace(g, extra=extra))
    return out


def _key(prompt: str | Sequence[int], sampling: Sampling, seed: int) -> Key:
    return (prompt if isinstance(prompt, str) else tuple(prompt), sampling, int(seed))
