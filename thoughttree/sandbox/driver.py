"""The driver that runs inside the sandbox: one child process per test, under resource limits.

Started as ``python -I driver.py`` by :mod:`thoughttree.sandbox.execute`; it is a script, standard
library only, never imported by the evaluator. It reads one JSON request on standard input
(program path, test inputs, function name, limits, whether each test gets a fresh
interpreter, and the source of any checking function), answers with JSON lines on standard
output (``ready``, then ``syntax_error`` or one record per test) and never sees an expected
output but those a checking function holds.

The driver compiles the program once; each test is a child forked from the driver that runs the
compiled program as the interpreter runs a script (new standard streams over the test's pipes,
``__main__``, the exit status, an uncaught exception's traceback, the wait for non-daemon
threads, exit handlers, the final flush): a fork instead of an interpreter's start. Asked for
``fresh``, the child starts ``python -I`` on the program instead. Either way the limits are set
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
``candidate`` that calls the program's function in the test's process (always a fresh
interpreter, which holds nothing of the driver's memory) and returns plain values
(:mod:`wire`): the program can neither reach the check's expected values nor answer with an
object that compares equal to anything. Every call carries a fresh random nonce that its answer
must repeat, and the check counts only once the program has acknowledged its end (a last
nonce), so answers written before a call was sent, or a program that leaves before the check is
done, never pass.
"""

from __future__ import annotations

import atexit
import builtins
import ctypes
import io
import json
import math
import os
import resource
import secrets
import select
import selectors
import signal
import sys
import time
import traceback
import types
from typing import Any, Callable, NoReturn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import call  # noqa: E402  (the call runner next to this file; it brings the wire module)
import wire  # noqa: E402

while HERE in sys.path:
    sys.path.remove(HERE)

STDERR_KEEP = 8192
OPEN_FILES = 256
OPEN_FILES_BEFORE = 1 << 16  # descriptors a test's child closes before its limit lowers the count
VALUE_FD = 3  # where a call-based test's child writes the function's value
DRAIN_S = 1.0
REAP_S = 1.0
CHUNK = 65536
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


class Streams:
    """The child's pipes (file descriptors): feeds standard input, collects output up to the limits.

    ``keep_open``: standard input stays open after ``data`` for more (:meth:`send`), until
    :meth:`end_input`.
    """

    def __init__(self, stdin: int, stdout: int, stderr: int, value: int | None, data: bytes, cap: int,
                 keep_open: bool = False) -> None:
        self.sel = selectors.DefaultSelector()
        self.data, self.sent, self.cap = data, 0, cap
        self.out, self.err, self.value = bytearray(), bytearray(), bytearray()
        self.err_total = 0  # every byte written to standard error, of which only the end is kept
        self.over = False
        self.stdin: int | None = stdin
        self.keep_open = keep_open
        os.set_blocking(stdin, False)
        if data:
            self.sel.register(stdin, selectors.EVENT_WRITE, None)
        elif not keep_open:
            self._close_input()
        self.sel.register(stdout, selectors.EVENT_READ, self.out)
        self.sel.register(stderr, selectors.EVENT_READ, self.err)
        if value is not None:
            self.sel.register(value, selectors.EVENT_READ, self.value)

    def pump(self, timeout: float) -> bool:
        """Move data for up to ``timeout`` seconds; False once every pipe is closed."""
        if not self.sel.get_map():
            return False
        for key, _ in self.sel.select(timeout):
            if key.data is None:
                self._feed()
                continue
            if isinstance(key.data, str):
                continue
            chunk = os.read(key.fd, CHUNK)
            if not chunk:
                self.sel.unregister(key.fd)
                os.close(key.fd)
                continue
            buffer = key.data
            buffer += chunk
            if buffer is self.err:
                self.err_total += len(chunk)
                self.over = self.over or self.err_total > self.cap  # a flood of errors is output too
                if len(buffer) > STDERR_KEEP:
                    del buffer[: len(buffer) - STDERR_KEEP]
            elif len(buffer) > self.cap:
                self.over = True
        return bool(self.sel.get_map())

    def send(self, data: bytes) -> None:
        """More standard input (the pipe must still be open)."""
        if self.stdin is None:
            return
        pending = self.sent < len(self.data)
        self.data, self.sent = self.data[self.sent :] + data, 0
        if not pending:
            self.sel.register(self.stdin, selectors.EVENT_WRITE, None)

    def end_input(self) -> None:
        """No more standard input: the child reads its end once what was sent is taken."""
        self.keep_open = False
        if self.stdin is not None and self.sent >= len(self.data):
            self._close_input()

    def _feed(self) -> None:
        assert self.stdin is not None  # registered for writing only while it is open
        try:
            self.sent += os.write(self.stdin, self.data[self.sent : self.sent + CHUNK])
        except (BrokenPipeError, BlockingIOError):
            self.sent = len(self.data)
        if self.sent >= len(self.data):
            self.sel.unregister(self.stdin)
            if not self.keep_open:
                os.close(self.stdin)
                self.stdin = None

    def _close_input(self) -> None:
        assert self.stdin is not None
        if self.stdin in self.sel.get_map():
            self.sel.unregister(self.stdin)
        os.close(self.stdin)
        self.stdin = None

    def close(self) -> None:
        """Close the pipes still open (the caller has unregistered and closed the exit's pidfd)."""
        for key in list(self.sel.get_map().values()):
            self.sel.unregister(key.fd)
            os.close(key.fd)
            if key.fd == self.stdin:
                self.stdin = None
        if self.stdin is not None:
            os.close(self.stdin)
            self.stdin = None


