"""Stop strings checked on a short window of each generation's newest tokens.

A stop string that appears when a token is added ends in the text that token added. So a row
needs checking only when its newest token's text holds the last character of one of its stops,
and then only in the last ``len(stop) + len(token text)`` characters. A token's text is decoded
alone once and kept. Decoded alone, it may differ from its text after other tokens in two ways
that matter here: a leading space or word marker dropped (SentencePiece-style decoders), and the
bytes of a character split across tokens shown as U+FFFD. So a stop that ends in a space checks
every row, as does a token whose text holds U+FFFD. A tokenizer that cleans up spaces
(``clean_up_tokenization_spaces``: " ." to ".", " n't" to "n't", ...) may join text before the
newest token when it removes a space; a stop that such a join can complete (one of more than one
character holding one of ``.?!,'n``) checks every row too. A row that needs checking decodes its
last few tokens, widening the window only when they decode to too little text (empty or
partial-byte tokens).
"""

from __future__ import annotations

from typing import Callable, Sequence

# Characters a window's start may lose or garble (a stripped leading space, a partial UTF-8
# sequence decoded as a replacement character).
_EDGE = 4
_SPACES = frozenset(" \u2581")  # a stop ending in one of these may end in a token whose text alone lacks it
_REPLACEMENT = "\ufffd"
_JOINED = frozenset(".?!,'n")  # what a clean-up of spaces joins to the character before the space


class StopWindow:
    """Finds stop strings in the text ending at each row's newest token."""

    def __init__(self, decode: Callable[[list[int]], str], cleans_up_spaces: bool) -> None:
        self._decode = decode
        self._cleans_up = cleans_up_spaces
        self._token_text: dict[int, str] = {}
        # Per tuple of stop strings: (characters a newest token's text must hold for a stop to
        # end in it, None where any may; the longest stop's length).
        self._ends: dict[tuple[str, ...], tuple[frozenset[str] | None, int]] = {}

    def _text(self, token: int) -> str:
        text = self._token_text.get(token)
        if text is None:
            text = self._token_text[token] = self._decode([token])
        return text

    def _stop_ends(self, stops: tuple[str, ...]) -> tuple[frozenset[str] | None, int]:
        spec = self._ends.get(stops)
        if spec is None:
            last = frozenset(s[-1] for s in stops)
            joined = self._cleans_up and any(len(s) > 1 and not _JOINED.isdisjoint(s) for s in stops)
            spec = self._ends[stops] = (None if joined or last & _SPACES else last | {_REPLACEMENT}, max(map(len, stops)))
        return spec

    def hits(self, rows: Sequence[tuple[list[int], tuple[str, ...]]]) -> list[bool]:
        """For each (tokens, stops): does the decoded text contain a stop ending at the newest token?"""
        result = [False] * len(rows)
        todo = []
        specs, texts = self._ends, self._token_text  # the per-row loop's lookups, inlined: it runs every step
        for i, (tokens, stops) in enumerate(rows):
            if not stops or not tokens:
                continue
            ends, longest = specs.get(stops) or self._stop_ends(stops)
            if ends is not None and ends.isdisjoint(texts.get(tokens[-1]) or self._text(tokens[-1])):
                continue
            todo.append((i, longest + 1, longest))
        while todo:
            wider = []
            for i, w, longest in todo:
                tokens, stops = rows[i]
                text = self._decode(tokens[-w:])
                if any(s in text for s in stops):
                    result[i] = True
                elif w < len(tokens) and len(text) < longest + len(self._text(tokens[-1])) + _EDGE:
                    wider.append((i, 2 * w, longest))
            todo = wider
        return result
