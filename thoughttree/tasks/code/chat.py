"""Prompts through a model's chat template, with the assistant's answer already begun (e.g. a code fence)."""

from __future__ import annotations

from typing import Any, Callable

ChatRender = Callable[[str, str], "str | list[int]"]


def template_renderer(tokenizer: Any) -> ChatRender:
    """``render(user_message, assistant_start)`` from a Hugging Face tokenizer's chat template.

    It returns token ids (not text) so the template's own BOS is not doubled by the runtime's
    encoder; ``assistant_start`` is appended after the generation prompt.
    """
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("the model's tokenizer has no chat template; use the base-model prompts (--prompts base)")

    def render(user: str, assistant_start: str) -> list[int]:
        ids: Any = tokenizer.apply_chat_template(
            [{"role": "user", "content": user}], tokenize=True, add_generation_prompt=True
        )
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):  # newer transformers return a BatchEncoding
            ids = ids["input_ids"]
        return [int(t) for t in ids] + list(tokenizer(assistant_start, add_special_tokens=False)["input_ids"])

    return render
