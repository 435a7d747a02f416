"""Start N ranks of a Python program the way torchrun does (env:// rendezvous on a free local port)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(rank: int, world: int, port: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1",
        PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests"), env.get("PYTHONPATH", "")]),
    )
    return env


def start(args: list[str], world: int, extra_env: dict[str, str] | None = None) -> list[subprocess.Popen]:
    """``python args...`` once per rank, each with torchrun's environment variables."""
    port = free_port()
    return [
        subprocess.Popen([sys.executable, *args], env={**rank_env(r, world, port), **(extra_env or {})}, cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for r in range(world)
    ]


def finish(procs: list[subprocess.Popen], timeout: float) -> list[tuple[int, str]]:
    """(exit status, stdout + stderr) of every rank; kills all of them if any runs past ``timeout``."""
    out = []
    try:
        for p in procs:
            stdout, stderr = p.communicate(timeout=timeout)
            out.append((p.returncode, stdout + stderr))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return out


def run(args: list[str], world: int, timeout: float = 300,
        extra_env: dict[str, str] | None = None) -> list[tuple[int, str]]:
    return finish(start(args, world, extra_env), timeout)
