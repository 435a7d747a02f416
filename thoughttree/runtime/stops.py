"""Stop strings checked on a short window of each generation's newest tokens.

A stop string that appears when a token is added ends in the text that token added. So a row
needs checking only when its newest token's text holds the last character of one of its stops,
and then only in the last ``len(stop) + len(token text)`` characters. A token's text is decoded
alone once and kept, and so is, per tuple of stops, whether one may end in that token. Decoded
alone, a token's text may differ from its text after other tokens in two ways that matter here:
a leading space or word marker dropped (SentencePiece-style decoders), and the bytes of a
character split across tokens shown as U+FFFD. So a stop that ends in a space checks every row,
as does a token whose text holds U+FFFD. A tokenizer that cleans up spaces
(``clean_up_tokenization_spaces``: " ." to ".", " n't" to "n't", ...) may join text before the
newest token when it removes a space; a stop that such a join can complete (one of more than one
character holding one of ``.?!,'n``) checks every row too. A row that needs checking decodes its
last few tokens, widening the window when they decode to too little text (empty or partial-byte
tokens) or to U+FFFD where a stop could lie: a window that starts inside a character may garble
more than that character (a byte-fallback decoder shows the whole run of byte tokens after it as
U+FFFD). A stop that itself holds U+FFFD could match such garbling, so it reads the whole text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

# Characters a window's start may lose or garble (a stripped leading space, a partial UTF-8
# sequence decoded as a replacement character).
_EDGE = 4
_SPACES = frozenset(" \u2581")  # a stop ending in one of these may end in a token whose text alone lacks it
_REPLACEMENT = "\ufffd"
_JOINED = frozenset(".?!,'n")  # what a clean-up of spaces joins to the character before the space


@dataclass(frozen=True, eq=False)
class _Spec:
    """What a tuple of stop strings decides once: whether a stop may end in a token (filled in
    token by token; None: in any token, so every row checks), the characters a newest token's
    text must hold for one to end in it, the longest stop's length, and the first window's size
    (None: the whole text)."""

    may_end: dict[int, bool] | None
    ends: frozenset[str]
    longest: int
    first: int | None


class StopWindow:
    """Finds stop strings in the text ending at each row's newest token."""

    def __init__(self, decode: Callable[[list[int]], str], cleans_up_spaces: bool) -> None:
        self._decode = decode
        self._cleans_up = cleans_up_spaces
        self._token_text: dict[int, str] = {}
        self._specs: dict[tuple[str, ...], _Spec] = {}

    def _text(self, token: int) -> str:
        text = self._token_text.get(token)
        if text is None:
            text = self._token_text[token] = self._decode([token])
        return text

    def _spec(self, stops: tuple[str, ...]) -> _Spec:
        spec = self._specs.get(stops)
        if spec is None:
            last = frozenset(s[-1] for s in stops)
            joined = self._cleans_up and any(len(s) > 1 and not _JOINED.isdisjoint(s) for s in stops)
            longest = max(map(len, stops))
            # A stop holding U+FFFD could match a window's garbled start: such stops read the whole text.
            first = None if any(_REPLACEMENT in s for s in stops) else longest + 1
            spec = self._specs[stops] = _Spec(
                None if joined or last & _SPACES else {}, last | {_REPLACEMENT}, longest, first
            )
        return spec

    def hits(self, stops: tuple[str, ...], rows: Sequence[list[int]]) -> list[bool]:
        """For each row of tokens: does its decoded text contain one of ``stops`` ending at its newest token?"""
        result = [False] * len(rows)
        if not stops:
            return result
        spec = self._spec(stops)
        may_end, longest = spec.may_end, spec.longest
        todo = []
        for i, tokens in enumerate(rows):
            if not tokens:
                continue
            if may_end is not None:
                may = may_end.get(tokens[-1])
                if may is None:
                    may = may_end[tokens[-1]] = not spec.ends.isdisjoint(self._text(tokens[-1]))
                if not may:
                    continue
            todo.append((i, spec.first or len(tokens)))
        while todo:
            wider = []
            for i, w in todo:
                tokens = rows[i]
                text = self._decode(tokens[-w:])
                if any(s in text for s in stops):
                    result[i] = True
                elif w < len(tokens):
                    need = longest + len(self._text(tokens[-1]))  # the text a stop ending in the newest token lies in
                    if len(text) < need + _EDGE or _REPLACEMENT in text[-need:]:
                        wider.append((i, 2 * w))
            todo = wider
        return result
