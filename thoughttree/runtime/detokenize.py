"""Token ids to text as the tokenizer's own ``decode`` gives it, without its per-call overhead."""

from __future__ import annotations

from typing import Any, Sequence

_PROBE = "a ."  # a space before punctuation: what a clean-up of spaces removes


class Detokenizer:
    """``tokenizer.decode(ids, skip_special_tokens=True)``, straight through the Rust tokenizer
    when there is one (a few times faster per call than through transformers).

    Whether transformers cleans up spaces after the Rust decoder (" ." to ".", " n't" to "n't",
    ...) depends on the tokenizer and on the transformers version, so it is read from the
    tokenizer once, by decoding a probe both ways. :attr:`cleans_up_spaces` says whether the
    text, from either, loses the space of the probe.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._backend = getattr(tokenizer, "backend_tokenizer", None)
        ids = list(tokenizer.encode(_PROBE, add_special_tokens=False))
        self._clean_up = tokenizer.decode(ids, skip_special_tokens=True) != tokenizer.decode(
            ids, skip_special_tokens=True, clean_up_tokenization_spaces=False
        )
        self.cleans_up_spaces = _PROBE not in self(ids)

    def __call__(self, tokens: Sequence[int]) -> str:
        """Text of ``tokens``, special tokens skipped."""
        if self._backend is None:
            return self.tokenizer.decode(list(tokens), skip_special_tokens=True)
        text = self._backend.decode(list(tokens), skip_special_tokens=True)
        return self.tokenizer.clean_up_tokenization(text) if self._clean_up else text

    def batch(self, token_lists: Sequence[Sequence[int]]) -> list[str]:
        """The texts of many token lists (one call into the Rust tokenizer when there is one)."""
        lists = [list(t) for t in token_lists]
        if self._backend is None:
            return self.tokenizer.batch_decode(lists, skip_special_tokens=True)
        texts = self._backend.decode_batch(lists, skip_special_tokens=True)
        return [self.tokenizer.clean_up_tokenization(t) for t in texts] if self._clean_up else texts
