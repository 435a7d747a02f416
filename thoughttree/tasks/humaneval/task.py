"""HumanEval as a search task: complete a function from its signature and docstring.

Base models continue the prompt itself (the function's body follows); the completion ends
where the function does: at the first of HumanEval's end markers (a new top-level ``def``,
``class``, ``if``, ``print`` or comment). Instruction-tuned models get the prompt in a chat
request, and their turn opens with a code fence and the prompt, so they continue the body too
and stop at the closing fence. Either way the program is the prompt plus the completion.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..code.chat import ChatRender
from ..code.checking import Checker, Verdicts
from ..code.problem import CodeProblem
from ..code.programs import FENCE, OPEN_BLOCK, truncate_at
from ..code.task import CodeConfig, CodeTask

STYLES = ("base", "chat")
END_OF_FUNCTION = ("\ndef ", "\nclass ", "\nif ", "\nprint(", "\n#", "\nassert ")


def chat_message(problem: CodeProblem) -> str:
    return ("Complete this Python function. Keep its signature, implement what the docstring says, and answer "
            f"with the whole function in one Python code block.\n\n```python\n{problem.statement.strip()}\n```")


class HumanEval(CodeTask):
    """HumanEval problems keyed by task id ("HumanEval/0" ...)."""

    def __init__(self, problems: list[CodeProblem], config: CodeConfig | None = None, *, style: str = "base",
                 render: ChatRender | None = None, checker: Checker | None = None) -> None:
        if style not in STYLES:
            raise ValueError(f"HumanEval prompts must be one of {', '.join(STYLES)}, got {style!r}")
        if style == "chat" and render is None:
            raise ValueError("chat prompts need the model's chat template: pass render=template_renderer(tokenizer)")
        super().__init__({p.key: p for p in problems}, config, checker)
        self.style, self.render = style, render

    def prompt(self, key: Any) -> str | list[int]:
        problem = self.get(key)
        if self.style == "chat":
            assert self.render is not None
            return self.render(chat_message(problem), OPEN_BLOCK + problem.statement)
        return problem.statement

    def stops(self, key: Any) -> tuple[str, ...]:
        return (FENCE,) if self.style == "chat" else END_OF_FUNCTION

    def completion(self, text: str) -> str:
        """The function body a completion gives: cut at the closing fence (chat) or the end of the function."""
        return text.split(FENCE, 1)[0] if self.style == "chat" else truncate_at(text, END_OF_FUNCTION)

    def program(self, key: Any, text: str) -> str:
        body = self.completion(text)
        return self.get(key).statement + body if body.strip() else ""

    def finished(self, key: Any, text: str) -> bool:
        return self.completion(text) != text

    def hidden_verdicts(self, key: Any, programs: Sequence[str]) -> list[Verdicts]:
        problem = self.get(key)
        return self.checker.check(programs, problem.hidden, fn_name=problem.fn_name, label=f"{problem.key} hidden")

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["style"] = self.style
        return out
