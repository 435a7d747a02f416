"""`make demo` runs the demo without the sandbox's tools, which only the code tasks need."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_make_demo_needs_no_bubblewrap(tmp_path) -> None:
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    venv, empty = tmp_path / "venv", tmp_path / "bin"  # a set-up environment; a PATH with neither bwrap nor apt-get
    (venv / "bin").mkdir(parents=True)
    empty.mkdir()
    demo = venv / "bin" / "thoughttree"
    demo.write_text('#!/bin/sh\necho "thoughttree $@"\n')
    demo.chmod(0o755)
    (venv / ".installed").touch()
    done = subprocess.run([make, "-s", "-C", str(ROOT), "demo", f"VENV={venv}"], env={"PATH": str(empty)},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "thoughttree demo"


def test_make_test_never_asks_for_sudo_and_says_how_to_install_bubblewrap(tmp_path) -> None:
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    venv, tools = tmp_path / "venv", tmp_path / "bin"  # no bwrap on PATH; a user who is not root
    (venv / "bin").mkdir(parents=True)
    tools.mkdir()
    calls = tmp_path / "calls"
    stubs = {"sudo": f'echo "sudo $@" >> {calls}\nexit 1', "apt-get": f'echo "apt-get $@" >> {calls}\nexit 1',
             "id": "echo 1000"}
    for name, script in stubs.items():
        (tools / name).write_text(f"#!/bin/sh\n{script}\n")
        (tools / name).chmod(0o755)
    python = venv / "bin" / "python"
    python.write_text('#!/bin/sh\necho "python $@"\n')
    python.chmod(0o755)
    (venv / ".installed").touch()
    done = subprocess.run([make, "-s", "-C", str(ROOT), "test", f"VENV={venv}"], env={"PATH": str(tools)},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert not calls.exists(), calls.read_text()
    assert "bubblewrap (bwrap) is not installed" in done.stderr and "apt-get install bubblewrap" in done.stderr
    assert done.stdout.splitlines()[-1] == "python -m pytest -q -n auto --maxprocesses 4 --dist worksteal -m not slow"
