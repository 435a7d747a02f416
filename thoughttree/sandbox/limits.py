"""What one sandboxed test may use."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """Per-test limits.

    ``time_s`` is the wall-clock limit of one test (CPU time is capped at the next whole second
    plus one); ``memory_mb`` the address space of each process; ``output_bytes`` caps standard
    output, standard error (each on its own), a call's return value and the size of any file written; ``processes`` the
    number of processes and threads the program may run at once.
    """

    time_s: float = 4.0
    memory_mb: int = 1024
    output_bytes: int = 1_000_000
    processes: int = 16

    def __post_init__(self) -> None:
        if not (isinstance(self.time_s, (int, float)) and math.isfinite(self.time_s) and 0 < self.time_s <= 3600):
            raise ValueError(f"Limits.time_s must be a number of seconds in (0, 3600], got {self.time_s!r}")
        for name, low in (("memory_mb", 32), ("output_bytes", 1), ("processes", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"Limits.{name} must be an integer >= {low}, got {value!r}")
