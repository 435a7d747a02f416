"""A test's pipes, seen from the driver: standard input fed, output collected up to the limits.

Part of the sandbox's driver (:mod:`driver`): standard library only.
"""

from __future__ import annotations

import os
import selectors

STDERR_KEEP = 8192
CHUNK = 65536


class Streams:
    """The child's pipes (file descriptors): feeds standard input, collects output up to the limits.

    ``keep_open``: standard input stays open after ``data`` for more (:meth:`send`), until
    :meth:`end_input`.
    """

    def __init__(
        self, stdin: int, stdout: int, stderr: int, value: int | None, data: bytes, cap: int, keep_open: bool = False
    ) -> None:
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
