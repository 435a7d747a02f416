"""A choice's text as it grows, and its log-probabilities in the OpenAI shapes.

The runtime keeps the token that completes a stop string (a node's text is its decoded tokens);
an OpenAI answer ends before the stop string unless the request set
``include_stop_str_in_output``. While a choice streams, the last characters that could still
become the start of a stop string are held back until the next token decides.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from .scheduler import Update

FINISH = {"stop": "stop", "eos": "stop", "length": "length"}


@dataclass
class ChoiceText:
    """The tokens, log-probabilities and text of one choice."""

    index: int
    decode: Callable[[list[int]], str]
    stops: tuple[str, ...]
    keep_stop: bool
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    tops: list[dict[int, float] | None] = field(default_factory=list)
    finish_reason: str | None = None
    sent: int = 0  # characters already streamed
    sent_tokens: int = 0

    def add(self, update: Update) -> None:
        self.tokens.append(update.token)
        self.logprobs.append(update.logprob)
        self.tops.append(update.top)
        if update.finish_reason:
            self.finish_reason = update.finish_reason

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    def text(self) -> str:
        """The answer's text: all of it when finished, else what no stop string can still change."""
        full = self.decode(self.tokens)
        if self.done:
            return self._cut(full) if self.finish_reason == "stop" and self.stops else full
        full = full.rstrip("\ufffd")  # a character whose bytes are still arriving
        hold = max(map(len, self.stops), default=1) - 1
        return full[: len(full) - hold] if hold else full

    def _cut(self, full: str) -> str:
        hits = [(full.find(s), s) for s in self.stops if s in full]
        if not hits:
            return full
        at, stop = min(hits)
        return full[: at + len(stop)] if self.keep_stop else full[:at]

    def delta(self) -> tuple[str, list[int]]:
        """The text and tokens not yet streamed (text can lag its tokens by a few characters)."""
        text = self.text()
        piece = text[self.sent :] if len(text) > self.sent else ""
        self.sent = max(self.sent, len(text))
        tokens = self.tokens[self.sent_tokens :]
        self.sent_tokens = len(self.tokens)
        return piece, tokens

    @property
    def openai_finish(self) -> str | None:
        return FINISH.get(self.finish_reason or "", None)


def token_name(decode: Callable[[list[int]], str], token: int, as_ids: bool) -> str:
    return f"token_id:{token}" if as_ids else decode([token])


def completion_logprobs(
    choice: ChoiceText, start: int, stop: int, decode: Callable[[list[int]], str], as_ids: bool, offset: int = 0
) -> dict[str, Any]:
    """The completions API's ``logprobs`` object for tokens ``start:stop`` of ``choice``."""
    names = [token_name(decode, t, as_ids) for t in choice.tokens[start:stop]]
    offsets, at = [], offset
    for name in names:
        offsets.append(at)
        at += len(name)
    tops = [
        {token_name(decode, t, as_ids): lp for t, lp in top.items()} if top is not None else None
        for top in choice.tops[start:stop]
    ]
    return {
        "tokens": names,
        "token_logprobs": choice.logprobs[start:stop],
        "top_logprobs": tops,
        "text_offset": offsets,
    }


def chat_logprobs(
    choice: ChoiceText, start: int, stop: int, decode: Callable[[list[int]], str], as_ids: bool
) -> dict[str, Any]:
    """The chat API's ``logprobs`` object (``{"content": [...]}``) for tokens ``start:stop``."""
    content = []
    for token, lp, top in zip(choice.tokens[start:stop], choice.logprobs[start:stop], choice.tops[start:stop]):
        name = token_name(decode, token, as_ids)
        alts = [
            {"token": token_name(decode, t, as_ids), "logprob": v, "bytes": list(decode([t]).encode())}
            for t, v in (top or {}).items()
        ]
        content.append({"token": name, "logprob": lp, "bytes": list(decode([token]).encode()), "top_logprobs": alts})
    return {"content": content}


def pick_best(choices: Sequence[ChoiceText], n: int) -> list[ChoiceText]:
    """``best_of``: the ``n`` choices of highest total log-probability, in their original order."""
    ranked = sorted(choices, key=lambda c: -sum(c.logprobs))[:n]
    return sorted(ranked, key=lambda c: c.index)
