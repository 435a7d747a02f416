"""APPS prompts: the paper's plain format for base models, a chat request for instruction-tuned ones.

Base models get the format the APPS paper fine-tuned and prompted with: the question under a
``QUESTION:`` header, the starter code when there is one, the input format to use ("Call-Based"
for problems with a function to write, "Standard Input" otherwise), and ``ANSWER:``, after
which the program follows as plain text.

Instruction-tuned models get one user message through the model's own chat template (see
:func:`thoughttree.tasks.code.chat.template_renderer`), and the assistant's turn is opened with
a Python code fence, so the completion is code up to the closing fence.
"""

from __future__ import annotations

from ..code.chat import ChatRender
from ..code.problem import CodeProblem
from ..code.programs import OPEN_BLOCK

STYLES = ("base", "chat")


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

