"""A call-based test, inside the sandbox: :func:`run` in a test's process forked from the driver,
or ``python -I call.py PROGRAM NAME FD`` in a fresh interpreter.

Runs the program as a module named ``solution``, calls ``NAME(*args)`` (a top-level function,
or a method of a class ``Solution``) with the JSON list of arguments read from standard input,
and writes the return value to file descriptor FD in :mod:`wire` format. With a fifth argument,
``serve``, it answers calls until the checking function is done instead (:func:`serve`: a
checking function's candidate). Standard library only.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wire  # noqa: E402  (the sibling module, found next to this file)


def _function(code, fn_name: str):
    """Run the compiled program as module ``solution``; its function (or ``Solution`` method) ``fn_name``."""
    namespace: dict = {"__name__": "solution", "__builtins__": __builtins__}
    exec(code, namespace)
    function = namespace.get(fn_name)
    if function is None and isinstance(namespace.get("Solution"), type):
        function = getattr(namespace["Solution"](), fn_name, None)
    if not callable(function):
        sys.exit(f"the program defines no function or Solution method named {fn_name!r}")
    return function


def run(code, fn_name: str, fd: int) -> None:
    """Run the compiled program as module ``solution``, call ``fn_name`` with the arguments on
    standard input, write the value to ``fd``."""
    channel = os.fdopen(fd, "w")
    args = json.loads(sys.stdin.read())
    function = _function(code, fn_name)
    channel.write(wire.encode(function(*args)))
    channel.flush()


def serve(code, fn_name: str, fd: int) -> None:
    """Run the program as :func:`run` does, then answer calls until the end: each line of standard
    input is ``NONCE CALL``, a call's ``[args, kwargs]`` in :mod:`wire` format, each answer
    ``NONCE VALUE`` on a line of ``fd``; ``NONCE end`` (the check is done) is answered ``NONCE end``.
    Nonces are fresh for every call, so no answer can be written before its call was sent."""
    channel = os.fdopen(fd, "w")
    function = _function(code, fn_name)
    for line in sys.stdin:
        nonce, _, body = line.rstrip("\n").partition(" ")
        if body == "end":
            channel.write(f"{nonce} end\n")
            channel.flush()
            return
        args, kwargs = wire.decode(body)
        channel.write(f"{nonce} {wire.encode(function(*args, **kwargs))}\n")
        channel.flush()


def main(program: str, fn_name: str, fd: str, mode: str = "call") -> None:
    with open(program, encoding="utf-8") as handle:
        code = compile(handle.read(), program, "exec")
    sys.path.pop(0)
    (serve if mode == "serve" else run)(code, fn_name, int(fd))


if __name__ == "__main__":
    main(*sys.argv[1:])
