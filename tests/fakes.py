"""A scripted, character-level fake model runtime for CPU tests of trees and searches.

``FakeLM`` implements the ``TreeBackend`` protocol plus ``complete``, ``complete_from``,
``tree_logits`` and ``stats`` like ``thoughttree.LM``, but its outputs come from scripts:

- ``children(context, ordinal, seed) -> str``: the continuation sampled under a node whose path
  text (without BOS) is ``context``; ``ordinal`` is the child's index among the node's children.
- ``answers(prompt, seed) -> str``: the completion of a scratch prompt (``complete``) or of a
  node's path plus suffix (``complete_from``).
- ``logits(context) -> {char: logit}``: next-token logits for ``tree_logits`` (EOS is "</s>").
- ``token_logprob(context, char) -> float``: log-probability reported for each generated token.

One character is one token (id = ord(c) + 3; 0 pad, 1 BOS, 2 EOS, code points < 256). A script
output ending in "</s>" ends with the EOS token. Stop strings, ``max_tokens`` and ``ignore_eos``
behave as in ``Sampling``'s docs. As in ``LM``, ``generate`` gives KV to path nodes that lack
it within its first step, and scratch calls free their KV. The counters in ``stats`` model one
batched decode per call: forward steps = the longest generation (+1 for a separate prefill),
attended = sum over rows and steps of the KV tokens read, unique = the distinct KV tokens read
per step (shared prefixes once). Every call is logged in ``calls`` as (method, batch size);
``check_kv(trees)`` asserts that no KV handle leaked.

``ScriptTask`` is a matching test task: thoughts like ``"a;"``, answers like ``"=5;"``, values
from a table of path texts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import torch

from thoughttree.config import Sampling
from thoughttree.tasks import Propose, Sample, Task, TaskConfig, Verifier
from thoughttree.tree import Generation, Node

PAD, BOS, EOS, OFFSET = 0, 1, 2, 3
EOS_TEXT = "</s>"
VOCAB = 256 + OFFSET


def pick(options: Sequence[str], seed: int) -> str:
    """A seed-determined choice, for scripts that should vary with the sample seed."""
    return options[seed % len(options)]


def from_table(table: Mapping[str, Sequence[str]]) -> Callable[[str, int, int], str]:
    """A ``children`` script: ``table[context][ordinal]`` (a clear error for a missing entry)."""

    def children(context: str, ordinal: int, seed: int) -> str:
        if context not in table:
            raise KeyError(f"fake script has no children for context {context!r}")
        options = table[context]
        return options[ordinal % len(options)]

    return children


@dataclass
class FakeStats:
    forward_steps: int = 0
    prefill_tokens: int = 0
    generated_tokens: int = 0
    attended_tokens: int = 0
    unique_tokens: int = 0


class FakeLM:
    eos_token_id = EOS
    vocab_size = VOCAB

    def __init__(
        self,
        children: Callable[[str, int, int], str] | Mapping[str, Sequence[str]] | None = None,
        answers: Callable[[str, int], str] | None = None,
        logits: Callable[[str], Mapping[str, float]] | None = None,
        token_logprob: Callable[[str, str], float] | None = None,
        max_context: int = 4096,
    ) -> None:
        self.children = from_table(children) if isinstance(children, Mapping) else children
        self.answers = answers
        self.logits = logits
        self.token_logprob = token_logprob or (lambda context, ch: -0.1 * (1 + ord(ch[0]) % 5))
        self._max_context = max_context
        self.stats = FakeStats()
        self.calls: list[tuple[str, int]] = []
        self.live: dict[int, int] = {}  # KV handle -> token count
        self._next_handle = 0

    # -- tokens ----------------------------------------------------------------------------
    @property
    def max_context(self) -> int:
        return self._max_context

    def encode(self, text: str, *, add_bos: bool) -> list[int]:
        body = text[: -len(EOS_TEXT)] if text.endswith(EOS_TEXT) else text
        ids = [ord(c) + OFFSET for c in body]
        if any(i >= VOCAB for i in ids):
            raise ValueError(f"FakeLM handles code points < 256 only: {text!r}")
        return ([BOS] if add_bos else []) + ids + ([EOS] if body is not text else [])

    def encode_batch(self, texts: Sequence[str], *, add_bos: bool) -> list[list[int]]:
        return [self.encode(t, add_bos=add_bos) for t in texts]

    def decode(self, tokens: Sequence[int]) -> str:
        return "".join(EOS_TEXT if t == EOS else chr(t - OFFSET) if t >= OFFSET else "" for t in tokens)

    # -- KV ----------------------------------------------------------------------------------
    def _new_kv(self, length: int) -> int:
        self._next_handle += 1
        self.live[self._next_handle] = length
        return self._next_handle

    def release(self, kv: Any) -> None:
        if kv not in self.live:
            raise AssertionError(f"released KV handle {kv} that is not live (double free?)")
        del self.live[kv]

    def materialize(self, nodes: Sequence[Node]) -> None:
        todo: list[Node] = []
        for node in nodes:
            for x in node.path():
                if x.kv is None and all(x is not t for t in todo):
                    todo.append(x)
        self.calls.append(("materialize", len(todo)))
        if todo:
            for x in todo:
                x.kv = self._new_kv(len(x.tokens))
            self.stats.prefill_tokens += sum(len(x.tokens) for x in todo)
            self.stats.forward_steps += 1

    def check_kv(self, trees: Sequence[Any]) -> None:
        """Every live handle is owned by exactly one live node (scratch KV was freed)."""
        owned = [n.kv for tree in trees for n in tree.nodes if n.kv is not None]
        assert sorted(owned) == sorted(self.live), f"KV leak or loss: live {sorted(self.live)}, owned {sorted(owned)}"

    # -- generation --------------------------------------------------------------------------
    def _sample(self, context: str, script_text: str, sampling: Sampling) -> Generation:
        tokens: list[int] = []
        text = ""
        reason = "length"
        for tok in self.encode(script_text, add_bos=False):
            if len(tokens) == sampling.max_tokens:
                break
            if tok == EOS and sampling.ignore_eos:
                continue
            tokens.append(tok)
            text = self.decode(tokens)
            if tok == EOS:
                reason = "eos"
                break
            if tok in sampling.stop_token_ids or any(s in text for s in sampling.stop):
                reason = "stop"
                break
        lps = []
        for i in range(len(tokens)):
            lps.append(float(self.token_logprob(context + self.decode(tokens[:i]), self.decode(tokens[i:i + 1]) or "?")))
        return Generation(tokens, text, sum(lps), lps, reason, None)

    def _account(self, contexts: list[tuple[list[tuple[int, int]], int]], lengths: list[int], prefill: int) -> None:
        """contexts: per row, (shared segments as (key, length), row-private prompt length)."""
        self.stats.prefill_tokens += prefill
        self.stats.generated_tokens += sum(lengths)
        steps = max(lengths, default=0)
        self.stats.forward_steps += steps + (1 if prefill else 0)
        for s in range(steps):
            active = [i for i, n in enumerate(lengths) if n > s]
            segs: dict[int, int] = {}
            for i in active:
                for key, length in contexts[i][0]:
                    segs[key] = length
                self.stats.attended_tokens += sum(length for _, length in contexts[i][0]) + contexts[i][1] + s
            self.stats.unique_tokens += sum(segs.values()) + sum(contexts[i][1] + s for i in active)

    def generate(
        self, nodes: Sequence[Node], samples: Sequence[int], sampling: Sampling, seeds: Sequence[Sequence[int]]
    ) -> list[list[Generation]]:
        if self.children is None:
            raise AssertionError("this FakeLM has no children script")
        # Like thoughttree.LM, KV missing on the paths is prefilled within the decode's first step.
        todo: list[Node] = []
        for node in nodes:
            todo += [x for x in node.path() if x.kv is None and all(x is not t for t in todo)]
        for x in todo:
            x.kv = self._new_kv(len(x.tokens))
        self.stats.prefill_tokens += sum(len(x.tokens) for x in todo)
        self.calls.append(("generate", sum(samples)))
        out, contexts, lengths = [], [], []
        for node, k, node_seeds in zip(nodes, samples, seeds):
            context = node.path_text()
            gens = []
            for j in range(k):
                g = self._sample(context, self.children(context, len(node.children) + j, node_seeds[j]), sampling)
                g = Generation(g.tokens, g.text, g.logprob, g.token_logprobs, g.finish_reason, self._new_kv(len(g.tokens)))
                gens.append(g)
                contexts.append(([(x.id, len(x.tokens)) for x in node.path()], 0))
                lengths.append(len(g.tokens))
            out.append(gens)
        self._account(contexts, lengths, 0)
        return out

    def complete(self, prompts: Sequence[str | list[int]], sampling: Sampling, seeds: Sequence[int]) -> list[Generation]:
        if len(prompts) != len(seeds):
            raise ValueError("complete needs one seed per prompt")
        self.calls.append(("complete", len(prompts)))
        texts = [p if isinstance(p, str) else self.decode(p) for p in prompts]
        # Radix sharing: identical prompts (and common prefixes) are prefilled once.
        prefixes = {t[:i] for t in texts for i in range(1, len(t) + 1)}
        out = [self._sample(t, self._answer(t, s), sampling) for t, s in zip(texts, seeds)]
        self._account([([(hash(t), len(t))], 0) for t in texts], [len(g.tokens) for g in out], len(prefixes))
        return out

    def complete_from(
        self, nodes: Sequence[Node], suffixes: Sequence[str], sampling: Sampling, seeds: Sequence[int]
    ) -> list[Generation]:
        if not len(nodes) == len(suffixes) == len(seeds):
            raise ValueError("complete_from needs one suffix and one seed per node")
        self.materialize([n for i, n in enumerate(nodes) if all(n is not m for m in nodes[:i])])
        self.calls.append(("complete_from", len(nodes)))
        texts = [n.path_text() + s for n, s in zip(nodes, suffixes)]
        out = [self._sample(t, self._answer(t, s), sampling) for t, s in zip(texts, seeds)]
        contexts = [([(x.id, len(x.tokens)) for x in n.path()], len(s)) for n, s in zip(nodes, suffixes)]
        self._account(contexts, [len(g.tokens) for g in out], sum(len(s) for s in suffixes))
        return out

    def _answer(self, prompt: str, seed: int) -> str:
        if self.answers is None:
            raise AssertionError("this FakeLM has no answers script")
        return self.answers(prompt, seed)

    def tree_logits(self, sequences: list[list[int]]) -> torch.Tensor:
        if self.logits is None:
            raise AssertionError("this FakeLM has no logits script")
        self.calls.append(("tree_logits", len(sequences)))
        out = torch.full((len(sequences), VOCAB), -30.0)
        out[:, [PAD, BOS]] = -math.inf
        for i, seq in enumerate(sequences):
            for ch, value in self.logits(self.decode(seq)).items():
                out[i, EOS if ch == EOS_TEXT else ord(ch) + OFFSET] = value
        prefixes = {tuple(s[:i]) for s in sequences for i in range(1, len(s) + 1)}
        self.stats.prefill_tokens += len(prefixes)
        self.stats.forward_steps += 1
        return out


@dataclass(frozen=True)
class ScriptConfig(TaskConfig):
    sampling: Sampling = Sampling(max_tokens=8, temperature=0.0, stop=(";",))


class ScriptTask(Task):
    """A test task: root prompt ``problem + ":"``; thoughts like ``"a;"``; a thought with "=" is an
    answer (``"=5;"`` answers "5"), checked against ``solutions`` when given (else unverifiable).

    ``values`` maps path text below the root to a value (a ``Verifier``), unless ``evaluator`` is
    given; ``propose`` makes children come from ``Propose(propose(node), sampling)``.
    """

    def __init__(
        self,
        values: Mapping[str, float] | None = None,
        evaluator: Any = None,
        solutions: Sequence[str] | None = None,
        config: ScriptConfig | None = None,
        propose: Callable[[Node], str] | None = None,
        terminal: Callable[[Node], bool] | None = None,
    ) -> None:
        self.config = config or ScriptConfig()
        self.values = dict(values or {})
        self._evaluator = evaluator
        self.solutions = solutions
        self.propose = propose
        self.terminal = terminal

    def prompt(self, problem: Any) -> str:
        return f"{problem}:"

    def evaluator(self) -> Any:
        if self._evaluator is not None:
            return self._evaluator
        return Verifier(self.value_of)

    def value_of(self, problem: Any, node: Node) -> float:
        key = node.path_text(include_root=False)
        if key not in self.values:
            raise KeyError(f"test script has no value for path {key!r}")
        return self.values[key]

    def request(self, problem: Any, node: Node) -> Any:
        if self.propose is not None:
            return Propose(self.propose(node), self.config.sampling)
        return Sample(self.config.sampling)

    def is_terminal(self, problem: Any, node: Node) -> bool:
        if self.terminal is not None:
            return self.terminal(node)
        return "=" in node.text

    def answer(self, problem: Any, node: Node) -> str | None:
        if "=" not in node.text:
            return None
        return node.text.split("=", 1)[1].rstrip(";\n").removesuffix(EOS_TEXT)

    def check(self, problem: Any, answer: str) -> bool | None:
        return None if self.solutions is None else answer in self.solutions
