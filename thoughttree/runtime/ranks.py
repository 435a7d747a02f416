"""Which process of a distributed launch this is, and the errors of distributed runs.

Free of torch imports, so commands that only read files stay quick to start: a process group
can only exist once ``torch.distributed`` has been imported.
"""

from __future__ import annotations

import sys


class ParallelError(RuntimeError):
    """A distributed setup that cannot work: wrong launch, world, or model shape."""


class RankFailure(RuntimeError):
    """A collective failed (another rank died or stopped answering): this rank cannot go on."""


def is_main_process() -> bool:
    """True outside a distributed launch and on global rank 0 inside one (the rank that writes and draws)."""
    dist = sys.modules.get("torch.distributed")
    return dist is None or not dist.is_available() or not dist.is_initialized() or dist.get_rank() == 0
