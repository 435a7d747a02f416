"""`LM`: a Hugging Face checkpoint on the tree runtime — the object users and searches hold."""

from __future__ import annotations

import weakref
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from ..config import RuntimeConfig, Sampling, Speculative
from ..tree import Generation, Node, ThoughtTree
from .checkpoint import load_transformer
from .detokenize import Detokenizer
from .distinct import complete_distinct, generate_distinct
from .decode_requests import DecodeRequest, Decoded
from .engine import Engine, on_device
from .engine_stats import EngineStats
from .kv_tree import KVTree, Segment
from .model import Transformer
from .model_config import ModelConfig, ModelLoadError
from .load_options import check_attention, make_pool, resolve_device, resolve_dtype
from .parallel import TensorParallel, check_divisible, local_device
from .speculative.draft_model import draft_loader


class LM:
    """A causal LM whose KV lives in one shared, paged tree cache.

    Load with :meth:`from_pretrained`; grow trees with :class:`ThoughtTree`; score many
    sequences that share prefixes with :meth:`tree_logits`.
    """

    def __init__(self, model: Transformer, tokenizer: Any, runtime: RuntimeConfig, path: str = "") -> None:
        cfg = model.cfg
        self.model, self.tokenizer, self.runtime, self.path = model, tokenizer, runtime, path
        model.few_rows, model.epilogues = runtime.few_row_projections, runtime.projection_epilogues
        self._detokenize = Detokenizer(tokenizer)
        self.device = model.device
        # A tensor-parallel rank keeps the KV of its own heads only.
        pool = make_pool(cfg, runtime, model.dtype, model.device, model.num_kv_heads, model.num_heads)
        self.kv = KVTree(pool)
        self._trees: weakref.WeakSet[ThoughtTree] = weakref.WeakSet()  # every live tree given KV here
        attention = runtime.attention
        check_attention(attention, model.device, model.dtype)
        if attention == "auto":
            half = model.dtype in (torch.float16, torch.bfloat16)  # the kernels take 16-bit KV
            attention = "deft" if model.device.type == "cuda" and half else "reference"
        eos = set(cfg.eos_token_ids)
        if getattr(tokenizer, "eos_token_id", None) is not None:
            eos.add(int(tokenizer.eos_token_id))
        self.eos_token_ids = tuple(sorted(eos))
        self.engine = Engine(
            # The tokenizer's decoder, not this LM's bound methods: the engine must not hold the
            # LM, so that a dropped LM (and its KV pool and graphs) is freed at once.
            model, self.kv, attention=attention, detokenize=self._detokenize,
            cleans_up_spaces=self._detokenize.cleans_up_spaces,
            eos_token_ids=self.eos_token_ids, max_context=cfg.max_context, runtime=runtime,
        )
        self.engine.speculator.load_draft = draft_loader(tokenizer, cfg, model.device, path)

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | str | None = None,
        runtime: RuntimeConfig | None = None,
        tensor_parallel: int = 1,
    ) -> LM:
        """Load a local Hugging Face directory (config.json, *.safetensors, tokenizer); never downloads.

        device defaults to CUDA when available; dtype (float32, float16 or bfloat16) to the
        checkpoint's on CUDA and float32 on CPU. A device, dtype or attention backend that cannot
        run here raises ValueError before anything loads.
        ``tensor_parallel=N`` splits the model over the N ranks of a ``torchrun --nproc-per-node N``
        launch (each on its own GPU, ``cuda:LOCAL_RANK``); every rank must run the same program.
        Weights go to the device as they are read, so the host needs no room for the model
        (:mod:`.checkpoint`). Raises ModelLoadError for a missing or damaged file; a config that
        disagrees with the weights, a missing tensor or weights larger than the GPU's free
        memory are found before any weight is copied.
        """
        from transformers import AutoTokenizer

        cfg = ModelConfig.from_dir(path)
        dev = resolve_device(device)
        dt = resolve_dtype(dtype, cfg, dev)
        rc = runtime or RuntimeConfig()
        check_attention(rc.attention, dev, dt)
        tp = None
        if tensor_parallel != 1:
            check_divisible(cfg, tensor_parallel)
            dev = local_device(dev)
            tp = TensorParallel.join(tensor_parallel, dev, timeout_s=rc.collective_timeout_s)
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        except Exception as exc:  # transformers raises several types for missing/broken tokenizers
            # transformers reads config.json with the tokenizer: a config it refuses fails here too.
            have = sorted(p.name for p in Path(path).glob("tokenizer*"))
            fix = (f"check {', '.join(have)} and config.json (transformers reads both)" if have
                   else "add tokenizer.json or the tokenizer files")
            raise ModelLoadError(f"cannot load the tokenizer from {path} ({exc}); {fix}") from exc
        if len(tokenizer) > cfg.vocab_size:
            raise ModelLoadError(f"the tokenizer of {path} has {len(tokenizer)} tokens, more than the model's "
                                 f"vocab_size={cfg.vocab_size} (config.json): ids from {cfg.vocab_size} on have no "
                                 "embedding; use the tokenizer the model was trained with")
        with on_device(dev):  # staging streams and the KV pool on the model's GPU, whichever is current
            model = load_transformer(path, cfg, device=dev, dtype=dt, narrow=tp.narrow(cfg) if tp else None)
            if tp is not None:
                tp.attach(model)
            return cls(model, tokenizer, rc, str(path))

    # -- text ------------------------------------------------------------------------------------
    @property
    def config(self) -> ModelConfig:
        return self.model.cfg

    @property
    def max_context(self) -> int:
        return self.model.cfg.max_context

    @property
    def eos_token_id(self) -> int | None:
        return self.eos_token_ids[0] if self.eos_token_ids else None

    @property
    def stats(self) -> EngineStats:
        return self.engine.stats

    @property
    def speculative(self) -> Speculative | None:
        """The speculation every decode uses unless its Sampling names one: None or "off" (plain),
        "lookup", "draft:PATH", "auto" or a :class:`Speculative`; the output is the same either way."""
        return self.engine.speculator.default

    @speculative.setter
    def speculative(self, value: Speculative | str | None) -> None:
        self.engine.speculator.default = Speculative.parse(value)

    def encode(self, text: str, *, add_bos: bool = True) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=add_bos,
                                   verbose=False)["input_ids"])  # lengths: _check_context

    def encode_batch(self, texts: Sequence[str], *, add_bos: bool = True) -> list[list[int]]:
        """:meth:`encode` of many texts in one tokenizer call (about half the cost per text)."""
        if not texts:
            return []
        return [list(ids) for ids in self.tokenizer(list(texts), add_special_tokens=add_bos,
                                                    verbose=False)["input_ids"]]

    def decode(self, tokens: Sequence[int]) -> str:
        return self._detokenize(tokens)

    def decode_batch(self, token_lists: Sequence[Sequence[int]]) -> list[str]:
        """:meth:`decode` of many token lists (one call into the Rust tokenizer when there is one)."""
        return self._detokenize.batch(token_lists)

    @staticmethod
    def _token_list(tokens: Any, what: str) -> np.ndarray:
        """A caller's token ids as an integer array: a list, tuple, array or tensor of whole numbers."""
        given = tokens.detach().cpu().numpy() if isinstance(tokens, torch.Tensor) else tokens
        if not isinstance(given, (list, tuple, np.ndarray)):
            raise TypeError(f"{what} is {type(given).__name__}, not a list of token ids; pass a list of "
                            "token-id lists, e.g. [[1, 5, 6], [1, 5, 7]]")
        ids = np.asarray(given)
        if ids.size and (ids.ndim != 1 or ids.dtype.kind not in "iu" or (isinstance(given, (list, tuple))
                                                                          and bool in map(type, given))):
            raise TypeError(f"{what} must hold token ids (whole numbers), got {given!r:.80}")
        return ids

    def _check_tokens(self, tokens: Sequence[int] | np.ndarray, what: str) -> list[int]:
        ids = np.fromiter(tokens, dtype=np.int64, count=len(tokens))  # one pass in C (paths run to 100k tokens)
        if not len(ids):
            raise ValueError(f"{what} is empty; give at least one token")
        if len(ids) > self.max_context:
            raise ValueError(
                f"{what} has {len(ids)} tokens, longer than the model's context of {self.max_context}; shorten it"
            )
        bad = ids[(ids < 0) | (ids >= self.config.vocab_size)]
        if len(bad):
            raise ValueError(f"{what} has token ids outside the vocabulary of {self.config.vocab_size}: "
                             f"{bad[:5].tolist()}")
        return ids.tolist()

    # -- tree backend ----------------------------------------------------------------------------
    def _attach(self, nodes: Sequence[Node]) -> list[Node]:
        """Give nodes on these paths KV segments (slots only; the next forward computes them)."""
        todo: dict[int, Node] = {}
        for node in nodes:
            self._trees.add(node.tree)
            for x in node.path():
                if x.kv is None:
                    todo[id(x)] = x
        made: list[Node] = []
        try:
            for x in sorted(todo.values(), key=lambda n: n.id):  # parents have smaller ids
                parent = x.parent.kv if x.parent is not None else None
                x.kv = self.kv.insert(parent, self._check_tokens(x.tokens, f"node {x.id}"))
                made.append(x)
        except BaseException:
            self._detach(made)
            raise
        return made

    def _detach(self, made: list[Node]) -> None:
        """Undo :meth:`_attach` for the nodes it gave KV."""
        for x in reversed(made):
            self.kv.release(x.kv)
            x.kv = None

    def materialize(self, nodes: Sequence[Node]) -> None:
        made = self._attach(nodes)
        try:
            self.engine.forward([], extra=[x.kv for x in nodes])
        except BaseException:
            self._detach(made)
            raise

    def generate(
        self, nodes: Sequence[Node], samples: Sequence[int], sampling: Sampling, seeds: Sequence[Sequence[int]]
    ) -> list[list[Generation]]:
        made = self._attach(nodes)
        requests = [
            DecodeRequest(node.kv, sampling, seed) for node, n, ss in zip(nodes, samples, seeds) for seed in ss[:n]
        ]
        try:
            outs = iter(self.engine.decode(requests))
        except BaseException:  # the call fails whole: the KV it gave the nodes goes too
            self._detach(made)
            raise
        return [[self._generation(next(outs), keep=True) for _ in range(n)] for n in samples]

    def generate_distinct(
        self, nodes: Sequence[Node], samples: Sequence[int], sampling: Sampling, seeds: Sequence[int]
    ) -> list[list[Generation]]:
        """Distinct continuations of each node, sampled without replacement (:mod:`.distinct`)."""
        return generate_distinct(self, nodes, samples, sampling, seeds)

    def complete_distinct(
        self, prompts: Sequence[str | Sequence[int]], n: int, sampling: Sampling, seeds: Sequence[int]
    ) -> list[list[Generation]]:
        """``n`` distinct continuations of each prompt (one seed per prompt), all batched; KV freed after."""
        return complete_distinct(self, prompts, n, sampling, seeds)

    def release(self, kv: Any) -> None:
        self.kv.release(kv)

    def _generation(self, out: Decoded, *, keep: bool) -> Generation:
        if not keep:
            self.kv.release(out.segment)
        return Generation(
            tokens=out.tokens,
            text=out.text,
            logprob=float(sum(out.logprobs)),
            token_logprobs=out.logprobs,
            finish_reason=out.finish_reason,
            kv=out.segment if keep else None,
        )

    # -- scratch work ----------------------------------------------------------------------------
    def complete(
        self, prompts: Sequence[str | Sequence[int]], sampling: Sampling, seeds: Sequence[int]
    ) -> list[Generation]:
        """One continuation per prompt (fresh roots; shared prefixes stored once), all batched; KV freed after."""
        if len(seeds) != len(prompts):
            raise ValueError(f"need one seed per prompt, got {len(seeds)} seeds for {len(prompts)} prompts")
        token_lists = self._encode_each(prompts, add_bos=True)
        return self._scratch(
            [(None, self._check_tokens(t, f"prompt {i}")) for i, t in enumerate(token_lists)], sampling, seeds
        )

    def complete_from(
        self, nodes: Sequence[Node], suffixes: Sequence[str], sampling: Sampling, seeds: Sequence[int]
    ) -> list[Generation]:
        """One continuation of each node's path followed by its suffix text, all batched; KV freed after."""
        if not len(nodes) == len(suffixes) == len(seeds):
            raise ValueError("complete_from needs as many suffixes and seeds as nodes")
        made = self._attach(nodes)
        try:
            items = [(n.kv, tokens) for n, tokens in zip(nodes, self._encode_each(suffixes, add_bos=False))]
            return self._scratch(items, sampling, seeds)
        except BaseException:
            self._detach(made)
            raise

    def _encode_each(self, texts: Sequence[str | Sequence[int]], *, add_bos: bool) -> list[list[int]]:
        """Each text's tokens (token sequences as given), the distinct texts encoded in one call."""
        unique = list(dict.fromkeys(t for t in texts if isinstance(t, str)))
        encoded = dict(zip(unique, self.encode_batch(unique, add_bos=add_bos)))
        return [list(encoded[t]) if isinstance(t, str) else list(t) for t in texts]

    def _scratch(
        self, items: list[tuple[Segment | None, list[int]]], sampling: Sampling, seeds: Sequence[int]
    ) -> list[Generation]:
        tails: list[Segment] = []
        try:
            for parent, tokens in items:
                if tokens:
                    tails.append(self.kv.insert(parent, tokens))
                else:
                    assert parent is not None  # an empty continuation has a parent to decode from
                    self.kv.retain(parent)
                    tails.append(parent)
            outs = self.engine.decode([DecodeRequest(t, sampling, s) for t, s in zip(tails, seeds)])
            return [self._generation(o, keep=False) for o in outs]
        finally:
            for t in tails:
                self.kv.release(t)

    def tree_logits(self, sequences: Sequence[Sequence[int]]) -> torch.Tensor:
        """[len(sequences), vocab] float32 logits at each sequence's last position; shared prefixes once."""
        checked = [self._token_list(seq, f"sequence {i}") for i, seq in enumerate(sequences)]
        tails: list[Segment] = []
        try:
            for i, seq in enumerate(checked):
                tails.append(self.kv.insert(None, self._check_tokens(seq, f"sequence {i}")))
            return self.engine.forward([(t, len(t.tokens) - 1) for t in tails])
        finally:
            for t in tails:
                self.kv.release(t)

    # -- checks ----------------------------------------------------------------------------------
    def check_integrity(self, *trees: ThoughtTree) -> None:
        """KV tree and pool invariants, and each given tree's own. With trees given, refcounts are
        exact: each segment's references are its children plus the nodes that hold it, in these
        trees and in every other live tree this LM gave KV (trees that share the pool), so a
        segment held by nothing alive is reported as leaked."""
        holding = {id(t): t for t in (*trees, *list(self._trees))}
        holders: Counter[int] = Counter(n.kv.id for t in holding.values() for n in t.nodes if n.kv is not None)
        self.kv.check_integrity(holders if trees else None)
        for t in trees:
            t.check_integrity()
