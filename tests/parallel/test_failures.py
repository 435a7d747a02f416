"""Clear errors for a launch that cannot work, and a bounded stop when a rank dies or hangs."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch.distributed as dist
from launch import finish, free_port, start

from thoughttree import LM, RuntimeConfig
from thoughttree.runtime.parallel import ParallelError

WORKER = str(Path(__file__).with_name("dying_rank.py"))


@pytest.fixture
def launch_env(monkeypatch):
    """torchrun's variables for a world of ``n`` ranks on a free local port; the group is torn down after."""

    def set_world(n: int) -> None:
        for name, value in dict(RANK="0", LOCAL_RANK="0", WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1",
                                MASTER_PORT=str(free_port())).items():
            monkeypatch.setenv(name, value)

    yield set_world
    if dist.is_initialized():
        dist.destroy_process_group()


@pytest.mark.parametrize("size, what", [(3, "4 query heads"), (4, "2 KV heads")])
def test_heads_must_divide(tiny_model_dir, size: int, what: str) -> None:
    with pytest.raises(ParallelError, match=f"{what} do not divide by tensor_parallel={size}"):
        LM.from_pretrained(tiny_model_dir, device="cpu", tensor_parallel=size)


def test_needs_a_launch(tiny_model_dir, monkeypatch) -> None:
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ParallelError, match="no process group.*torchrun --nproc-per-node N"):
        LM.from_pretrained(tiny_model_dir, device="cpu", tensor_parallel=2)


def test_world_must_match(tiny_model_dir, launch_env) -> None:
    launch_env(1)
    with pytest.raises(ParallelError, match="tensor_parallel=2 does not match the world of 1 ranks.*--nproc-per-node 2"):
        LM.from_pretrained(tiny_model_dir, device="cpu", tensor_parallel=2)


def test_group_that_cannot_form(tiny_model_dir, launch_env) -> None:
    launch_env(2)  # rank 1 never comes
    began = time.perf_counter()
    with pytest.raises(ParallelError, match="cannot form the gloo process group of 2 ranks.*every rank was started"):
        LM.from_pretrained(tiny_model_dir, device="cpu", tensor_parallel=2,
                           runtime=RuntimeConfig(collective_timeout_s=2))
    assert time.perf_counter() - began < 30


def test_dying_rank_stops_the_run_without_a_run_file(tmp_path) -> None:
    output = tmp_path / "run.json"
    procs = start([WORKER, "game24", "--device", "cpu", "--tensor-parallel", "2", "--start", "900",
                   "--end", "901", "--output", str(output)], world=2)
    (status0, text0), (status1, _) = finish(procs, timeout=150)
    assert status1 == 9
    assert status0 == 1, text0[-2000:]
    assert "error: tensor-parallel all-reduce failed on rank 0 of 2: another rank died" in text0
    assert "Traceback" not in text0
    assert not output.exists()


def test_silent_rank_stops_the_run_with_status_1(tmp_path) -> None:
    """A peer that stops answering: the other rank stops after --collective-timeout with the CLI's
    status 1 and one error line (tearing down the broken gloo group could otherwise abort it),
    while the silent peer is still alive."""
    output = tmp_path / "run.json"
    began = time.perf_counter()
    procs = start([WORKER, "game24", "--device", "cpu", "--tensor-parallel", "2", "--collective-timeout", "3",
                   "--start", "900", "--end", "901", "--output", str(output)], world=2, extra_env={"RANK1_HANGS": "300"})
    try:
        (status0, text0), = finish(procs[:1], timeout=150)
        peer_alive = procs[1].poll() is None
    finally:
        procs[1].kill()
        procs[1].communicate()
    assert peer_alive, "the silent rank ended before rank 0 gave up on it"
    assert status0 == 1, text0[-2000:]
    assert "error: tensor-parallel all-reduce failed on rank 0 of 2" in text0 and "within 3s" in text0
    assert "Traceback" not in text0
    assert not output.exists()
    assert time.perf_counter() - began < 120
