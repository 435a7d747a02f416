"""The child of a call-based test, inside the sandbox: ``python -I call.py PROGRAM NAME FD``.

Runs the program as a module named ``solution``, calls ``NAME(*args)`` (a top-level function,
or a method of a class ``Solution``) with the JSON list of arguments read from standard input,
and writes the return value to file descriptor FD in :mod:`wire` format. A script, standard
library only, kept apart from the driver so that each test starts with few imports.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wire  # noqa: E402  (the sibling module, found next to this file)


def main(program: str, fn_name: str, fd: str) -> None:
    channel = os.fdopen(int(fd), "w")
    args = json.loads(sys.stdin.read())
    with open(program, encoding="utf-8") as handle:
        code = compile(handle.read(), program, "exec")
    namespace = {"__name__": "solution", "__builtins__": __builtins__}
    sys.path.pop(0)
    exec(code, namespace)
    function = namespace.get(fn_name)
    if function is None and isinstance(namespace.get("Solution"), type):
        function = getattr(namespace["Solution"](), fn_name, None)
    if not callable(function):
        sys.exit(f"the program defines no function or Solution method named {fn_name!r}")
    channel.write(wire.encode(function(*args)))
    channel.flush()


if __name__ == "__main__":
    main(*sys.argv[1:4])
