"""A device thoughttree cannot run on is refused before torch is imported."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

COMMANDS = [["game24", "--end", "901"], ["bench"], ["demo"], ["apps", "--model", "bundled", "--end", "1"]]
DEVICES = [
    ("tpu", "--device 'tpu' is not a device; use cpu or cuda"),
    ("mps", "--device mps: thoughttree runs on cpu or cuda, not mps"),
    ("cuda:x", "--device 'cuda:x' is not a device"),
]

# Every case in one fresh process (importing the CLI is most of a case's time): each call's exit
# status, its stderr, and whether torch had been imported after it.
PROBE = """
import contextlib, io, json, sys
from thoughttree.cli import main
out = []
for args in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            code = main(args)
        except SystemExit as exc:
            code = exc.code
    out.append({"code": code, "stderr": err.getvalue(), "torch": "torch" in sys.modules})
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def refusals() -> dict[tuple[str, ...], dict]:
    cases = [[*command, "--device", device] for device, _ in DEVICES for command in COMMANDS]
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(cases)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return {tuple(case): result for case, result in zip(cases, json.loads(done.stdout))}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("device,message", DEVICES)
def test_a_bad_device_is_refused_before_torch_loads(refusals, command: list[str], device: str, message: str):
    done = refusals[(*command, "--device", device)]
    assert done["code"] == 2, done["stderr"]
    assert message in done["stderr"] and len(done["stderr"].strip().splitlines()) == 1
    assert not done["torch"], "torch was imported"
