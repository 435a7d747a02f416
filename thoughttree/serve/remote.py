"""`RemoteLM`: searches over a model behind an OpenAI-compatible ``/v1/completions`` endpoint.

It offers what strategies, tasks and evaluators call on a local :class:`~thoughttree.runtime.LM`
(``encode``, ``decode``, ``generate``, ``complete``, ``complete_from``, ``tree_logits``,
``materialize``, ``release``, ``max_context``), so a search runs unchanged against vLLM, SGLang,
llama.cpp, a hosted API or ``thoughttree serve``. The KV belongs to the server: ``materialize``
and ``release`` do nothing, and every sample is a request carrying its whole path (servers with
prefix caching keep the shared prefix).

Tokens on nodes. With a local tokenizer (``RemoteConfig.tokenizer``, the server model's own),
prompts go out as token ids and a node holds the token ids the server generated (read from its
log-probabilities with the ``return_tokens_as_token_ids`` extension; else the generated text
encoded locally). Without one, a node holds the UTF-8 bytes of its text and prompts go out as text.

Seeds. Each sample is one request whose ``seed`` is the runtime seed a local search would decode
it with; against ``thoughttree serve`` all samples of one prompt go in one request with
``decode_seeds``, and draw the same tokens as the local model. Other servers honour seeds their
own way (or not at all): runs there are repeatable only as far as the server's sampling is.

Log-probabilities. Generations carry the server's token log-probabilities where it gives them.
``tree_logits`` (the LabelProbs and LogProb evaluators, token-level steps) reads the server's top
``RemoteConfig.top_logprobs`` next tokens, every other token at -inf; a server that gives no
log-probabilities is an error naming those evaluators.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ..config import Sampling
from ..tree import Generation, Node
from .client import Client, RemoteConfig, RemoteError

__all__ = ["RemoteConfig", "RemoteError", "RemoteLM", "RemoteStats"]


class ByteTokens:
    """Text as its UTF-8 bytes, for nodes of a remote model without a local tokenizer."""

    vocab_size = 256
    eos_token_id = None
    chat_template = None

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, tokens: Sequence[int]) -> str:
        return bytes(tokens).decode("utf-8", errors="replace")


@dataclass
class RemoteStats:
    """Counters of the requests sent (the names local runtimes use, where they mean the same)."""

    requests: int = 0
    prefill_tokens: int = 0  # prompt tokens sent, as the server counts them
    generated_tokens: int = 0
    retries: int = 0


@dataclass(frozen=True)
class _Config:
    vocab_size: int


@dataclass(frozen=True)
class _Ask:
    prompt: list[int] | str
    sampling: Sampling
    seeds: tuple[int, ...]
    max_tokens: int
    top: int = 0


class RemoteLM:
    """A model behind an OpenAI-compatible completions endpoint, usable wherever an LM is."""

    def __init__(self, config: RemoteConfig, client: Client | None = None) -> None:
        self.remote = config
        self.client = client or Client(config)
        self.path = f"{config.base_url} ({config.model})"
        self.device = "remote"
        self.stats = RemoteStats()
        listed = self.client.call("GET", "models").get("data") or []
        entry = next((m for m in listed if isinstance(m, dict) and m.get("id") == config.model), None)
        if entry is None:
            names = ", ".join(str(m.get("id")) for m in listed if isinstance(m, dict)) or "none"
            raise RemoteError(f"{config.base_url} does not serve model {config.model!r} (it serves: {names})")
        self.thoughttree_server = entry.get("owned_by") == "thoughttree"
        context = config.max_context or entry.get("max_model_len") or entry.get("context_length")
        if not isinstance(context, int) or context < 2:
            raise RemoteError(
                f"{config.base_url} does not say how long {config.model}'s context is; give it "
                "(--remote-context N, RemoteConfig.max_context)"
            )
        self._context = context
        if config.tokenizer is not None:
            from transformers import AutoTokenizer

            from ..runtime.detokenize import Detokenizer

            self.tokenizer: Any = AutoTokenizer.from_pretrained(config.tokenizer, local_files_only=True)
            self._detokenize = Detokenizer(self.tokenizer)
            self.ids = True
        else:
            self.tokenizer, self.ids = ByteTokens(), False
        vocab = len(self.tokenizer) if self.ids else ByteTokens.vocab_size
        self.config = _Config(vocab)
        self.eos_token_id = getattr(self.tokenizer, "eos_token_id", None)

    def close(self) -> None:
        self.client.close()

    # -- text ------------------------------------------------------------------------------------
    @property
    def max_context(self) -> int:
        return self._context

    def encode(self, text: str, *, add_bos: bool = True) -> list[int]:
        if not self.ids:
            return self.tokenizer.encode(text)
        return list(self.tokenizer(text, add_special_tokens=add_bos, verbose=False)["input_ids"])

    def encode_batch(self, texts: Sequence[str], *, add_bos: bool = True) -> list[list[int]]:
        return [self.encode(t, add_bos=add_bos) for t in texts]

    def decode(self, tokens: Sequence[int]) -> str:
        if not self.ids:
            return self.tokenizer.decode(tokens)
        return self._detokenize(tokens)

    def decode_batch(self, token_lists: Sequence[Sequence[int]]) -> list[str]:
        return [self.decode(t) for t in token_lists]

    # -- tree backend ----------------------------------------------------------------------------
    def materialize(self, nodes: Sequence[Node]) -> None:
        """Nothing: the server holds the KV."""

    def release(self, kv: Any) -> None:
        """Nothing: the server holds the KV."""

    def generate(
        self, nodes: Sequence[Node], samples: Sequence[int], sampling: Sampling, seeds: Sequence[Sequence[int]]
    ) -> list[list[Generation]]:
        asks = [(node.path_tokens(), list(ss[:n])) for node, n, ss in zip(nodes, samples, seeds)]
        gens = iter(self._sample([(p, s) for p, ss in asks for s in ss], sampling))
        return [[next(gens) for _ in range(n)] for n in samples]

    def complete(
        self, prompts: Sequence[str | Sequence[int]], sampling: Sampling, seeds: Sequence[int]
    ) -> list[Generation]:
        """One continuation per prompt (text, encoded with BOS, or token ids)."""
        if len(seeds) != len(prompts):
            raise ValueError(f"need one seed per prompt, got {len(seeds)} seeds for {len(prompts)} prompts")
        token_lists = [self.encode(p, add_bos=True) if isinstance(p, str) else list(p) for p in prompts]
        return self._sample(list(zip(token_lists, seeds)), sampling)

    def complete_from(
        self, nodes: Sequence[Node], suffixes: Sequence[str], sampling: Sampling, seeds: Sequence[int]
    ) -> list[Generation]:
        """One continuation of each node's path followed by its suffix text."""
        if not len(nodes) == len(suffixes) == len(seeds):
            raise ValueError("complete_from needs as many suffixes and seeds as nodes")
        prompts = [n.path_tokens() + (self.encode(s, add_bos=False) if s else []) for n, s in zip(nodes, suffixes)]
        return self._sample(list(zip(prompts, seeds)), sampling)

    def tree_logits(self, sequences: Sequence[Sequence[int]]) -> Any:
        """[len(sequences), vocab] float32: the server's top next-token log-probabilities after
        each sequence, -inf for every other token (a softmax of a row gives the top tokens'
        probabilities, renormalised over them)."""
        import torch

        k = self.remote.top_logprobs
        greedy = Sampling(max_tokens=1, temperature=0.0)
        answers = self.client.map(self._post, [_Ask(self._prompt(list(s)), greedy, (0,), 1, top=k) for s in sequences])
        out = torch.full((len(sequences), self.config.vocab_size), float("-inf"))
        for row, answer in enumerate(answers):
            lp = answer["choices"][0].get("logprobs") or {}
            tops = lp.get("top_logprobs") or []
            if not tops or not tops[0]:
                raise RemoteError(
                    f"{self.remote.base_url} gave no log-probabilities; tree_logits (the LabelProbs and LogProb "
                    "evaluators, token-level search steps) needs them: use sampled evaluators (ValuePrompt, "
                    "--value samples) with this server"
                )
            for name, value in tops[0].items():
                token = self._token_id(name)
                if token is not None and 0 <= token < self.config.vocab_size:
                    out[row, token] = float(value)
        return out

    # -- requests --------------------------------------------------------------------------------
    def _prompt(self, tokens: list[int]) -> list[int] | str:
        return tokens if self.ids else self.tokenizer.decode(tokens)

    def _sample(self, items: list[tuple[list[int], int]], sampling: Sampling) -> list[Generation]:
        """One generation per (prompt tokens, runtime seed), the requests sent concurrently."""
        for tokens, _ in items:
            if len(tokens) >= self._context:
                raise ValueError(
                    f"a prompt of {len(tokens)} tokens leaves no room in the model's context of {self._context}"
                )
        groups: dict[tuple[int, ...], list[int]] = {}
        if self.thoughttree_server:  # one request per distinct prompt, its samples as choices
            for i, (tokens, _) in enumerate(items):
                groups.setdefault(tuple(tokens), []).append(i)
        else:
            groups = {(i,): [i] for i in range(len(items))}
        plans = []
        for members in groups.values():
            tokens = items[members[0]][0]
            budget = min(sampling.max_tokens, self._context - len(tokens))
            plans.append(_Ask(self._prompt(tokens), sampling, tuple(items[i][1] for i in members), budget))
        answers = self.client.map(self._post, plans)
        out: list[Generation | None] = [None] * len(items)
        for members, answer in zip(groups.values(), answers):
            choices = sorted(answer.get("choices") or [], key=lambda c: c.get("index", 0))
            if len(choices) != len(members):
                raise RemoteError(f"asked {self.remote.base_url} for {len(members)} choices, got {len(choices)}")
            for i, choice in zip(members, choices):
                out[i] = self._generation(choice)
        return [g for g in out if g is not None]

    def _post(self, ask: _Ask) -> dict[str, Any]:
        sp = ask.sampling
        body: dict[str, Any] = {
            "model": self.remote.model,
            "prompt": ask.prompt,
            "max_tokens": ask.max_tokens,
            "temperature": sp.temperature,
            "top_p": sp.top_p,
            "n": len(ask.seeds),
            "logprobs": ask.top,
        }
        if sp.stop:
            body["stop"] = list(sp.stop)
        if self.thoughttree_server and len(ask.seeds) > 1:
            body["decode_seeds"] = list(ask.seeds)
        else:
            body["seed"] = ask.seeds[0]
        if self.remote.extensions:
            body.update(return_tokens_as_token_ids=True, include_stop_str_in_output=True)
            if sp.top_k:
                body["top_k"] = sp.top_k
            if sp.min_p:
                body["min_p"] = sp.min_p
            if sp.ignore_eos:
                body["ignore_eos"] = True
            if self.thoughttree_server and len(ask.seeds) == 1:
                body.pop("seed")
                body["decode_seeds"] = list(ask.seeds)
        answer = self.client.call("POST", "completions", body)
        usage = answer.get("usage") or {}
        self.stats.requests += 1
        self.stats.prefill_tokens += int(usage.get("prompt_tokens", 0))
        self.stats.generated_tokens += int(usage.get("completion_tokens", 0))
        self.stats.retries = self.client.retried
        return answer

    def _token_id(self, name: str) -> int | None:
        if name.startswith("token_id:"):
            try:
                return int(name.removeprefix("token_id:"))
            except ValueError:
                return None
        ids = self.encode(name, add_bos=False)
        return ids[0] if len(ids) == 1 else None

    def _generation(self, choice: dict[str, Any]) -> Generation:
        text = choice.get("text") or ""
        lp = choice.get("logprobs") or {}
        names = lp.get("tokens") or []
        ids = [self._token_id(n) for n in names] if self.ids and names else []
        if self.ids and ids and all(t is not None and n.startswith("token_id:") for t, n in zip(ids, names)):
            tokens = [int(t) for t in ids if t is not None]
            text = self.decode(tokens)
            token_lps = [float(v) if v is not None else 0.0 for v in lp.get("token_logprobs") or []]
        else:  # no token ids from the server: the text, re-encoded here
            tokens = self.encode(text, add_bos=False)
            given = lp.get("token_logprobs") or []
            token_lps = [float(v) for v in given] if len(given) == len(tokens) else []
        finish = choice.get("finish_reason") or "stop"
        if finish == "stop" and tokens and self.eos_token_id is not None and tokens[-1] == self.eos_token_id:
            finish = "eos"
        if not tokens:  # a node needs at least one token: an empty answer ends its branch
            tokens, text = ([self.eos_token_id] if self.eos_token_id is not None else [0]), ""
            finish = "eos"
        return Generation(
            tokens=tokens,
            text=text,
            logprob=sum(token_lps),
            token_logprobs=token_lps,
            finish_reason=finish if finish in ("stop", "eos", "length") else "stop",
            kv=None,
        )
