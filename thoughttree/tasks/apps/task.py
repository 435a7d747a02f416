"""APPS as a search task: prompts in the paper's format or a chat template, programs scored by public tests."""

from __future__ import annotations

from typing import Any, Mapping

from ..code.checking import Checker
from ..code.problem import CodeProblem
from ..code.programs import FENCE, extract
from ..code.task import CodeConfig, CodeTask
from .prompts import STYLES, ChatRender, base_prompt, chat_prompt

# A base model that finished its answer tends to begin the next problem.
BASE_STOPS = ("\nQUESTION:", "\nANSWER:")


class Apps(CodeTask):
    """APPS problems keyed by problem id; ``style`` "base" (the APPS paper's prompt) or "chat" (needs ``render``)."""

    def __init__(self, problems: Mapping[str, CodeProblem] | list[CodeProblem], config: CodeConfig | None = None, *,
                 style: str = "base", render: ChatRender | None = None, checker: Checker | None = None) -> None:
        if style not in STYLES:
            raise ValueError(f"APPS prompts must be one of {', '.join(STYLES)}, got {style!r}")
        if style == "chat" and render is None:
            raise ValueError("chat prompts need the model's chat template: pass render=template_renderer(tokenizer)")
        table = {p.key: p for p in problems} if isinstance(problems, list) else problems
        super().__init__(table, config, checker)
        self.style, self.render = style, render

    def prompt(self, key: Any) -> str | list[int]:
        problem = self.get(key)
        if self.style == "chat":
            assert self.render is not None
            return chat_prompt(self.render, problem)
        return base_prompt(problem)

    def stops(self, key: Any) -> tuple[str, ...]:
        return (FENCE,) if self.style == "chat" else BASE_STOPS

    def program(self, key: Any, text: str) -> str:
        if self.style == "base":
            for stop in BASE_STOPS:
                text = text.split(stop, 1)[0]
        return extract(text, opened=self.style == "chat")

    def finished(self, key: Any, text: str) -> bool:
        if self.style == "chat":
            return FENCE in text
        return any(stop.strip() in text for stop in BASE_STOPS)

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["style"] = self.style
        return out
