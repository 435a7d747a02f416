"""Run one program against its tests in the sandbox and judge every test in the parent, as its
record arrives."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import threading
from dataclasses import asdict
from typing import Any, Callable, Iterable, Sequence, cast

from .check import Check
from .compare import outputs_match, values_match
from .isolation import Launch, SandboxUnavailable, launch
from .limits import Limits
from .result import Status, TestResult, excerpt
from .wire import WireError, decode

Test = tuple[Any, Any]
STARTUP_S = 10.0
PER_TEST_S = 2.0
STOP_WAIT_S = 5.0
ERRORS_KEEP = 1 << 16  # the end of the driver's own error output
FULL_DISK = ("File too large", "No space left on device")  # file-size limit, scratch full
RECORD_FIELDS: dict[str, type | tuple[type, ...]] = {
    "i": int, "exit": int, "timeout": bool, "output_limit": bool, "stdout": str, "stderr": str,
    "value": (str, type(None)), "time": (int, float),
}


def checked_tests(tests: Iterable[Sequence[Any]], fn_name: str | None) -> list[Test]:
    """The tests as (input, expected) pairs; ValueError naming the first that is not one."""
    pairs: list[Test] = []
    for index, test in enumerate(tests):
        if not (isinstance(test, (tuple, list)) and len(test) == 2):
            raise ValueError(f"test {index} must be an (input, expected) pair, got {test!r:.80}")
        given, expected = test
        kind = type(given).__name__
        if fn_name is None and not isinstance(given, str):
            raise ValueError(f"test {index}: a standard-input test's input must be a string, got {kind}")
        if fn_name is not None and not isinstance(given, (list, tuple)):
            raise ValueError(f"test {index}: a call-based test's input must be the list of arguments, got {kind}")
        if fn_name is None and isinstance(expected, Check):
            raise ValueError(f"test {index}: a Check judges a call-based test; give fn_name")
        pairs.append((given if fn_name is None else list(given), expected))
    return pairs


def _request(spec: Launch, pairs: list[Test], fn_name: str | None, limits: Limits, fresh: bool) -> bytes:
    try:
        return json.dumps({
            "program": spec.program, "inputs": [given for given, _ in pairs], "fn_name": fn_name,
            "checks": [expected.source if isinstance(expected, Check) else None for _, expected in pairs],
            "limits": asdict(limits), "kill_all": spec.kill_all, "fresh": fresh,
        }).encode("utf-8")
    except (TypeError, ValueError) as err:
        raise ValueError(f"call arguments must be JSON values (lists, dicts, numbers, strings): {err}") from None


def _stop(proc: subprocess.Popen, spec: Launch) -> None:
    """Kill a sandbox that is still running: its PID namespace's init first (the kernel then kills
    every process in the namespace and bubblewrap reaps it), then bubblewrap's process group.
    Nothing is signalled once bubblewrap has been reaped, since its ids may then be reused."""
    if proc.poll() is not None:
        return
    if spec.info_fd is not None:
        os.set_blocking(spec.info_fd, False)
        try:
            pid = json.loads(os.read(spec.info_fd, 4096) or b"{}").get("child-pid")
        except (BlockingIOError, ValueError):
            pid = None
        if isinstance(pid, int):
            try:
                os.kill(pid, signal.SIGKILL)  # bubblewrap's child, not yet reaped: still that process
                proc.wait(STOP_WAIT_S)
                return
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _execute(
    spec: Launch, request: bytes, budget: float, on_line: Callable[[bytes], bool], line_limit: int
) -> tuple[str, bool]:
    """Run the driver on ``request``, handing each line it prints to ``on_line`` as it comes (a
    False answer stops the reading) within ``budget`` seconds; (the end of its error output,
    whether the budget ran out). Only one line is held at a time, whatever a program prints."""
    try:
        proc = subprocess.Popen(
            spec.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            cwd=spec.cwd, env=spec.env or {}, pass_fds=spec.pass_fds, start_new_session=True,
            user=spec.user, group=spec.user, extra_groups=None if spec.user is None else [],
        )
    except OSError as err:
        raise SandboxUnavailable(f"cannot start {spec.argv[0]}: {err}") from None
    stdin, stdout, stderr = proc.stdin, cast(io.BufferedReader, proc.stdout), cast(io.BufferedReader, proc.stderr)
    assert stdin is not None and stdout is not None and stderr is not None  # all three are pipes
    stopping, expired = threading.Lock(), threading.Event()
    errors = bytearray()

    def stop() -> None:
        with stopping:
            _stop(proc, spec)

    def expire() -> None:
        expired.set()
        stop()

    def feed() -> None:
        try:
            stdin.write(request)
            stdin.close()
        except OSError:  # the driver is gone; its end of the story is on its other pipes
            pass

    def collect() -> None:
        for chunk in iter(lambda: stderr.read1(1 << 16), b""):
            errors.extend(chunk)
            del errors[:-ERRORS_KEEP]

    helpers = [threading.Thread(target=feed, daemon=True), threading.Thread(target=collect, daemon=True)]
    timer = threading.Timer(budget, expire)
    for thread in (*helpers, timer):
        thread.start()
    try:
        for line in iter(lambda: stdout.readline(line_limit), b""):
            if not on_line(line):
                break
    finally:
        timer.cancel()
        stop()
        for thread in helpers:
            thread.join()
        for pipe in (stdin, stdout, stderr):
            try:
                pipe.close()
            except OSError:
                pass
    return errors.decode("utf-8", "replace"), expired.is_set()


def _record(line: bytes, index: int) -> dict | None:
    """The driver's record of test ``index`` from ``line``, or None when the line is not one."""
    if not line.endswith(b"\n"):
        return None  # cut short when the driver was killed, or longer than any record can be
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict) or record.get("i") != index:
        return None
    if not isinstance(record.get("check"), (str, type(None))):
        return None
    for name, kind in RECORD_FIELDS.items():
        if not isinstance(record.get(name), kind) or (kind is int and isinstance(record[name], bool)):
            return None
    return record


