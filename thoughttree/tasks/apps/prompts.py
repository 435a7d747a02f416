"""APPS prompts: the paper's plain format for base models, a chat request for instruction-tuned ones.

Base models get the format the APPS paper fine-tuned and prompted with: the question under a
``QUESTION:`` header, the starter code when there is one, the input format to use ("Call-Based"
for problems with a function to write, "Standard Input" otherwise), and ``ANSWER:``, after
which the program follows as plain text.

Instruction-tuned models get one user message through the model's own chat template (see
:func:`chat_prompt`), and the assistant's turn is opened with a Python code fence, so the
completion is code up to the closing fence.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from ..code.problem import CodeProblem
from ..code.programs import OPEN_BLOCK

STYLES = ("base", "chat")
ChatRender = Callable[[str, str], "str | list[int]"]


def base_prompt(problem: CodeProblem) -> str:
    parts = ["\nQUESTION:\n", problem.statement.strip(), "\n"]
    if problem.starter_code.strip():
        parts += [problem.starter_code.rstrip(), "\n"]
    parts.append("\nUse Call-Based format\n" if problem.fn_name else "\nUse Standard Input format\n")
    parts.append("\nANSWER:\n")
    return "".join(parts)


def chat_message(problem: CodeProblem) -> str:
    if problem.fn_name:
        how = (f"Write the function `{problem.fn_name}` in Python 3, starting from this code:\n\n"
               f"```python\n{problem.starter_code.strip()}\n```\n\nThe function is called with the test "
               "arguments and its return value is checked; do not read input or print the answer.")
    else:
        how = ("Write a complete Python 3 program that reads the input from standard input and prints the "
               "answer to standard output, exactly in the format the problem asks for.")
    return f"{problem.statement.strip()}\n\n{how} Answer with the code only, in one Python code block."


def chat_prompt(render: ChatRender, problem: CodeProblem) -> str | list[int]:
    """``render(user_message, assistant_start)``: the model's chat template applied to the request."""
    return render(chat_message(problem), OPEN_BLOCK)


def template_renderer(tokenizer: Any) -> ChatRender:
    """A renderer from a Hugging Face tokenizer's chat template: token ids, the assistant turn opened.

    Token ids (not text) so the template's own BOS is not doubled by the runtime's encoder.
    """
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("the model's tokenizer has no chat template; use the base-model prompts (--prompts base)")

    def render(user: str, assistant_start: str) -> list[int]:
        ids: Sequence[int] = tokenizer.apply_chat_template(
            [{"role": "user", "content": user}], tokenize=True, add_generation_prompt=True
        )
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):  # newer transformers return a BatchEncoding
            ids = ids["input_ids"]
        return [int(t) for t in ids] + list(tokenizer(assistant_start, add_special_tokens=False)["input_ids"])

    return render
