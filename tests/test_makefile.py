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


def test_make_test_never_asks_for_root(tmp_path) -> None:
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    venv, empty = tmp_path / "venv", tmp_path / "bin"  # a set-up environment; a PATH without bwrap
    (venv / "bin").mkdir(parents=True)
    empty.mkdir()
    (venv / ".installed").touch()
    planned = subprocess.run([make, "-n", "-C", str(ROOT), "test", f"VENV={venv}"], env={"PATH": str(empty)},
                             capture_output=True, text=True, timeout=60)
    assert planned.returncode == 0, planned.stderr
    commands = [line for line in planned.stdout.splitlines() if not line.startswith(("make", "echo"))]
    assert not any("sudo" in line or "apt-get install -y" in line for line in commands), commands
    assert any("pytest" in line for line in commands)
