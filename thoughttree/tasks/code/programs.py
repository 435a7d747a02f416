"""Programs out of model completions, and the prompts' code-block opening.

A completion may be bare code (a base model continuing ``ANSWER:``), code that an
instruction-tuned model wrote inside a fenced block (the prompt already opened it, so the
completion ends at the closing fence), or prose with one or more fenced blocks. ``extract``
returns the code in each case.
"""

from __future__ import annotations

import re

FENCE = "```"
OPEN_BLOCK = "```python\n"

_BLOCK = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_PYTHON_TAGS = ("", "python", "py", "python3")


def extract(completion: str, *, opened: bool = False) -> str:
    """The program in ``completion``.

    ``opened``: the prompt ended inside an open code block, so the program is the text up to the
    first closing fence (or all of it). Otherwise the first fenced block tagged as Python (or
    untagged) is the program; without any fence the whole completion is taken as code.
    """
    if opened:
        return _tidy(completion.split(FENCE, 1)[0])
    blocks = [(tag.lower(), body) for tag, body in _BLOCK.findall(completion)]
    for tag, body in blocks:
        if tag in _PYTHON_TAGS and body.strip():
            return _tidy(body)
    if blocks:
        return _tidy(blocks[0][1])
    return _tidy(completion)


def _tidy(code: str) -> str:
    lines = code.replace("\r\n", "\n").split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    return "\n".join(lines) + "\n" if lines else ""


def closes_block(text: str) -> bool:
    """Whether a line (or a completion) written inside an open block closes it."""
    return FENCE in text


def truncate_at(completion: str, stops: tuple[str, ...]) -> str:
    """``completion`` cut before the earliest of ``stops`` (HumanEval's end-of-function markers)."""
    cut = len(completion)
    for stop in stops:
        at = completion.find(stop)
        if at != -1:
            cut = min(cut, at)
    return completion[:cut]
