"""Run command lines of Python programs, each in a process of its own, and print how each ended.

    python tests/answer_help.py "benchmarks/tree_decode.py --help" "-m thoughttree demo --help" ...

Each command (a script or ``-m`` and a module, with its arguments) runs as ``python COMMAND``
would run it, as ``__main__`` with its own ``sys.argv``, in a child forked from this process
after it has imported torch, transformers and the package once: the imports that make up most
of a ``--help`` call's time. Prints one JSON object: each command's exit status, stdout and
stderr.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import tempfile
import traceback

import torch  # noqa: F401  (imported once, before the children are forked)
import transformers  # noqa: F401

import thoughttree.runtime  # noqa: F401


def _run(words: list[str]) -> int:
    """Run one command line in this process, as the interpreter would; its exit status."""
    try:
        if words[0] == "-m":
            sys.argv = words[1:]
            runpy.run_module(words[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = words
            sys.path.insert(0, os.path.dirname(os.path.abspath(words[0])))
            runpy.run_path(words[0], run_name="__main__")
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            return stop.code or 0
        print(stop.code, file=sys.stderr)
        return 1
    except BaseException:  # noqa: BLE001 - reported as the interpreter reports an uncaught error
        traceback.print_exc()
        return 1
    return 0


def answer(command: str) -> dict[str, object]:
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        pid = os.fork()
        if pid == 0:
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            status = _run(command.split())
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
        _, wait_status = os.waitpid(pid, 0)
        out.seek(0)
        err.seek(0)
        return {"status": os.waitstatus_to_exitcode(wait_status), "stdout": out.read(), "stderr": err.read()}


if __name__ == "__main__":
    print(json.dumps({command: answer(command) for command in sys.argv[1:]}))
