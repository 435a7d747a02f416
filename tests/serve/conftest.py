"""One ``thoughttree serve`` subprocess (the bundled model, CPU) shared by the serving tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest
import torch

from thoughttree.runtime import LM

ROOT = Path(__file__).resolve().parents[2]
MODEL_DIR = ROOT / "thoughttree" / "models" / "game24"
API_KEY = "test-key"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, port: int, process: subprocess.Popen) -> None:
        self.port, self.process, self.api_key = port, process, API_KEY
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self.http = httpx.Client(
            base_url=f"http://127.0.0.1:{port}", timeout=60, headers={"Authorization": f"Bearer {API_KEY}"}
        )

    def health(self, check: bool = False) -> dict:
        response = self.http.get("/health", params={"check": "true"} if check else None)
        response.raise_for_status()
        return response.json()

    def wait_idle(self, timeout_s: float = 30) -> dict:
        """The health report once no request runs or waits and the KV pool is empty."""
        deadline = time.monotonic() + timeout_s
        while True:
            body = self.health(check=True)
            kv = body["kv"]
            if (kv["running"], kv["waiting"], kv["pages_used"], kv["pages_reserved"]) == (0, 0, 0, 0):
                return body
            if time.monotonic() > deadline:
                raise AssertionError(f"the server did not go idle: {kv}")
            time.sleep(0.05)


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    port = free_port()
    # One thread per process: the server and the test process share the cores with each other.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "THOUGHTTREE_API_KEY": API_KEY, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "thoughttree",
            "serve",
            "--port",
            str(port),
            "--device",
            "cpu",
            "--chat-template",
            "plain",
            "--max-n",
            "64",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    srv = Server(port, process)
    deadline = time.monotonic() + 120
    try:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the server exited with {process.returncode}: {process.stdout.read()}")
            try:
                if srv.http.get("/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the server did not start within 120 s")
            time.sleep(0.2)
        yield srv
    finally:
        srv.http.close()
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="session")
def local_lm() -> Iterator[LM]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the server runs beside this process; a tiny model gains nothing from more
    try:
        yield LM.from_pretrained(MODEL_DIR, device="cpu")
    finally:
        torch.set_num_threads(threads)
