"""Stop strings checked on a short window of each generation's newest tokens.

A stop string that appears when a token is added must overlap the text that token added, so it
lies in the last ``len(stop) + len(token text)`` characters. Each step decodes, for every row
with stop strings, only its last few tokens (all rows in one batched call), widening a row's
window only when its tokens decode to too little text (empty or partial-byte tokens).
"""

from __future__ import annotations

from typing import Callable, Sequence

# Characters a window's start may lose or garble (a stripped leading space, a partial UTF-8
# sequence decoded as a replacement character).
_EDGE = 4


class StopWindow:
    """Finds stop strings in the text ending at each row's newest token."""

    def __init__(self, batch_decode: Callable[[list[list[int]]], list[str]], decode: Callable[[list[int]], str]) -> None:
        self._batch_decode = batch_decode
        self._decode = decode
        self._token_len: dict[int, int] = {}

    def _added(self, token: int) -> int:
        n = self._token_len.get(token)
        if n is None:
            n = self._token_len[token] = len(self._decode([token]))
        return n

    def hits(self, rows: Sequence[tuple[list[int], tuple[str, ...]]]) -> list[bool]:
        """For each (tokens, stops): does the decoded text contain a stop ending at the newest token?"""
        result = [False] * len(rows)
        todo = [(i, max(map(len, stops)) + 1) for i, (_, stops) in enumerate(rows) if stops]
        while todo:
            texts = self._batch_decode([rows[i][0][-w:] for i, w in todo])
            wider = []
            for (i, w), text in zip(todo, texts):
                tokens, stops = rows[i]
                if any(s in text for s in stops):
                    result[i] = True
                elif w < len(tokens) and len(text) < max(map(len, stops)) + self._added(tokens[-1]) + _EDGE:
                    wider.append((i, 2 * w))
            todo = wider
        return result
