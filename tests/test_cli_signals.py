"""A real `thoughttree game24` run stopped by SIGINT or SIGTERM keeps its work and resumes to the clean result."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from run_files import without_clock

ARGS = ["game24", "--device", "cpu", "--method", "io", "--k", "2", "--start", "900", "--end", "905"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "100"}


def cli(*argv: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "thoughttree", *ARGS, *argv], env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def saved_problems(path: Path) -> int:
    try:
        return len(json.loads(path.read_text())["problems"])
    except (OSError, ValueError, KeyError):
        return 0


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("clean") / "run.json"
    proc = cli("--output", str(out))
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    return without_clock(json.loads(out.read_text()))


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stopped_run_saves_its_work_and_resumes_to_the_clean_file(tmp_path, clean_run, sig, code):
    out = tmp_path / "run.json"
    proc = cli("--output", str(out))
    deadline = time.monotonic() + 600
    while saved_problems(out) < 1 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert f"stopped by {signal.Signals(sig).name} after" in err and f"--resume {out}" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    stopped = json.loads(out.read_text())
    assert 1 <= stopped["finished"] < 5 and stopped["problem_count"] == 5
    finished = [p for p in stopped["problems"] if p["result"]["stopped"] != "interrupted"]
    assert len(finished) == stopped["finished"] and len(stopped["problems"]) - len(finished) <= 1
    assert without_clock(finished) == clean_run["problems"][: len(finished)]

    proc = subprocess.Popen([sys.executable, "-m", "thoughttree", *ARGS, "--resume", str(out)], env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert without_clock(json.loads(out.read_text())) == clean_run
