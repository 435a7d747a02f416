"""A call-based test, inside the sandbox: :func:`run` in a test's process forked from the driver,
or ``python -I call.py PROGRAM NAME FD`` in a fresh interpreter.

Runs the program as a module named ``solution``, calls ``NAME(*args)`` (a top-level function,
or a method of a class ``Solution``) with the JSON list of arguments read from standard input,
and writes the return value to file descriptor FD in :mod:`wire` format. Standard library only.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wire  # noqa: E402  (the sibling module, found next to this file)


def run(code, fn_name: str, fd: int) -> None:
    """Run the compiled program as module ``solution``, call ``fn_name`` with the arguments on
    standard input, write the value to ``fd``."""
    channel = os.fdopen(fd, "w")
    args = json.loads(sys.stdin.read())
    namespace = {"__name__": "solution", "__builtins__": __builtins__}
    exec(code, namespace)
    function = namespace.get(fn_name)
    if function is None and isinstance(namespace.get("Solution"), type):
        function = getattr(namespace["Solution"](), fn_name, None)
    if not callable(function):
        sys.exit(f"the program defines no function or Solution method named {fn_name!r}")
    channel.write(wire.encode(function(*args)))
    channel.flush()


def main(program: str, fn_name: str, fd: str) -> None:
    with open(program, encoding="utf-8") as handle:
        code = compile(handle.read(), program, "exec")
    sys.path.pop(0)
    run(code, fn_name, int(fd))


if __name__ == "__main__":
    main(*sys.argv[1:4])
