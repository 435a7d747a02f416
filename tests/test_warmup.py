"""``thoughttree warmup`` and the persistent Triton cache it fills."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from thoughttree import LM, RuntimeConfig
from thoughttree.cli import main
from thoughttree.kernels.cache import CACHE_ENV, default_cache_dir, use_persistent_cache
from thoughttree.runtime.warmup import warm_up


def test_the_cache_defaults_to_the_user_cache_directory_and_keeps_one_that_is_set(tmp_path) -> None:
    assert default_cache_dir({"XDG_CACHE_HOME": str(tmp_path), "HOME": "/h"}) == tmp_path / "thoughttree" / "triton"
    assert default_cache_dir({"HOME": "/h"}) == Path("/h/.cache/thoughttree/triton")
    env = {"HOME": "/h", CACHE_ENV: ""}
    assert use_persistent_cache(env) == Path("/h/.cache/thoughttree/triton")
    assert env[CACHE_ENV] == "/h/.cache/thoughttree/triton"
    env = {"HOME": "/h", CACHE_ENV: str(tmp_path)}
    assert use_persistent_cache(env) == tmp_path and env[CACHE_ENV] == str(tmp_path)


def test_importing_the_kernels_names_the_cache_before_anything_compiles(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in (CACHE_ENV, "XDG_CACHE_HOME")} | {"HOME": str(tmp_path)}
    code = "import os, thoughttree.kernels; print(os.environ['TRITON_CACHE_DIR'])"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == str(tmp_path / ".cache" / "thoughttree" / "triton")


def test_warm_up_runs_each_batch_and_leaves_the_pool_empty(tiny_model_dir) -> None:
    lm = LM.from_pretrained(tiny_model_dir, device="cpu", runtime=RuntimeConfig(page_size=4, num_pages=256))
    report = warm_up(lm, prompt_tokens=20, branches=(1, 3), tokens=2)
    assert [s.branches for s in report.shapes] == [1, 3]
    assert all(s.forward_steps == 3 for s in report.shapes)  # prefill + step 0, step 1, the scores
    assert report.compiles is False and report.cache_dir is None and report.attention == "reference"
    assert lm.kv.pool.num_used == 0
    with pytest.raises(ValueError, match="do not fit the model's context"):
        warm_up(lm, prompt_tokens=lm.max_context, branches=(1,))
    with pytest.raises(ValueError, match="branch counts must be at least 1"):
        warm_up(lm, prompt_tokens=4, branches=(0,))


def test_the_command_on_the_cpu_says_it_has_nothing_to_do(capsys, monkeypatch) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert main(["warmup", "--device", "cpu"]) == 0
    said = capsys.readouterr().out
    assert said == "warmup: nothing to compile on the CPU (its steps run PyTorch, not Triton kernels); nothing done\n"


def test_the_command_warms_each_batch_size_given(tiny_model_dir, capsys, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    device, dtype = ("cuda", "bfloat16") if torch.cuda.is_available() else ("cpu", "float16")  # the CPU interprets
    code = main(
        [
            "warmup",
            "--model",
            str(tiny_model_dir),
            "--device",
            device,
            "--dtype",
            dtype,
            "--attention",
            "deft",
            "--branches",
            "1,2",
            "--prompt-tokens",
            "12",
            "--tokens",
            "2",
        ]
    )
    out = capsys.readouterr().out.splitlines()
    assert code == 0
    assert [line.split(":")[1] for line in out[:2]] == [f" {n} branches on a 12-token prompt" for n in (1, 2)]
    if device == "cuda":
        assert out[2].startswith("warmup: kernels compiled for cuda") and f"are kept in {tmp_path}" in out[2]
    else:
        assert out[2].startswith("warmup: cpu with deft attention compiles no Triton kernels")
    with pytest.raises(SystemExit) as exit_:
        main(["warmup", "--branches", "2,x"])
    assert exit_.value.code == 2 and "expected branch counts like 1,4,16, got '2,x'" in capsys.readouterr().err
