"""The driver that runs inside the sandbox: one child process per test, under resource limits.

Started as ``python -I driver.py`` by :mod:`thoughttree.sandbox.execute`; it is a script, standard
library only, never imported by the evaluator. It reads one JSON request on standard input
(program path, test inputs, function name, limits, whether each test gets a fresh
interpreter, and the source of any checking function), answers with JSON lines on standard
output (``ready``, then ``syntax_error`` or one record per test) and never sees an expected
output but those a checking function holds.

The driver compiles the program once; each test is a child forked from the driver that runs the
compiled program as the interpreter runs a script (:mod:`children`): a fork instead of an
interpreter's start. Asked for ``fresh``, the child starts ``python -I`` on the program instead.
The driver feeds and reads the child's pipes (:mod:`streams`). Either way the limits are set
in the child before the program runs (address space, CPU seconds, file size, process count,
open files, no core files) under a wall-clock deadline, and the child holds only its own pipes.
When the test ends, for whatever reason, its whole process group is killed, and inside the
sandbox's own PID namespace every other process too (``kill(-1)`` spares only the driver, the
namespace's init), and collected, so nothing a test leaves behind survives into the next test.

The driver is the namespace's init and cannot be dumped: a test cannot signal it (the kernel
drops signals to an init from inside its namespace unless it handles them, and it handles
none), trace it, or take its descriptors, so no test reaches the pipe that carries the records.

A call-based test runs :mod:`call` (next to this file) the same two ways. A test checked by a
function (HumanEval's ``check(candidate)``) runs that function here, in the driver, with a
``candidate`` (:mod:`candidate`) that calls the program's function in the test's process (always
a fresh interpreter, which holds nothing of the driver's memory) and returns plain values
(:mod:`wire`): the program can neither reach the check's expected values nor answer with an
object that compares equal to anything. Every call carries a fresh random nonce that its answer
must repeat, and the check counts only once the program has acknowledged its end (a last
nonce), so answers written before a call was sent, or a program that leaves before the check is
done, never pass.
"""

from __future__ import annotations

import builtins
import ctypes
import json
import math
import os
import resource
import select
import selectors
import signal
import sys
import time
import traceback
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# The driver's own modules next to this file (call and wire come with them).
from candidate import Candidate, Stopped  # noqa: E402
from children import VALUE_FD, call_child, exec_child, script_child  # noqa: E402
from streams import CHUNK, Streams  # noqa: E402

while HERE in sys.path:
    sys.path.remove(HERE)

OPEN_FILES = 256
OPEN_FILES_BEFORE = 1 << 16  # descriptors a test's child closes before its limit lowers the count
DRAIN_S = 1.0
REAP_S = 1.0
PR_SET_DUMPABLE = 4


