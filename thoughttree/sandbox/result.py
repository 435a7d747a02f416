"""The verdict on one test."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Status = Literal[
    "passed", "wrong_answer", "runtime_error", "timeout", "memory_limit", "output_limit", "syntax_error"
]
STATUSES: tuple[Status, ...] = (
    "passed", "wrong_answer", "runtime_error", "timeout", "memory_limit", "output_limit", "syntax_error"
)
EXCERPT_CHARS = 2000


def excerpt(text: str, *, tail: bool = False) -> str:
    """At most :data:`EXCERPT_CHARS` characters of ``text``: its start, or its end."""
    if len(text) <= EXCERPT_CHARS:
        return text
    return "…" + text[-EXCERPT_CHARS:] if tail else text[:EXCERPT_CHARS] + "…"


@dataclass(frozen=True)
class TestResult:
    """How a program did on one test.

    ``stdout`` is the start of what it printed, ``stderr`` the end of its error output (where a
    traceback is), ``time_s`` its wall-clock time (0 when it never ran), ``exit_code`` its
    exit status (negative: killed by that signal; None when it never ran).
    """

    __test__ = False  # not a pytest test class

    status: Status
    stdout: str = ""
    stderr: str = ""
    time_s: float = 0.0
    exit_code: int | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"TestResult.status must be one of {', '.join(STATUSES)}, got {self.status!r}")

    @property
    def passed(self) -> bool:
        return self.status == "passed"
