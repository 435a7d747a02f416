"""The candidate a checking function calls (HumanEval's ``check(candidate)``): each call goes to
the test's process, which calls the program's function and answers in :mod:`wire` format.

Part of the sandbox's driver (:mod:`driver`): standard library only. The check runs in the
driver; the program can neither reach the check's expected values nor answer with an object that
compares equal to anything. Every call carries a fresh random nonce that its answer must repeat,
and the check counts only once the program has acknowledged its end (a last nonce).
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING

import wire  # next to this file (the driver puts that folder on sys.path to import it)

if TYPE_CHECKING:
    from driver import TestRun


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
