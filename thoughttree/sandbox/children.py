"""What a test's child process runs, in the sandbox: the program as the interpreter runs a
script, forked from the driver (:func:`script_child`), its function called (:func:`call_child`),
or a fresh interpreter (:func:`exec_child`).

Part of the sandbox's driver (:mod:`driver`): standard library only. A forked child runs the
program from the driver's compiled code, as ``python -I program`` would: new standard streams
over the test's pipes, ``__main__``, the exit status, an uncaught exception's traceback, the wait
for non-daemon threads, exit handlers, the final flush.
"""

from __future__ import annotations

import atexit
import builtins
import io
import os
import signal
import sys
import traceback
import types
from typing import Callable, NoReturn

import call  # the call runner next to this file (the driver puts that folder on sys.path to import it)

VALUE_FD = 3  # where a call-based test's child writes the function's value
# The sandbox's own modules, which a forked program must not find among the driver's imports
# (isolation.py lists their files).
OWN_MODULES = ("call", "wire", "streams", "children", "candidate")


def _std_streams() -> None:
    """sys.stdin/stdout/stderr over descriptors 0-2, made as a fresh interpreter makes them (the
    driver's own streams, made by the same interpreter, give the encodings and buffering)."""

    def wrap(fd: int, like, reading: bool) -> io.TextIOWrapper:
        raw = io.FileIO(fd, "rb" if reading else "wb", closefd=False)
        buffered = io.BufferedReader(raw) if reading else io.BufferedWriter(raw)
        return io.TextIOWrapper(
            buffered,
            encoding=like.encoding,
            errors=like.errors,
            newline="\n",
            line_buffering=like.line_buffering,
            write_through=like.write_through,
        )

    sys.stdin = sys.__stdin__ = wrap(0, sys.__stdin__, True)  # type: ignore[misc]  # as a fresh interpreter's
    sys.stdout = sys.__stdout__ = wrap(1, sys.__stdout__, False)  # type: ignore[misc]
    sys.stderr = sys.__stderr__ = wrap(2, sys.__stderr__, False)  # type: ignore[misc]


def _report(error: BaseException, program: str) -> None:
    """What the interpreter does with an uncaught exception (``sys.excepthook``: its traceback),
    the traceback starting at the program's first frame as the interpreter's would."""
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != program:
        tb = tb.tb_next
    if tb is not None:
        error.__traceback__ = tb
    try:
        sys.excepthook(type(error), error, error.__traceback__)
    except BaseException:
        traceback.print_exception(type(error), error, error.__traceback__, file=sys.__stderr__)


def _exit_status(code: object) -> int:
    """The exit status of ``SystemExit(code)``, as the interpreter turns it into one."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _run_in_process(run: Callable[[], None], program: str) -> int:
    """Run ``run`` the way the interpreter runs a script, from its first line to its exit: an
    uncaught exception's traceback, then the wait for the program's threads, its exit handlers
    and the flush of its output. Returns the exit status."""
    atexit._clear()  # the driver's exit handlers are not the program's
    for name in OWN_MODULES:  # which the program would not find
        sys.modules.pop(name, None)
    # In a fresh interpreter the program's first frame is the first of all; here it sits under
    # this one, those below it, ``run``'s and exec's. The limit rises by as many (checked against
    # a fresh interpreter at the limit's edge), so the same recursion fits.
    depth = 0
    frame: types.FrameType | None = sys._getframe()
    while frame is not None:
        depth, frame = depth + 1, frame.f_back
    sys.setrecursionlimit(sys.getrecursionlimit() + depth + 2)
    status = 0
    try:
        run()
    except SystemExit as stop:
        status = _exit_status(stop.code)
    except BaseException as error:
        _report(error, program)
        status = 1
    threading = sys.modules.get("threading")
    if threading is not None:
        try:
            threading._shutdown()
        except BaseException as error:
            _report(error, program)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        if stream is None or getattr(stream, "closed", False):
            continue
        try:
            stream.flush()
        except Exception:
            status = 120  # as the interpreter exits when its output cannot be flushed
    for stream in (sys.__stdout__, sys.__stderr__):  # flushed when the interpreter frees them
        try:
            if stream is not None:
                stream.flush()
        except Exception:
            pass
    return status


def script_child(code, program: str) -> Callable[[], int]:
    """A test's child that runs the compiled program as ``python -I program`` would."""

    def child() -> int:
        _std_streams()
        main = types.ModuleType("__main__")
        main.__file__ = program
        main.__dict__["__builtins__"] = builtins
        sys.modules["__main__"] = main
        sys.argv = [program]
        return _run_in_process(lambda: exec(code, main.__dict__), program)

    return child


def call_child(code, program: str, fn_name: str) -> Callable[[], int]:
    """A call-based test's child: :func:`call.run` on the compiled program, its value to fd 3."""

    def child() -> int:
        _std_streams()
        sys.argv = [program]
        return _run_in_process(lambda: call.run(code, fn_name, VALUE_FD), program)

    return child


def exec_child(argv: list[str]) -> Callable[[], int]:
    """A test's child that starts a fresh interpreter: ``argv`` replaces it."""

    def child() -> NoReturn:
        for number in (signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(number, signal.SIG_DFL)  # as subprocess leaves them for a new program
        os.execv(argv[0], argv)  # raises if it fails: the child's traceback goes to its stderr

    return child