def _std_streams() -> None:
    """sys.stdin/stdout/stderr over descriptors 0-2, made as a fresh interpreter makes them (the
    driver's own streams, made by the same interpreter, give the encodings and buffering)."""

    def wrap(fd: int, like, reading: bool) -> io.TextIOWrapper:
        raw = io.FileIO(fd, "rb" if reading else "wb", closefd=False)
        buffered = io.BufferedReader(raw) if reading else io.BufferedWriter(raw)
        return io.TextIOWrapper(buffered, encoding=like.encoding, errors=like.errors, newline="\n",
                                line_buffering=like.line_buffering, write_through=like.write_through)

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
    for name in ("call", "wire"):  # the sandbox's own modules, which the program would not find
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


class Stopped(BaseException):
    """The candidate's process ended, ran out of time or over a limit before it answered a call,
    or answered with another nonce than the call's (a BaseException, so a check's own ``except
    Exception`` does not take it). ``reason``: None when the process stopped, else what it did."""

    def __init__(self, reason: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason


class Candidate:
    """What a checking function calls: each call's arguments go to the test's process, which
    calls the program's function and answers with the value in :mod:`wire` format, decoded here
    to plain values."""

    def __init__(self, run: TestRun) -> None:
        self.run = run

    def __call__(self, *args, **kwargs):
        return wire.decode(self.ask(wire.encode([list(args), kwargs])))

    def ask(self, body: str) -> str:
        """Send ``NONCE body`` (a fresh nonce); the body of the answer that repeats the nonce."""
        nonce = secrets.token_hex(16)
        streams = self.run.streams
        streams.send(f"{nonce} {body}\n".encode("utf-8"))
        while b"\n" not in streams.value:
            if not self.run.step():
                self.run.read_written()
                if b"\n" not in streams.value:
                    raise Stopped
        line, _, rest = bytes(streams.value).partition(b"\n")
        streams.value[:] = rest
        got, _, answer = line.decode("utf-8", "replace").partition(" ")
        if got != nonce:
            raise Stopped("the program answered a call before it was sent (the answer does not carry its nonce)")
        return answer

    def close(self) -> None:
        """The check is done: the program must acknowledge it, proving it ran until the end."""
        if self.ask("end") != "end":
            raise Stopped("the program did not acknowledge the end of the check")


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
