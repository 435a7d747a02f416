"""Where compiled Triton kernels are kept between processes.

Triton compiles each kernel variant on its first launch and keeps the binary in the directory
``TRITON_CACHE_DIR`` names. When that is unset, thoughttree names one under the user's cache
directory (``$XDG_CACHE_HOME/thoughttree/triton``, else ``~/.cache/thoughttree/triton``) before
any kernel compiles, so ``thoughttree warmup`` fills a known place that every later process on
the machine reads, and a user can see, move or clear it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, MutableMapping

CACHE_ENV = "TRITON_CACHE_DIR"


def default_cache_dir(env: Mapping[str, str]) -> Path:
    """The cache directory thoughttree names when ``env`` has no ``TRITON_CACHE_DIR``."""
    base = env.get("XDG_CACHE_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".cache")
    return Path(base) / "thoughttree" / "triton"


def use_persistent_cache(env: MutableMapping[str, str] | None = None) -> Path:
    """Set ``TRITON_CACHE_DIR`` in ``env`` (the process environment by default) to the default
    directory unless it is set already; returns the directory Triton will use."""
    env = os.environ if env is None else env
    if not env.get(CACHE_ENV):
        env[CACHE_ENV] = str(default_cache_dir(env))
    return Path(env[CACHE_ENV])
