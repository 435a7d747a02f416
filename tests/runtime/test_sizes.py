"""Sizes that cannot fit the KV pool are refused before any search, with the largest that fits."""

from __future__ import annotations

import glob
import os

import pytest

from thoughttree.cli import main


@pytest.mark.parametrize(
    "argv,message",
    [
        (
            ["--method", "io", "--k", "1000000000"],
            r"--k = 1000000000 branches per expansion.*the largest --k that fits ",
        ),
        (["--breadth", "1000000000", "--samples", "1000000000"], r"--breadth x --samples must be at most \d+$"),
        (["--breadth", "5", "--samples", "100000"], r"must be at most \d+ \(with the other as given: --samples \d+\)$"),
        (["--method", "mcts", "--samples", "100000"], r"the largest --samples that fits is \d+"),
    ],
)
def test_sizes_beyond_the_kv_pool_are_refused_with_the_largest_that_fits(capsys, argv: list[str], message: str):
    import re

    assert main(["game24", *argv, "--end", "901"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and re.search(message, err), err


def test_the_largest_value_given_fits(capsys):
    assert main(["game24", "--method", "io", "--k", "1000000000", "--end", "901"]) == 2
    largest = int(capsys.readouterr().err.strip().rsplit(" ", 1)[1])
    assert largest > 10
    from thoughttree.search.game24_methods import Game24Run, check_sizes_fit
    from thoughttree.commands.model import load_model

    lm = load_model("bundled", "cpu", None)
    check_sizes_fit(lm, Game24Run(method="io", k=largest, end=901))
    with pytest.raises(ValueError, match="the largest --k that fits"):
        check_sizes_fit(lm, Game24Run(method="io", k=largest + 1, end=901))


def test_scratch_folders_of_dead_processes_are_removed(tmp_path):
    import subprocess
    import sys

    from thoughttree.search.data_parallel import scratch_folder

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = tmp_path / f"thoughttree-part-{int(gone.stdout)}-abc"
    unnamed = tmp_path / "thoughttree-part-xyz"  # no owner named: never taken for a dead one
    live = tmp_path / f"thoughttree-part-{os.getppid()}-def"
    for folder in (dead, unnamed, live):
        folder.mkdir()
    (dead / "part.json").write_text("{}")
    mine = scratch_folder(tmp_path)
    assert mine.is_dir() and mine.name.startswith(f"thoughttree-part-{os.getpid()}-")
    assert not dead.exists() and unnamed.exists() and live.exists()
    assert sorted(glob.glob(str(tmp_path / "thoughttree-part-*"))) == sorted(map(str, [mine, live, unnamed]))


@pytest.mark.parametrize(
    "argv,message",
    [
        (["humaneval", "--method", "io", "--k", "1000000"], r"the largest --k that fits is \d+$"),
        (["apps", "--method", "bon", "--samples", "1000000"], r"the largest --samples that fits is \d+$"),
        (
            ["apps", "--method", "beam", "--samples", "1000", "--width", "1000"],
            r"--width x --samples must be at most \d+$",
        ),
    ],
)
def test_code_commands_check_their_sizes_too(capsys, argv: list[str], message: str):
    import re

    assert main([*argv, "--model", "bundled", "--end", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and re.search(message, err), err


def test_kv_pages_sizes_a_local_pool_within_the_machine(capsys):
    from thoughttree.commands.model import load_model
    from thoughttree.runtime.memory import NotEnoughMemory, check_host_pool
    from thoughttree.search.game24_methods import Game24Run, check_sizes_fit

    lm = load_model("bundled", "cpu", None, num_pages=9000)
    assert lm.kv.pool.num_pages == 9000
    check_sizes_fit(lm, Game24Run(method="io", k=800, end=901))  # beyond the default CPU pool's 186
    assert main(["game24", "--device", "cpu", "--kv-pages", "1000000000", "--end", "901"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--kv-pages 1000000000: the KV pool asked for" in err, err
    assert "larger than this machine's memory" in err and "ask for at most" in err
    assert main(["game24", "--model", "http://127.0.0.1:9/v1", "--kv-pages", "10", "--end", "901"]) == 2
    assert "--kv-pages sizes a local model's KV pool" in capsys.readouterr().err
    check_host_pool(4, 1 << 20, "num_pages=4", total_bytes=4 << 20)
    with pytest.raises(NotEnoughMemory, match="ask for at most 4 pages"):
        check_host_pool(5, 1 << 20, "num_pages=5", total_bytes=4 << 20)


def test_a_cpu_pool_given_in_bytes_larger_than_the_machine_is_refused():
    from thoughttree import LM, RuntimeConfig
    from thoughttree.commands.model import bundled_model_path
    from thoughttree.runtime.memory import NotEnoughMemory

    with pytest.raises(NotEnoughMemory, match=r"kv_memory_bytes=10{15}: .* is larger than this machine's memory"):
        LM.from_pretrained(bundled_model_path(), device="cpu", runtime=RuntimeConfig(kv_memory_bytes=10**15))
