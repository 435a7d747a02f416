"""The driver that runs inside the sandbox: one child process per test, under resource limits.

Started as ``python -I driver.py`` by :mod:`thoughttree.sandbox.run`; it is a script, standard
library only, never imported by the evaluator. It reads one JSON request on standard input
(program path, test inputs, function name, limits), answers with JSON lines on standard output
(``ready``, then ``syntax_error`` or one record per test) and never sees an expected output.

Each test runs in a fresh interpreter with the limits set before it starts (address space, CPU
seconds, file size, process count, open files, no core files) and a wall-clock deadline. When
the test ends, for whatever reason, its whole process group is killed, and inside the sandbox's
own PID namespace every other process too (``kill(-1)`` spares only the driver and the
namespace's init), so nothing a test leaves behind survives into the next test.

A call-based test's child is ``call.py`` next to this file.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import resource
import select
import selectors
import signal
import subprocess
import sys
import time
import traceback

STDERR_KEEP = 8192
OPEN_FILES = 256
DRAIN_S = 1.0
CHUNK = 65536
PR_SET_DUMPABLE = 4


def emit(record: dict) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def protect_self() -> None:
    """Tests run as the same user: make this process's memory and file descriptors unreadable."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def _lower(kind: int, value: int) -> None:
    _, hard = resource.getrlimit(kind)
    value = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(kind, (value, value))


def limiter(limits: dict, extra_processes: int):
    memory = limits["memory_mb"] << 20
    cpu = math.ceil(limits["time_s"]) + 1
    processes = limits["processes"] + extra_processes

    def apply() -> None:
        _lower(resource.RLIMIT_AS, memory)
        _lower(resource.RLIMIT_CPU, cpu)
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


class Streams:
    """The child's pipes: feeds standard input, collects output up to the limits."""

    def __init__(self, proc: subprocess.Popen, data: bytes, value_fd: int | None, cap: int) -> None:
        self.sel = selectors.DefaultSelector()
        self.data, self.sent, self.cap = data, 0, cap
        self.out, self.err, self.value = bytearray(), bytearray(), bytearray()
        self.over = False
        os.set_blocking(proc.stdin.fileno(), False)
        if data:
            self.sel.register(proc.stdin, selectors.EVENT_WRITE, None)
        else:
            proc.stdin.close()
        self.stdin = proc.stdin
        self.sel.register(proc.stdout, selectors.EVENT_READ, self.out)
        self.sel.register(proc.stderr, selectors.EVENT_READ, self.err)
        if value_fd is not None:
            self.sel.register(value_fd, selectors.EVENT_READ, self.value)

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
                self.sel.unregister(key.fileobj)
                if isinstance(key.fileobj, int):
                    os.close(key.fileobj)
                continue
            buffer = key.data
            buffer += chunk
            if buffer is self.err and len(buffer) > STDERR_KEEP:
                del buffer[: len(buffer) - STDERR_KEEP]
            elif buffer is not self.err and len(buffer) > self.cap:
                self.over = True
        return bool(self.sel.get_map())

    def _feed(self) -> None:
        try:
            self.sent += os.write(self.stdin.fileno(), self.data[self.sent : self.sent + CHUNK])
        except (BrokenPipeError, BlockingIOError):
            self.sent = len(self.data)
        if self.sent >= len(self.data):
            self.sel.unregister(self.stdin)
            self.stdin.close()

    def close(self) -> None:
        for key in list(self.sel.get_map().values()):
            self.sel.unregister(key.fileobj)
            if isinstance(key.fileobj, int):
                os.close(key.fileobj)
            else:
                key.fileobj.close()


def run_test(argv: list[str], data: bytes, request: dict, call: bool) -> dict:
    limits, kill_all = request["limits"], request["kill_all"]
    value_r = value_w = None
    if call:
        value_r, value_w = os.pipe()
        argv = [*argv, str(value_w)]
    start = time.monotonic()
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        pass_fds=() if value_w is None else (value_w,), start_new_session=True,
        preexec_fn=limiter(limits, 2 if kill_all else 0),
    )
    if value_w is not None:
        os.close(value_w)
    pidfd = os.pidfd_open(proc.pid)
    streams = Streams(proc, data, value_r, limits["output_bytes"])
    streams.sel.register(pidfd, selectors.EVENT_READ, "exit")
    deadline = start + limits["time_s"]
    timed_out = exited = False
    while not exited and not streams.over:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            timed_out = True
            break
        streams.pump(remaining)
        exited = bool(select.select([pidfd], [], [], 0)[0])  # without reaping: its pid stays ours
    elapsed = time.monotonic() - start
    streams.sel.unregister(pidfd)
    os.close(pidfd)
    kill_rest(proc.pid, kill_all)
    drain_until = time.monotonic() + DRAIN_S
    while not streams.over and time.monotonic() < drain_until and streams.pump(drain_until - time.monotonic()):
        pass
    streams.close()
    code = proc.wait()
    return {
        "exit": code,
        "timeout": timed_out,
        "output_limit": streams.over,
        "stdout": streams.out[: limits["output_bytes"]].decode("utf-8", "replace"),
        "stderr": streams.err.decode("utf-8", "replace"),
        "value": streams.value.decode("utf-8", "replace") if call and not streams.over else None,
        "time": round(elapsed, 4),
    }


def main() -> None:
    request = json.loads(sys.stdin.read())
    protect_self()
    emit({"ready": True})
    program, fn_name = request["program"], request["fn_name"]
    with open(program, encoding="utf-8", errors="replace") as handle:
        source = handle.read()
    try:
        compile(source, program, "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as err:  # Python would not run it either
        emit({"syntax_error": "".join(traceback.format_exception_only(type(err), err)).strip()})
        return
    runner = os.path.join(os.path.dirname(os.path.abspath(__file__)), "call.py")
    for index, given in enumerate(request["inputs"]):
        if fn_name is None:
            argv, data = [sys.executable, "-I", program], given.encode("utf-8")
        else:
            argv, data = [sys.executable, "-I", runner, program, fn_name], json.dumps(given).encode("utf-8")
        emit({"i": index, **run_test(argv, data, request, call=fn_name is not None)})


if __name__ == "__main__":
    main()
