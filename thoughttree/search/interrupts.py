"""SIGINT and SIGTERM during a run: remembered, turned into KeyboardInterrupt only where that is safe."""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

EXIT_CODES: dict[int, int] = {signal.SIGINT: 130, signal.SIGTERM: 143}  # the shell's 128 + signal number


class Interrupts:
    """SIGINT and SIGTERM handlers: remember the first signal; raise KeyboardInterrupt only while armed."""

    def __init__(self) -> None:
        self.signal: int | None = None
        self.armed = False
        self._old: dict[int, Any] = {}

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():
            for sig in EXIT_CODES:
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signal is None:
            self.signal = signum
        if self.armed:
            self.armed = False
            raise KeyboardInterrupt
