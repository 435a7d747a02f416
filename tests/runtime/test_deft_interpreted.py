"""The runtime through the DeFT kernels (Triton interpreter, float16) against transformers, per architecture.

The checks run in a process of their own, every architecture in one: TRITON_INTERPRET must be set
before triton is first imported, and setting it here would change how every later test runs the
kernels.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tiny_models import ARCHS

SCRIPT = Path(__file__).with_name("deft_interpreted.py")


@pytest.fixture(scope="module")
def checked() -> subprocess.CompletedProcess:
    """The script run over every architecture: a line each, its match or why it does not."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(SCRIPT), *ARCHS], env=env, capture_output=True, text=True, timeout=1200)


@pytest.mark.parametrize("arch", ARCHS)
def test_deft_runtime_matches_transformers(checked, arch):
    assert f"{arch}: DeFT runtime matches transformers" in checked.stdout.splitlines(), (
        checked.stdout[-3000:] + checked.stderr[-2000:]
    )
