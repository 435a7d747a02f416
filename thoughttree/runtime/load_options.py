"""What a model load runs on, settled before anything loads: the device, the dtype, the attention
backend it can take, and the pages of its KV pool, allocated by one process of a GPU at a time."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Callable, Iterator, TypeVar

import torch

from ..config import RuntimeConfig
from .kv_pool import KVPool
from .memory import NotEnoughMemory, check_host_pool, plan_memory
from .model_config import ModelConfig

T = TypeVar("T")
ALLOCATION_ATTEMPTS = 3

CPU_PATHS = 128  # default CPU KV pool: this many paths of the model's full context
_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def resolve_dtype(dtype: torch.dtype | str | None, cfg: ModelConfig, device: torch.device) -> torch.dtype:
    """The dtype of the weights and KV: ``dtype`` when given, else float32 on the CPU and the
    checkpoint's own (config.json's ``dtype``, bfloat16 when it has none) on a GPU; ValueError for
    a dtype this runtime or this GPU cannot run (bfloat16 needs compute capability 8.0)."""
    from_config = dtype is None
    if from_config and device.type == "cpu":
        return torch.float32
    asked = (cfg.torch_dtype or "bfloat16") if from_config else dtype
    resolved = _DTYPES.get(asked) if isinstance(asked, str) else asked
    if resolved not in _DTYPES.values():
        if from_config:
            raise ValueError(
                f"unsupported dtype in config.json {asked!r}; pass dtype= (--dtype) with one of {', '.join(_DTYPES)}"
            )
        shown = asked if isinstance(asked, torch.dtype) else repr(asked)
        raise ValueError(f"unsupported dtype {shown}; use one of {', '.join(_DTYPES)}")
    if resolved is torch.bfloat16 and device.type == "cuda":
        capability = torch.cuda.get_device_capability(device)
        if capability < (8, 0):
            raise ValueError(
                f"bfloat16 needs a GPU of compute capability 8.0 or newer; {device} has "
                f"{capability[0]}.{capability[1]}: load the model in float16 (dtype=, --dtype)"
            )
    assert resolved is not None  # checked against _DTYPES above
    return resolved


def resolve_device(device: torch.device | str | None) -> torch.device:
    """The device to run on (CUDA when there is one, by default), checked to be usable here;
    ValueError (its message begins "device ...") otherwise."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device {device!r} is not a device; use cpu or cuda (cuda:N for one GPU)") from None
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device {device}: thoughttree runs on cpu or cuda, not {dev.type}")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            why = "this torch is a CPU-only build" if torch.version.cuda is None else "no CUDA GPU is visible"
            raise ValueError(f"device {device}: CUDA is not available ({why}); run on the cpu")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device {device}: there are {torch.cuda.device_count()} CUDA devices (0..)")
    return dev


TRITON_BACKENDS = ("deft", "per_sequence")


def check_attention(attention: str, device: torch.device, dtype: torch.dtype) -> None:
    """ValueError when the attention backend cannot run with this device and dtype: the Triton
    backends run on a CUDA GPU (or under ``TRITON_INTERPRET=1``) and take 16-bit KV."""
    if attention not in TRITON_BACKENDS:
        return
    if device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise ValueError(
            f"attention {attention!r} runs Triton kernels on a CUDA GPU; on the CPU use 'reference' "
            "(or set TRITON_INTERPRET=1 for the slow interpreter)"
        )
    if dtype.itemsize != 2:
        raise ValueError(f"attention {attention!r} takes 16-bit weights; load them in float16 or bfloat16")


def make_pool(
    cfg: ModelConfig,
    rc: RuntimeConfig,
    dtype: torch.dtype,
    device: torch.device,
    num_kv_heads: int | None = None,
    num_heads: int | None = None,
) -> KVPool:
    """The model's KV pool (``num_kv_heads``, ``num_heads``: the heads this process keeps, all by
    default), of :func:`pool_pages` pages.

    On CUDA the processes of this machine size and allocate their pools one at a time (a lock
    file per GPU), so that processes started together each see the pools of those before them;
    an allocation that fails all the same (another program took memory meanwhile) is sized again
    from what is free then (:func:`allocate_sized`)."""
    heads = cfg.num_kv_heads if num_kv_heads is None else num_kv_heads

    def allocate(pages: int) -> KVPool:
        return KVPool(cfg.num_layers, pages, rc.page_size, heads, cfg.head_dim, dtype=dtype, device=device)

    def size() -> int:
        return pool_pages(cfg, rc, dtype, device, heads, num_heads)

    if device.type != "cuda":
        return allocate(size())
    with gpu_lock(device):
        return allocate_sized(size, allocate, release=torch.cuda.empty_cache, device=str(device))


