"""A device thoughttree cannot run on is refused before torch is imported."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import sys
from thoughttree.cli import main
code = main(sys.argv[1:])
print("torch imported" if "torch" in sys.modules else "torch not imported")
sys.exit(code)
"""


@pytest.mark.parametrize(
    "command", [["game24", "--end", "901"], ["bench"], ["demo"], ["apps", "--model", "bundled", "--end", "1"]]
)
@pytest.mark.parametrize(
    "device,message",
    [
        ("tpu", "--device 'tpu' is not a device; use cpu or cuda"),
        ("mps", "--device mps: thoughttree runs on cpu or cuda, not mps"),
        ("cuda:x", "--device 'cuda:x' is not a device"),
    ],
)
def test_a_bad_device_is_refused_before_torch_loads(command: list[str], device: str, message: str):
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *command, "--device", device], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert done.stdout.strip() == "torch not imported"
