"""The draft-model drafter: a smaller model with the target's tokenizer grows each draft tree.

The draft model keeps its own KV tree in its own pool. Each branch's path is inserted there
radix-style, so branches that share a prefix in the target's tree share it here too, and the
segments of one decode call stay held until the next call has inserted its own paths (a child
expanded right after its parent finds the parent's KV still there). Accepted tokens are
appended to the branch's draft-side segment and get their KV in the next draft forward.

A proposal grows level by level, one draft forward per level for all branches: the ``width``
nodes of highest cumulative draft score at the deepest level are forwarded, and each gets as
children the ``width`` tokens of highest score (EAGLE-2's expansion). A token's score is its
probability under the softmax of the draft's logits perturbed as the target's sampler perturbs
its own for that branch and draw step (temperature, filters and the seeded Gumbel noise:
:func:`~..sampler.perturbed_scores`). So a sampled branch's first draft token is the token
the target's sampler would draw if the draft model's logits were the target's: the draft and
the target share their randomness, and a draft token is kept whenever the two models agree on
the perturbed argmax, not only when the target's draw happens to be the draft's most likely
token. For greedy branches the score is the draft's probability. The draft nodes' KV lives in
temporary segments released before the proposal returns.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch

from ...config import Sampling
from ..kv_pool import KVPoolExhausted
from ..sampler import perturbed_scores
from .drafter import Branch, DraftTree

if TYPE_CHECKING:
    from ..kv_tree import KVTree, Segment
    from ..lm import LM
    from ..model_config import ModelConfig


GREEDY = Sampling(temperature=0.0)  # how a branch whose sampling is not given is drafted


class DraftModel:
    """A :class:`~.drafter.Drafter` running ``lm`` (the draft model) beside the target."""

    def __init__(self, lm: LM, width: int = 2) -> None:
        self.lm, self.width = lm, width
        self._tails: dict[int, Segment] = {}  # branch key -> its growing draft-side segment
        self._held: list[Segment] = []  # the last call's segments, released once the next one holds its own
        # Branches whose path holds a token id the draft model has no embedding for (a target with a
        # larger vocabulary may sample one): they get empty drafts, i.e. plain decoding.
        self._blind: set[int] = set()

    def begin(self, kv: KVTree, branches: Sequence[Branch]) -> None:
        dkv = self.lm.kv
        held = []
        self._blind.clear()
        for b in branches:
            path = [t for s in b.context.path() for t in s.tokens]
            if max(path, default=0) >= self.lm.config.vocab_size:
                self._blind.add(b.key)
                continue
            try:
                base = dkv.insert(None, path)
            except KVPoolExhausted:
                # The draft pool is full: the last call's paths go first, then this branch drafts
                # nothing in this call (the target decodes it plainly).
                self._release_held()
                try:
                    base = dkv.insert(None, path)
                except KVPoolExhausted:
                    self._blind.add(b.key)
                    continue
            held.append(base)
            tail = dkv.open_child(base)
            held.append(tail)
            self._tails[b.key] = tail
        self._release_held()
        self._held = held

    def _release_held(self) -> None:
        for seg in self._held:
            self.lm.kv.release(seg)
        self._held = []

    def propose(self, branches: Sequence[Branch], max_nodes: int, max_depth: int) -> list[DraftTree]:
        dkv, engine = self.lm.kv, self.lm.engine
        drafts = [DraftTree() for _ in branches]
        temp: list[Segment] = []
        # Per branch, the nodes of the deepest level that grow next: (draft node or -1, the
        # draft-side segment ending in its token, its cumulative draft probability).
        frontier: list[list[tuple[int, Segment, float]]] = []
        for b in branches:
            if b.key in self._blind:
                frontier.append([])
                continue
            tail = self._tails[b.key]
            frontier.append([(-1, tail if tail.tokens or tail.parent is None else tail.parent, 1.0)])
        try:
            for depth in range(max_depth):
                rows = [(bi, f) for bi, fs in enumerate(frontier) for f in fs]
                if not rows:
                    break
                logits = engine.forward([(seg, len(seg.tokens) - 1) for _, (_, seg, _) in rows])
                drawn = [branches[bi] for bi, _ in rows]
                scores = perturbed_scores(
                    logits,
                    [b.sampling or GREEDY for b in drawn],
                    [b.seed for b in drawn],
                    [len(b.generated) + depth for b in drawn],
                )
                top_p, top_ids = torch.softmax(scores, dim=-1).topk(self.width, dim=-1)
                probs, ids = top_p.cpu().tolist(), top_ids.cpu().tolist()
                grown: list[list[tuple[int, Segment, float]]] = [[] for _ in branches]
                for r, (bi, (node, seg, score)) in enumerate(rows):
                    for p, t in zip(probs[r], ids[r]):
                        if len(drafts[bi]) < max_nodes:
                            grown[bi].append((drafts[bi].add(node, t, score * p), seg, score * p))
                frontier = []
                for bi, kids in enumerate(grown):
                    level = []
                    for k, parent_seg, score in sorted(kids, key=lambda x: -x[2])[: self.width]:
                        seg = dkv.open_child(parent_seg)
                        temp.append(seg)
                        dkv.append_each([seg], [drafts[bi].tokens[k]])
                        level.append((k, seg, score))
                    frontier.append(level)
        except KVPoolExhausted:  # the draft pool is full: what was drafted so far still serves
            pass
        finally:
            for seg in reversed(temp):
                dkv.release(seg)
        return drafts

    def accepted(self, branch: Branch, tokens: Sequence[int]) -> None:
        if branch.key in self._blind or max(tokens, default=0) >= self.lm.config.vocab_size:
            self._blind.add(branch.key)
            return
        try:
            self.lm.kv.extend(self._tails[branch.key], tokens)
        except KVPoolExhausted:  # the draft pool is full: this branch drafts no more in this call
            self._blind.add(branch.key)

    def end(self) -> None:
        self._tails.clear()
        self._blind.clear()


def check_same_tokenizer(target: Any, draft: Any, target_path: str, draft_path: str) -> None:
    """ValueError naming both models when their tokenizers map text to different ids."""
    if target.get_vocab() != draft.get_vocab():
        raise ValueError(
            f"the draft model {draft_path} has a different tokenizer from the target {target_path}; "
            "a draft model must share the target's tokenizer (the same vocabulary and ids)"
        )


def draft_loader(
    tokenizer: Any, cfg: ModelConfig, device: torch.device, target_path: str
) -> Callable[[str], DraftModel]:
    """A function loading a draft model from a path onto ``device``, checked against the target."""

    def load(path: str) -> DraftModel:
        from ..lm import LM

        draft = LM.from_pretrained(Path(path), device=device)
        check_same_tokenizer(tokenizer, draft.tokenizer, target_path, path)
        if draft.config.vocab_size > cfg.vocab_size:
            raise ValueError(
                f"the draft model {path} has a vocabulary of {draft.config.vocab_size}, larger than the "
                f"target {target_path}'s {cfg.vocab_size}"
            )
        return DraftModel(draft)

    return load