def allocate_sized(
    size: Callable[[], int],
    allocate: Callable[[int], T],
    *,
    release: Callable[[], None] = lambda: None,
    attempts: int = ALLOCATION_ATTEMPTS,
    device: str = "the GPU",
) -> T:
    """``allocate(size())``, sized again from the memory free then when the allocation runs out
    of memory (``release`` returns what a failed attempt cached), up to ``attempts`` times; then
    :class:`NotEnoughMemory` that says what to do. ``size`` raises NotEnoughMemory itself when
    what is free cannot hold a pool."""
    pages = 0
    for _ in range(attempts):
        pages = size()
        try:
            return allocate(pages)
        except torch.OutOfMemoryError:
            release()
    raise NotEnoughMemory(
        f"a KV pool of {pages} pages, sized from the memory free on {device}, could not be allocated in {attempts} "
        "attempts: another program is taking GPU memory while this one loads. Give the pool's size "
        "(RuntimeConfig(num_pages=...), --kv-pages N) or start the programs one after another"
    )


@contextlib.contextmanager
def gpu_lock(device: torch.device) -> Iterator[None]:
    """Hold this machine's lock file of the GPU ``device`` (by its UUID): the processes that size
    their pools from its free memory take turns. Where no lock file can be made (no ``fcntl``, a
    read-only temporary directory), nothing is locked."""
    try:
        import fcntl
    except ImportError:  # not a POSIX system
        yield
        return
    with file_lock(gpu_lock_path(device), fcntl.flock, fcntl.LOCK_EX, fcntl.LOCK_UN):
        yield


def gpu_lock_path(device: torch.device) -> Path:
    """The lock file of the GPU ``device``, named by its UUID, in the temporary directory."""
    props = torch.cuda.get_device_properties(device)
    name = str(getattr(props, "uuid", "") or f"{props.name}-{device.index or 0}")
    return Path(tempfile.gettempdir()) / f"thoughttree-gpu-{''.join(c if c.isalnum() else '-' for c in name)}.lock"


@contextlib.contextmanager
def file_lock(path: Path, flock: Callable[[int, int], None], lock: int, unlock: int) -> Iterator[None]:
    """``flock`` the file at ``path`` (made, readable and writable by all, when missing) while
    the block runs; nothing is locked where the file cannot be opened."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        yield
        return
    try:
        flock(fd, lock)
        yield
    finally:
        with contextlib.suppress(OSError):
            flock(fd, unlock)
        os.close(fd)


def pool_pages(
    cfg: ModelConfig,
    rc: RuntimeConfig,
    dtype: torch.dtype,
    device: torch.device,
    num_kv_heads: int | None = None,
    num_heads: int | None = None,
) -> int:
    """Pages of the KV pool (``num_kv_heads``, ``num_heads``: the heads this process keeps, all by
    default). On CUDA the pool and the steps' buffers are checked against the free memory
    (:func:`memory.plan_memory`), which sizes the pool when no size is given."""
    heads = cfg.num_kv_heads if num_kv_heads is None else num_kv_heads
    per_page = KVPool.bytes_per_page(cfg.num_layers, rc.page_size, heads, cfg.head_dim, dtype)
    if device.type == "cuda":
        return plan_memory(
            cfg,
            itemsize=dtype.itemsize,
            page_size=rc.page_size,
            free_bytes=torch.cuda.mem_get_info(device)[0],
            graph_max_rows=rc.graph_max_rows,
            num_pages=rc.num_pages,
            kv_memory_bytes=rc.kv_memory_bytes,
            num_kv_heads=heads,
            num_heads=num_heads,
            device=str(device),
        ).num_pages
    if rc.num_pages is not None:
        check_host_pool(rc.num_pages, per_page, f"num_pages={rc.num_pages}")
        return rc.num_pages
    if rc.kv_memory_bytes is None:  # the CPU: room for CPU_PATHS full-context paths, at most 1 GiB
        return max(1, min((1 << 30) // per_page, CPU_PATHS * -(-cfg.max_context // rc.page_size)))
    pages = max(1, rc.kv_memory_bytes // per_page)
    check_host_pool(pages, per_page, f"kv_memory_bytes={rc.kv_memory_bytes}")
    return pages