class _Records:
    """The driver's lines, taken one at a time: ``ready``, then a syntax error or each test's
    record in order, judged as it comes (only the verdict is kept)."""

    READY = b'{"ready": true}\n'

    def __init__(self, pairs: list[Test], fn_name: str | None) -> None:
        self.pairs, self.fn_name = pairs, fn_name
        self.results: list[TestResult] = []
        self.ready = self.malformed = False
        self.syntax_error: str | None = None

    def take(self, line: bytes) -> bool:
        """Take one line; False when no more should be read."""
        if not self.ready:
            self.ready = line == self.READY
            return self.ready
        done = len(self.results)
        record = _record(line, done)
        if record is None:
            found = _syntax_error(line) if done == 0 else None
            self.syntax_error, self.malformed = found, found is None and line.endswith(b"\n")
            return False
        self.results.append(_verdict(record, self.pairs[done][1], self.fn_name))
        return done + 1 < len(self.pairs)


def _syntax_error(line: bytes) -> str | None:
    try:
        found = json.loads(line)
    except (ValueError, RecursionError):
        return None
    text = found.get("syntax_error") if isinstance(found, dict) and len(found) == 1 else None
    return text if isinstance(text, str) else None


def _verdict(record: dict, expected: Any, fn_name: str | None) -> TestResult:
    stdout, stderr, code = record["stdout"], record["stderr"], record["exit"]
    status: Status = "passed"
    if record["output_limit"] or (code != 0 and any(text in stderr for text in FULL_DISK)):
        status = "output_limit"
    elif record["timeout"] or code == -signal.SIGXCPU:  # the wall clock, or the CPU-time limit
        status = "timeout"
    elif code != 0:
        status = "memory_limit" if "MemoryError" in stderr else "runtime_error"
    elif isinstance(expected, Check):
        verdict = record.get("check")
        if verdict is None:
            status, stderr = "runtime_error", stderr + "\n(the program ended before the check finished)"
        elif verdict != "passed":
            status, stderr = "wrong_answer", f"{stderr}\n(the check failed: {verdict})"
    elif fn_name is None:
        status = "passed" if expected is None or outputs_match(stdout, expected) else "wrong_answer"
    elif not record["value"]:
        status, stderr = "runtime_error", stderr + "\n(the program ended before the function returned)"
    else:
        try:
            status = "passed" if values_match(decode(record["value"]), expected) else "wrong_answer"
        except WireError as err:
            status, stderr = "runtime_error", f"{stderr}\n({err})"
    return TestResult(status, excerpt(stdout), excerpt(stderr.strip(), tail=True), record["time"], code)


