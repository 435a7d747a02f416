"""The model a command runs: ``--model``, ``--device``, ``--dtype`` and ``--attention``, checked up front.

torch is imported here only when a model is loaded, so commands that read run files start fast.
"""

from __future__ import annotations

import argparse
import re
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import RuntimeConfig
from ..runtime.ranks import ParallelError
from .common import CliError, at_least
from .launch import add_tensor_parallel

if TYPE_CHECKING:
    from ..runtime import LM

ATTENTION = ("auto", "deft", "per_sequence", "reference")


def bundled_model_path() -> Path:
    """The Game of 24 model shipped inside the package."""
    return Path(str(resources.files("thoughttree").joinpath("models/game24")))


def bundled_draft_path() -> Path:
    """The bundled model's draft model for speculative decoding (same tokenizer and data)."""
    return Path(str(resources.files("thoughttree").joinpath("models/game24-draft")))


def is_bundled(spec: str) -> bool:
    """``spec`` names the bundled model: the word ``bundled`` or a path to its directory."""
    if spec == "bundled":
        return True
    try:
        return Path(spec).resolve() == bundled_model_path().resolve()
    except OSError:
        return False


def add_model_arguments(p: argparse.ArgumentParser, *, dtype: bool = True) -> None:
    p.add_argument("--model", default="bundled", help="'bundled' (default), a local Hugging Face model directory, "
                                                      "or an OpenAI-compatible server's URL (http://host:port/v1)")
    add_remote_arguments(p)
    p.add_argument("--device", help="cuda or cpu (default: cuda when available)")
    if dtype:
        p.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), help="weights and KV dtype")
    p.add_argument("--attention", choices=ATTENTION, default="auto",
                   help="tree-attention backend: deft (Triton kernels, 16-bit, GPU), per_sequence, reference "
                        "(PyTorch); auto picks deft on a GPU with 16-bit weights, else reference")
    p.add_argument("--kv-pages", type=at_least(1), metavar="N",
                   help="KV pool pages of a local model (default: sized from memory)")
    add_speculative(p)
    add_tensor_parallel(p)


_DEVICE = re.compile(r"(cpu|cuda)(:\d+)?")
OTHER_TORCH_DEVICES = ("mps", "xpu", "xla", "meta", "hip", "hpu", "ipu", "mtia", "maia", "lazy", "vulkan", "ve",
                       "privateuseone")


def add_remote_arguments(p: argparse.ArgumentParser) -> None:
    """The options of a ``--model`` that is a server's URL."""
    p.add_argument("--remote-model", metavar="NAME", help="with --model URL: the model name the server serves")
    p.add_argument("--remote-tokenizer", metavar="DIR",
                   help="with --model URL: a local tokenizer of the server's model ('bundled' for the bundled "
                        "model's), so nodes hold the server's token ids (default: nodes hold UTF-8 bytes)")
    p.add_argument("--remote-context", type=int, metavar="N",
                   help="with --model URL: the model's context length when the server does not report it")
    p.add_argument("--remote-concurrency", type=int, default=64, metavar="N",
                   help="with --model URL: most requests in flight at once (default 64)")


def remote_options(args: argparse.Namespace) -> dict[str, Any]:
    """The remote-model options of a command line, for :func:`load_model`."""
    return {"remote_model": getattr(args, "remote_model", None),
            "remote_tokenizer": getattr(args, "remote_tokenizer", None),
            "remote_context": getattr(args, "remote_context", None),
            "remote_concurrency": getattr(args, "remote_concurrency", 64)}


def is_remote(spec: str) -> bool:
    return spec.startswith(("http://", "https://"))


def load_remote(spec: str, model: str | None, tokenizer: str | None, context: int | None, concurrency: int) -> Any:
    """A :class:`~thoughttree.serve.remote.RemoteLM` for ``--model URL``, with one-line errors."""
    if not model:
        raise CliError(f"--model {spec} is a server: name its model with --remote-model NAME")
    try:
        from ..serve.remote import RemoteConfig, RemoteError, RemoteLM
    except ImportError as exc:
        raise CliError(f"a remote model needs httpx ({exc.name} is missing): "
                       "pip install 'thoughttree[serve]'") from None
    if tokenizer == "bundled":
        tokenizer = str(bundled_model_path())
    try:
        return RemoteLM(RemoteConfig(spec, model, tokenizer=tokenizer, max_context=context,
                                     max_concurrency=concurrency))
    except (ValueError, RemoteError, OSError) as exc:
        raise CliError(f"--model {spec}: {exc}") from exc


