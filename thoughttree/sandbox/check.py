"""A call-based test judged by a trusted function instead of an expected value (HumanEval's ``check``)."""

from __future__ import annotations

import ast
from dataclasses import dataclass


@dataclass(frozen=True)
class Check:
    """The expected side of a call-based test that a function judges.

    ``source`` defines ``check(candidate)``; the test passes when it returns and fails when it
    raises. In its module the name of the program's function is the candidate too (as when a
    check runs beside the program: some of HumanEval's call the function by its name). It runs
    in the sandbox's driver, where the program cannot reach it: ``candidate`` calls the
    program's function in the test's own process and returns the value as plain data (lists,
    tuples, dicts, sets, numbers, strings, bytes; any other object as a value equal to nothing),
    so a program can neither read the check's expected values nor answer with an object that
    claims to equal them.
    """

    source: str

    def __post_init__(self) -> None:
        if not isinstance(self.source, str):
            raise TypeError(f"Check.source must be Python source text, got {type(self.source).__name__}")
        try:
            body = ast.parse(self.source).body
        except (SyntaxError, ValueError) as err:
            raise ValueError(f"Check.source does not compile: {err}") from None
        if not any(isinstance(node, ast.FunctionDef) and node.name == "check" for node in body):
            raise ValueError("Check.source must define a top-level function check(candidate)")

    def __repr__(self) -> str:
        return f"Check(<{len(self.source)} characters>)"
