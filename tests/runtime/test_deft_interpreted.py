"""The runtime through the DeFT kernels (Triton interpreter, float16) against transformers, per architecture.

Each check runs in its own process: TRITON_INTERPRET must be set before triton is first imported,
and setting it here would change how every later test runs the kernels.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tiny_models import ARCHS

SCRIPT = Path(__file__).with_name("deft_interpreted.py")


@pytest.mark.parametrize("arch", ARCHS)
def test_deft_runtime_matches_transformers(arch):
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(SCRIPT), arch], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"{arch}: DeFT runtime matches transformers" in done.stdout