def add_speculative(p: argparse.ArgumentParser) -> None:
    p.add_argument("--speculative", default="off", metavar="off|lookup|draft:PATH|auto",
                   help="draft tokens and verify them in the same forward, with the same output: lookup (n-grams "
                        "of the search tree's own text), draft:PATH (a smaller model with the same tokenizer; "
                        "draft:bundled is the bundled model's), auto (lookup, sized per step by measurement); "
                        "default off")


def check_device(device: str | None) -> None:
    """A one-line error for a device this torch cannot run on: a name that is not cpu or cuda is
    refused before torch is imported, and a CUDA device is then checked against this torch."""
    if device is None:
        return
    if not _DEVICE.fullmatch(device):
        kind = device.split(":")[0]
        if kind in OTHER_TORCH_DEVICES and re.fullmatch(rf"{kind}(:\d+)?", device):
            raise CliError(f"--device {device}: thoughttree runs on cpu or cuda, not {kind}")
        raise CliError(f"--device {device!r} is not a device; use cpu or cuda (cuda:N for one GPU)")
    if device.startswith("cpu"):
        return
    from ..runtime.load_options import resolve_device

    try:
        resolve_device(device)
    except ValueError as exc:  # "device ...": the option that gave it
        raise CliError(f"--{exc}") from None


def load_model(
    spec: str, device: str | None, dtype: str | None, attention: str = "auto", tensor_parallel: int = 1,
    collective_timeout_s: float = RuntimeConfig.collective_timeout_s, num_pages: int | None = None,
    remote_model: str | None = None, remote_tokenizer: str | None = None, remote_context: int | None = None,
    remote_concurrency: int = 64, speculative: str = "off",
) -> LM:
    """Load ``spec`` (``bundled`` or a directory; a server's URL gives a RemoteLM) with a one-line
    error for anything wrong; ``speculative`` ("off", "lookup", "draft:PATH", "auto") becomes the
    model's default speculation (a remote model takes only "off")."""
    from ..config import Speculative

    if is_remote(spec):
        if num_pages is not None:
            raise CliError("--kv-pages sizes a local model's KV pool; a server holds its own")
        if speculative != "off":
            raise CliError(f"--speculative {speculative}: speculation runs on a local model; a server decodes itself")
        return load_remote(spec, remote_model, remote_tokenizer, remote_context, remote_concurrency)
    check_device(device)  # before torch is imported: a bad name is refused at once
    from ..runtime import LM, ModelLoadError
    from ..runtime.memory import NotEnoughMemory

    path = bundled_model_path() if spec == "bundled" else Path(spec)
    try:
        runtime = RuntimeConfig(attention=attention, collective_timeout_s=collective_timeout_s, num_pages=num_pages)
        lm = LM.from_pretrained(path, device=device, dtype=dtype, runtime=runtime, tensor_parallel=tensor_parallel)
    except ModelLoadError as exc:
        raise CliError(f"--model {spec}: {exc}") from exc
    except ParallelError as exc:
        raise CliError(f"--tensor-parallel {tensor_parallel}: {exc}") from exc
    except NotEnoughMemory as exc:
        raise CliError(f"--kv-pages {num_pages}: {exc}" if num_pages is not None else str(exc)) from exc
    except ValueError as exc:  # the device, dtype and attention backend, checked before loading
        raise CliError(str(exc)) from exc
    if speculative == "draft:bundled":
        speculative = f"draft:{bundled_draft_path()}"
    try:
        lm.speculative = Speculative.parse(speculative)
        if lm.speculative is not None and lm.speculative.on:
            lm.engine.speculator.drafter(lm.speculative)  # a draft model loads (and is checked) now
    except (ValueError, ModelLoadError) as exc:
        raise CliError(f"--speculative {speculative}: {exc}") from exc
    return lm
