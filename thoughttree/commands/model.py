"""The model a command runs: ``--model``, ``--device``, ``--dtype`` and ``--attention``, checked up front.

torch is imported here only when a model is loaded, so commands that read run files start fast.
"""

from __future__ import annotations

import argparse
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import RuntimeConfig
from ..runtime.ranks import ParallelError
from .common import CliError
from .launch import add_tensor_parallel

if TYPE_CHECKING:
    from ..runtime import LM

ATTENTION = ("auto", "deft", "per_sequence", "reference")


def bundled_model_path() -> Path:
    """The Game of 24 model shipped inside the package."""
    return Path(str(resources.files("thoughttree").joinpath("models/game24")))


def is_bundled(spec: str) -> bool:
    """``spec`` names the bundled model: the word ``bundled`` or a path to its directory."""
    if spec == "bundled":
        return True
    try:
        return Path(spec).resolve() == bundled_model_path().resolve()
    except OSError:
        return False


def add_model_arguments(p: argparse.ArgumentParser, *, dtype: bool = True) -> None:
    p.add_argument("--model", default="bundled", help="'bundled' (default) or a local Hugging Face model directory")
    p.add_argument("--device", help="cuda or cpu (default: cuda when available)")
    if dtype:
        p.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), help="weights and KV dtype")
    p.add_argument("--attention", choices=ATTENTION, default="auto",
                   help="tree-attention backend: deft (Triton kernels, 16-bit, GPU), per_sequence, reference "
                        "(PyTorch); auto picks deft on a GPU with 16-bit weights, else reference")
    add_tensor_parallel(p)


def check_device(device: str | None) -> None:
    """A one-line error for a device this torch cannot run on."""
    if device is None:
        return
    from ..runtime.lm import resolve_device

    try:
        resolve_device(device)
    except ValueError as exc:  # "device ...": the option that gave it
        raise CliError(f"--{exc}") from None


def load_model(
    spec: str, device: str | None, dtype: str | None, attention: str = "auto", tensor_parallel: int = 1,
    collective_timeout_s: float = RuntimeConfig.collective_timeout_s,
) -> LM:
    """Load ``spec`` (``bundled`` or a directory) with a one-line error for anything wrong."""
    from ..runtime import LM, ModelLoadError

    check_device(device)
    path = bundled_model_path() if spec == "bundled" else Path(spec)
    try:
        runtime = RuntimeConfig(attention=attention, collective_timeout_s=collective_timeout_s)
        lm = LM.from_pretrained(path, device=device, dtype=dtype, runtime=runtime, tensor_parallel=tensor_parallel)
    except ModelLoadError as exc:
        raise CliError(f"--model {spec}: {exc}") from exc
    except ParallelError as exc:
        raise CliError(f"--tensor-parallel {tensor_parallel}: {exc}") from exc
    except ValueError as exc:  # the device, dtype and attention backend, checked before loading
        raise CliError(str(exc)) from exc
    return lm
