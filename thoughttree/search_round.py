"""One round of a search: the strategy's Step done as batched model calls.

Expansion submits every chosen node at once (``tree.expand``, one ``lm.complete`` for propose
prompts, or one ``lm.tree_logits`` for token-level steps); if a task asks for different
Sampling settings on different nodes, each distinct setting is one call. Evaluation scores
every node of the round in one evaluator call. New children are then checked by the task:
rejected and duplicate ones are pruned (their KV freed), finished ones become terminal or solved.
"""

from __future__ import annotations

import time
from typing import AbstractSet, Any, Hashable, Sequence

from .config import Sampling
from .search_result import Counters, RoundStats
from .strategies.base import Outcome, SearchContext, Step
from .tasks.base import Propose, Sample, TaskError, check_prompt
from .tree import Node, Status, ThoughtTree, derive_seed


class RoundRunner:
    """Does the model work of rounds for one search."""

    def __init__(self, lm: Any, tree: ThoughtTree, ctx: SearchContext) -> None:
        self.lm, self.tree, self.ctx = lm, tree, ctx
        self.task, self.problem = ctx.task, ctx.problem
        self.evaluator = ctx.evaluator

    def run(self, step: Step, max_new_nodes: int | None) -> tuple[Outcome, RoundStats]:
        """Expand, check and evaluate; ``max_new_nodes`` caps the children (None = no cap)."""
        self.evaluator = step.evaluator or self.ctx.evaluator
        before, t0 = Counters.read(self.lm), time.perf_counter()
        expanded, children = self._expand(step, max_new_nodes)
        mid, t1 = Counters.read(self.lm), time.perf_counter()
        todo = [c for kids in children for c in kids if c.value is None and c.alive] if step.evaluate_children else []
        todo += [n for n in step.evaluate if n.alive and all(n is not t for t in todo)]
        self._evaluate(todo, step.evaluations)
        after, t2 = Counters.read(self.lm), time.perf_counter()
        longest = max((len(c.tokens) for kids in children for c in kids), default=0)
        stats = RoundStats(mid - before, after - mid, len(expanded), sum(map(len, children)), len(todo), longest,
                           expand_seconds=t1 - t0, evaluate_seconds=t2 - t1)
        return Outcome(tuple(expanded), tuple(tuple(k) for k in children), tuple(todo)), stats

    # -- expansion ---------------------------------------------------------------------------
    def _expand(self, step: Step, cap: int | None) -> tuple[list[Node], list[list[Node]]]:
        nodes = [n for n in step.expand if n.alive]
        for node in nodes:
            if node.status in (Status.TERMINAL, Status.SOLVED):
                raise TaskError(f"node {node.id} is {node.status.value} and cannot be expanded")
        if cap is not None and step.mode == "top_tokens":
            nodes = nodes[: cap // step.n]
        if not nodes:
            return [], []
        if step.mode == "top_tokens":
            raw = self._top_tokens(nodes, step.n)
        else:
            raw = self._sample(nodes, step.n, cap)
        children = [self._check_children(parent, kids) for parent, kids in zip(nodes, raw)]
        for parent, kids in zip(nodes, children):
            if not kids and not any(c.alive for c in parent.children):
                parent.metadata["rejected"] = "dead end: no valid children"
                self.tree.prune(parent)
        return nodes, children

    def _sample(self, nodes: list[Node], n: int, cap: int | None) -> list[list[Node]]:
        requests = [self.task.request(self.problem, node) for node in nodes]
        groups: dict[tuple[type, Sampling], list[int]] = {}
        for i, req in enumerate(requests):
            if not isinstance(req, (Sample, Propose)) or not isinstance(req.sampling, Sampling):
                raise TaskError(
                    f"task.request returned {req!r} for node {nodes[i].id}; return Sample(sampling) or "
                    "Propose(prompt, sampling)"
                )
            groups.setdefault((type(req), req.sampling), []).append(i)
        out: list[list[Node]] = [[] for _ in nodes]
        for (kind, sampling), idx in groups.items():
            if cap is not None:
                idx = idx[: max(0, cap - sum(map(len, out))) // n] if kind is Sample else idx
            if not idx:
                continue
            group = [nodes[i] for i in idx]
            if kind is Sample:
                self._materialize(group)
                results = self.tree.expand(group, n=n, sampling=sampling)
            else:
                room = None if cap is None else cap - sum(map(len, out))
                results = self._propose(group, [requests[i] for i in idx], n, sampling, room)
            for i, kids in zip(idx, results):
                out[i] = kids
        return out

    def _propose(
        self, nodes: list[Node], requests: list[Any], n: int, sampling: Sampling, room: int | None
    ) -> list[list[Node]]:
        prompts = [check_prompt(r.prompt, f"task.request (Propose) for node {x.id}") for r, x in zip(requests, nodes)]
        seeds = [derive_seed(self.tree.seed, "propose", sampling.seed, x.position, len(x.children), j)
                 for x in nodes for j in range(n)]
        gens = self.lm.complete([p for p in prompts for _ in range(n)], sampling, seeds)
        kept: list[list[tuple[str, dict[str, Any]]]] = []  # per node, the children's texts to add
        for i, node in enumerate(nodes):
            texts = []
            for g in gens[i * n:(i + 1) * n]:
                parts = self.task.split(self.problem, node, g.text)
                if not isinstance(parts, list) or not all(isinstance(p, str) for p in parts):
                    raise TaskError(f"task.split returned {parts!r}; it must return a list of strings")
                # The completion's log-probability is kept as the child's prior (MCTS's PUCT).
                meta = {"proposed": True, "proposal_logprob": g.logprob, "proposal_tokens": len(g.tokens)}
                texts += [(p, meta) for p in parts if p]
            kept.append([])
            seen = self._sibling_keys(node)
            for text, meta in texts:
                if room is not None and room <= 0:
                    break
                if self._rejection(node, text, seen) is not None:
                    continue
                kept[-1].append((text, meta))
                room = None if room is None else room - 1
        tokens = iter(self.lm.encode_batch([text for texts in kept for text, _ in texts], add_bos=False))
        out = []
        for node, texts in zip(nodes, kept):
            kids = [self.tree.add_child(node, next(tokens), text, metadata=dict(meta)) for text, meta in texts]
            if kids and node.status is Status.OPEN:
                node.status = Status.EXPANDED
            out.append(kids)
        return out

    def _top_tokens(self, nodes: list[Node], n: int) -> list[list[Node]]:
        logits = self.lm.tree_logits([x.path_tokens() for x in nodes])  # [len(nodes), vocab]
        top = logits.float().log_softmax(-1).topk(n, dim=-1)
        eos = getattr(self.lm, "eos_token_id", None)
        out = []
        for i, node in enumerate(nodes):
            kids = []
            for lp, tok in zip(top.values[i].tolist(), top.indices[i].tolist()):
                meta = {"finish_reason": "eos" if tok == eos else "length", "token_logprobs": [lp]}
                kids.append(self.tree.add_child(node, [tok], self.lm.decode([tok]), logprob=lp, metadata=meta))
            if node.status is Status.OPEN:
                node.status = Status.EXPANDED
            out.append(kids)
        return out

    def _materialize(self, nodes: Sequence[Node]) -> None:
        """Prefill KV missing on these paths (after a resume or under proposed children), all at once."""
        if any(x.kv is None for node in nodes for x in node.path()):
            self.tree.materialize(nodes)

    # -- checks --------------------------------------------------------------------------------
    def _sibling_keys(self, parent: Node, skip: AbstractSet[int] = frozenset()) -> set[Hashable] | None:
        """The dedupe keys of ``parent``'s live children but those whose id() is in ``skip``
        (None when the task keeps duplicates)."""
        if not getattr(self.task.config, "dedupe", True):
            return None
        return {self.task.dedupe_key(self.problem, parent, c.text) for c in parent.children if c.alive and id(c) not in skip}

    def _rejection(self, parent: Node, text: str, seen: set[Hashable] | None) -> str | None:
        """Why a child ``text`` under ``parent`` is rejected: "invalid", or "duplicate" when its
        dedupe key is in ``seen`` (None: the task keeps duplicates). None when it is kept; its
        key then joins ``seen``."""
        if not self.task.accept(self.problem, parent, text):
            return "invalid"
        if seen is not None:
            key = self.task.dedupe_key(self.problem, parent, text)
            if key in seen:
                return "duplicate"
            seen.add(key)
        return None

    def _check_children(self, parent: Node, kids: list[Node]) -> list[Node]:
        """Prune rejected and duplicate children; mark finished ones; returns the survivors."""
        checking = any(not kid.metadata.get("proposed") for kid in kids)  # proposals were checked as they came
        seen = self._sibling_keys(parent, skip={id(kid) for kid in kids}) if checking else None
        keep = []
        for kid in kids:
            if not kid.metadata.get("proposed"):
                reason = self._rejection(parent, kid.text, seen)
                if reason is not None:
                    kid.metadata["rejected"] = reason
                    self.tree.prune(kid)
                    continue
            keep.append(kid)
            if self.task.is_terminal(self.problem, kid):
                self._finish(kid)
        return keep

    def _finish(self, node: Node) -> None:
        answer = self.task.answer(self.problem, node)
        if answer is not None and not isinstance(answer, str):
            raise TaskError(f"task.answer returned {answer!r}; it must return a string or None")
        node.metadata["answer"] = answer
        verdict = self.task.check(self.problem, answer) if answer is not None else False
        node.status = Status.SOLVED if verdict is True else Status.TERMINAL
        lo, hi = self.evaluator.bounds
        if verdict is not None and all(abs(b) != float("inf") for b in (lo, hi)):
            node.value = hi if verdict else lo

    # -- evaluation ----------------------------------------------------------------------------
    def _evaluate(self, nodes: list[Node], samples: int | None) -> None:
        if not nodes:
            return
        values = self.evaluator.evaluate(self.lm, self.problem, nodes, seed=self.tree.seed, samples=samples)
        if len(values) != len(nodes):
            raise TaskError(f"the evaluator returned {len(values)} values for {len(nodes)} nodes")
        for node, value in zip(nodes, values):
            value = float(value)
            if value != value or abs(value) == float("inf"):
                raise TaskError(f"the evaluator gave node {node.id} the value {value}; values must be finite")
            node.value = value