def run_tests(
    program: str,
    tests: Iterable[Sequence[Any]],
    *,
    fn_name: str | None = None,
    limits: Limits = Limits(),
    isolation: str = "bwrap",
    bwrap: str = "bwrap",
    fresh_interpreter: bool = False,
) -> list[TestResult]:
    """Run ``program`` on every test in one sandbox; one :class:`TestResult` per test, in order.

    A test is ``(input, expected)``. Without ``fn_name`` the input is the program's standard
    input and ``expected`` its standard output (``None``: any output, as long as it exits
    cleanly). With ``fn_name`` the input is the list of arguments of that function (a top-level
    function, or a method of a class ``Solution`` as in LeetCode-style APPS problems) and
    ``expected`` its return value, or a :class:`Check` whose function judges the program's
    function (HumanEval's ``check``). Expected values never leave this process; a Check's source
    goes to the sandbox's driver, which the program cannot reach, and the tests of a program with
    any Check start fresh interpreters (a forked test would hold the driver's memory).

    Each test runs in a process of its own, forked from the sandbox's driver once the program is
    compiled, and runs the program as ``python -I`` would: the same streams, exit status,
    traceback, thread wait and exit handlers. Its tests share the driver's hash seed and the
    standard modules it imported. ``fresh_interpreter=True`` starts a new interpreter for every
    test instead (slower: an interpreter start per test; BENCHMARKS.md, sandbox section).

    ``isolation`` is ``"bwrap"`` (bubblewrap, the ``bwrap`` executable) or, by name only,
    ``"none-unsafe"``; see :mod:`thoughttree.sandbox.isolation`. Raises
    :class:`SandboxUnavailable` when the isolation cannot be set up.
    """
    if not isinstance(program, str):
        raise TypeError(f"program must be Python source text, got {type(program).__name__}")
    if fn_name is not None and not (isinstance(fn_name, str) and fn_name.isidentifier()):
        raise ValueError(f"fn_name must be a Python identifier, got {fn_name!r}")
    if not isinstance(limits, Limits):
        raise TypeError(f"limits must be a thoughttree.sandbox.Limits, got {type(limits).__name__}")
    pairs = checked_tests(tests, fn_name)
    if not pairs:
        return []
    records = _Records(pairs, fn_name)
    with launch(program, isolation, bwrap) as spec:
        request = _request(spec, pairs, fn_name, limits, fresh_interpreter)
        budget = STARTUP_S + len(pairs) * (limits.time_s + PER_TEST_S)
        errors, timed_out = _execute(spec, request, budget, records.take, 16 * limits.output_bytes + (1 << 20))
    if not records.ready:
        if isolation == "bwrap" and "bwrap:" in errors:
            raise SandboxUnavailable(
                f"bubblewrap could not build the sandbox ({errors.strip().splitlines()[-1]}); it needs "
                "unprivileged user namespaces (sysctl user.max_user_namespaces > 0, and on Ubuntu "
                "kernel.apparmor_restrict_unprivileged_userns=0)"
            )
        raise RuntimeError(f"the sandbox driver did not start: {errors.strip()[-500:] or 'no error output'}")
    if records.syntax_error is not None:
        return [TestResult("syntax_error", stderr=excerpt(records.syntax_error, tail=True)) for _ in pairs]
    if records.malformed:
        why = "sent a record it could not have written"
    else:
        why = "ran out of time" if timed_out else "ended early (the program stopped its driver)"
    why += f"\n{errors.strip()[-500:]}" if errors.strip() else ""
    missing = TestResult("timeout" if timed_out else "runtime_error", stderr=f"not run: the sandbox {why}")
    return records.results + [missing] * (len(pairs) - len(records.results))