def emit(record: dict) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def protect_self() -> None:
    """Tests run as the same user: make this process's memory and file descriptors unreadable."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def _lower(kind: int, value: int, above: int = 0) -> None:
    """Soft limit ``value``, hard limit ``value + above`` (never raised past the current hard one)."""
    _, hard = resource.getrlimit(kind)
    soft, top = value, value + above
    if hard != resource.RLIM_INFINITY:
        soft, top = min(soft, hard), min(top, hard)
    resource.setrlimit(kind, (soft, top))


def limiter(limits: dict, extra_processes: int):
    memory = limits["memory_mb"] << 20
    cpu = math.ceil(limits["time_s"]) + 1
    processes = limits["processes"] + extra_processes

    def apply() -> None:
        _lower(resource.RLIMIT_AS, memory)
        _lower(resource.RLIMIT_CPU, cpu, 1)  # SIGXCPU at the soft limit (a timeout), SIGKILL a second later
        _lower(resource.RLIMIT_FSIZE, limits["output_bytes"])
        _lower(resource.RLIMIT_NPROC, processes)
        _lower(resource.RLIMIT_NOFILE, OPEN_FILES)
        _lower(resource.RLIMIT_CORE, 0)

    return apply


def kill_rest(pgid: int, kill_all: bool) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if kill_all:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass


def reap_orphans() -> None:
    """As the namespace's init, collect the killed processes a test left behind (daemons reparent
    here), so none holds a place of the process limit into the next test."""
    until = time.monotonic() + REAP_S
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            if time.monotonic() > until:
                return
            time.sleep(0.001)


def _enter(child: Callable[[], int], fds: list[int], limits: dict, extra_processes: int) -> None:
    """In the forked child: descriptors 0-2 (and the value's, 3) from ``fds``, nothing else
    open, a session of its own, the limits; then ``child``. Never returns."""
    status = 126
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as the interpreter starts a program
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(len(fds), OPEN_FILES_BEFORE)
        limiter(limits, extra_processes)()
        status = child()
    except BaseException:
        try:
            traceback.print_exc()
            sys.stderr.flush()
        except BaseException:
            pass
    finally:
        os._exit(status)


class TestRun:
    """One test's child, from its fork to its record: the child runs under the limits with its
    pipes, against a wall-clock deadline; ``keep_input`` leaves its standard input open for
    :class:`Candidate`'s calls."""

    def __init__(
        self, child: Callable[[], int], data: bytes, request: dict, call: bool, keep_input: bool = False
    ) -> None:
        self.limits, self.kill_all, self.call = request["limits"], request["kill_all"], call
        pipes = [os.pipe() for _ in range(4 if call else 3)]  # stdin, stdout, stderr, the call's value
        ours = [pipes[0][1]] + [r for r, _ in pipes[1:]]
        theirs = [pipes[0][0]] + [w for _, w in pipes[1:]]
        sys.stdout.flush()
        sys.stderr.flush()
        self.start = time.monotonic()
        self.deadline = self.start + self.limits["time_s"]
        self.pid = os.fork()
        if self.pid == 0:
            for fd in ours:
                os.close(fd)
            _enter(child, theirs, self.limits, 2 if self.kill_all else 0)
        for fd in theirs:
            os.close(fd)
        self.pidfd = os.pidfd_open(self.pid)
        self.streams = Streams(ours[0], ours[1], ours[2], ours[3] if call else None, data, self.limits["output_bytes"],
                               keep_open=keep_input)
        self.streams.sel.register(self.pidfd, selectors.EVENT_READ, "exit")
        self.timed_out = self.exited = False

    def step(self) -> bool:
        """Move data until something happens; False once the test is over (exited, out of time, over a limit)."""
        if self.exited or self.timed_out or self.streams.over:
            return False
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            self.timed_out = True
            return False
        self.streams.pump(remaining)
        self.exited = bool(select.select([self.pidfd], [], [], 0)[0])  # without reaping: its pid stays ours
        return True

    def read_written(self) -> None:
        """Read an answer the program wrote before it ended: its end can be seen before the pipes
        are read, and what it wrote is in them already (a pump with no wait per chunk)."""
        for _ in range(self.limits["output_bytes"] // CHUNK + 1):
            if b"\n" in self.streams.value or self.streams.over or not self.streams.pump(0):
                return

    def finish(self) -> dict:
        """Wait for the end, kill what is left, drain the pipes: the test's record."""
        while self.step():
            pass
        elapsed = time.monotonic() - self.start
        self.streams.sel.unregister(self.pidfd)
        os.close(self.pidfd)
        kill_rest(self.pid, self.kill_all)
        streams = self.streams
        drain_until = time.monotonic() + DRAIN_S
        while not streams.over and time.monotonic() < drain_until and streams.pump(drain_until - time.monotonic()):
            pass
        streams.close()
        _, wait_status = os.waitpid(self.pid, 0)
        if self.kill_all:
            reap_orphans()
        cap = self.limits["output_bytes"]
        return {
            "exit": os.waitstatus_to_exitcode(wait_status),
            "timeout": self.timed_out,
            "output_limit": streams.over,
            "stdout": streams.out[:cap].decode("utf-8", "replace"),
            "stderr": streams.err.decode("utf-8", "replace"),
            "value": streams.value.decode("utf-8", "replace") if self.call and not streams.over else None,
            "time": round(elapsed, 4),
        }


def run_test(child: Callable[[], int], data: bytes, request: dict, call: bool) -> dict:
    return TestRun(child, data, request, call).finish()


def check_test(child: Callable[[], int], source: str, request: dict) -> dict:
    """A test judged by ``check(candidate)`` from ``source``, with the function's name bound to the
    candidate too: its record with ``check``, "passed" when it returned and the program then
    acknowledged the end, the exception's last line when it raised, what the program did wrong
    when it broke the protocol, None when the candidate stopped."""
    run = TestRun(child, b"", request, call=True, keep_input=True)
    verdict = None
    try:
        namespace: dict[str, Any] = {"__name__": "check", "__builtins__": builtins}
        exec(compile(source, "check", "exec"), namespace)
        check, candidate = namespace["check"], Candidate(run)
        namespace[request["fn_name"]] = candidate
        check(candidate)
        candidate.close()
        verdict = "passed"
    except Stopped as stop:
        verdict = stop.reason
    except Exception as error:
        verdict = "".join(traceback.format_exception_only(type(error), error)).strip() or type(error).__name__
    run.streams.end_input()
    record = run.finish()
    record["value"] = None
    record["check"] = verdict
    return record


def main() -> None:
    request = json.loads(sys.stdin.read())
    protect_self()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the one signal Python handles: nothing a test can send
    emit({"ready": True})
    program, fn_name = request["program"], request["fn_name"]
    with open(program, encoding="utf-8", errors="replace") as handle:
        source = handle.read()
    try:
        code = compile(source, program, "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as err:  # Python would not run it either
        emit({"syntax_error": "".join(traceback.format_exception_only(type(err), err)).strip()})
        return
    runner = os.path.join(HERE, "call.py")
    checks = request["checks"]
    if request["fresh"] or any(checks):  # a forked test would hold the checks' sources in its memory
        argv = ([sys.executable, "-I", program] if fn_name is None
                else [sys.executable, "-I", runner, program, fn_name, str(VALUE_FD)])
        child = exec_child(argv)
    else:
        child = script_child(code, program) if fn_name is None else call_child(code, program, fn_name)
    server = (
        exec_child([sys.executable, "-I", runner, program, fn_name, str(VALUE_FD), "serve"]) if any(checks) else None
    )
    for index, (given, source) in enumerate(zip(request["inputs"], checks)):
        if source is not None:
            assert server is not None  # started above wherever a test has a check
            emit({"i": index, **check_test(server, source, request)})
            continue
        data = given.encode("utf-8") if fn_name is None else json.dumps(given).encode("utf-8")
        emit({"i": index, **run_test(child, data, request, call=fn_name is not None)})


if __name__ == "__main__":
    main()
