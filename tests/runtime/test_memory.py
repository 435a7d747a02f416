"""Sizing the KV pool and the step buffers from free memory, against the sizes of real GPUs."""

from __future__ import annotations

import pytest

from thoughttree.runtime.memory import KV_SHARE, MIN_HEADROOM, NotEnoughMemory, plan_memory, workspace_bytes
from thoughttree.runtime.model_config import ModelConfig

GIB = 1 << 30
LLAMA3_8B = ModelConfig(
    model_type="llama",
    vocab_size=128256,
    hidden_size=4096,
    intermediate_size=14336,
    num_layers=32,
    num_heads=32,
    num_kv_heads=8,
    head_dim=128,
    rms_norm_eps=1e-5,
    rope_theta=5e5,
    rope_scaling=None,
    max_position_embeddings=8192,
    tie_word_embeddings=False,
    attention_bias=False,
    qk_norm=False,
    mlp_bias=False,
    sliding_window=None,
    bos_token_id=1,
    eos_token_ids=(2,),
    torch_dtype="bfloat16",
)
PAGE = 2 * 32 * 16 * 8 * 128 * 2  # KV bytes of one 16-token page over 32 layers in bfloat16
WEIGHTS = 16 * GIB


def _plan(free: int, **kwargs):
    return plan_memory(
        LLAMA3_8B, itemsize=2, page_size=16, free_bytes=free, graph_max_rows=512, device="cuda:0", **kwargs
    )


def test_the_workspace_holds_the_shared_logits_buffer_and_the_largest_steps() -> None:
    work = workspace_bytes(LLAMA3_8B, 2, 512, 60 * GIB)
    logits = 512 * 128256 * 2
    assert logits + 512 * 128256 * 4 + MIN_HEADROOM + int(0.05 * 60 * GIB) - MIN_HEADROOM < work < 8 * GIB
    # Graphs stop at 1024 rows.
    assert workspace_bytes(LLAMA3_8B, 2, 2048, 60 * GIB) == workspace_bytes(LLAMA3_8B, 2, 1024, 60 * GIB)
    assert workspace_bytes(LLAMA3_8B, 2, 64, 60 * GIB) < work


@pytest.mark.parametrize("total", [80, 141], ids=["h100", "h200"])
def test_the_default_pool_takes_a_share_of_what_the_workspace_leaves(total: int) -> None:
    free = total * GIB - WEIGHTS
    plan = _plan(free)
    assert plan.page_bytes == PAGE
    assert plan.num_pages == int(KV_SHARE * (free - plan.workspace_bytes)) // PAGE
    assert plan.kv_bytes + plan.workspace_bytes < free


def test_a_small_gpu_gives_the_pool_all_the_room_left_and_fails_clearly_without_room_for_the_steps() -> None:
    work = workspace_bytes(LLAMA3_8B, 2, 512, 3 * GIB)
    one_path = 8192 // 16 * PAGE  # 1 GiB: one path of the full 8k context
    free = work + one_path + one_path // 2
    assert _plan(free).num_pages == (free - workspace_bytes(LLAMA3_8B, 2, 512, free)) // PAGE
    free = work + one_path // 4  # less than one path: the pool still takes what there is
    assert _plan(free).num_pages == (free - workspace_bytes(LLAMA3_8B, 2, 512, free)) // PAGE > 0
    free = work // 2
    need = workspace_bytes(LLAMA3_8B, 2, 512, free)
    message = (
        rf"cuda:0 has {free / GIB:.2f} GiB free after the weights; the steps' buffers need {need / GIB:.2f} GiB "
        r"and a KV pool for one path of the full context \(8192 tokens\) 1\.00 GiB"
    )
    with pytest.raises(NotEnoughMemory, match=message):
        _plan(free)


def test_a_pool_asked_for_must_fit_beside_the_workspace() -> None:
    free = 64 * GIB  # an H100 with the weights loaded
    work = workspace_bytes(LLAMA3_8B, 2, 512, free)
    room = (free - work) // PAGE
    assert _plan(free, num_pages=room).num_pages == room
    assert _plan(free, kv_memory_bytes=24 * GIB).num_pages == 24 * GIB // PAGE
    with pytest.raises(NotEnoughMemory, match=rf"num_pages={room + 1}.*ask for at most {room} pages"):
        _plan(free, num_pages=room + 1)
    message = r"kv_memory_bytes=85899345920: 80\.00 GiB\) does not fit on cuda:0: 64\.00 GiB free"
    with pytest.raises(NotEnoughMemory, match=message):
        _plan(free, kv_memory_bytes=80 * GIB)
    # A few pages asked for on a nearly full GPU are fine: the check is against the room, not one path.
    assert _plan(work + 10 * PAGE, num_pages=8).num_pages == 8


def test_a_tensor_parallel_rank_sizes_its_own_heads() -> None:
    whole, half = _plan(40 * GIB), _plan(40 * GIB, num_kv_heads=4, num_heads=16)
    assert half.page_bytes * 2 == whole.page_bytes and half.workspace_bytes < whole.workspace_bytes
    assert half.num_pages > 2 * whole.num_pages - 2


@pytest.mark.gpu
def test_a_pool_that_cannot_fit_fails_while_loading_not_inside_a_search(tiny_model_dir, monkeypatch) -> None:
    import torch

    from thoughttree import LM, RuntimeConfig

    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (200 << 20, 80 << 30))
    with pytest.raises(NotEnoughMemory, match=r"kv_memory_bytes=1073741824: 1\.00 GiB\) does not fit on cuda"):
        LM.from_pretrained(tiny_model_dir, device="cuda", dtype="bfloat16", runtime=RuntimeConfig(kv_memory_bytes=GIB))


@pytest.mark.parametrize(("total", "processes"), [(80, 2), (141, 3)])
def test_processes_that_size_their_pools_one_at_a_time_all_fit(total: int, processes: int) -> None:
    """Processes load the model on one GPU in turn (the lock file): each sees the weights and
    pools of those before it, and every one keeps room for its own steps."""
    free, plans = total * GIB, []
    for _ in range(processes):
        free -= WEIGHTS
        plan = _plan(free)
        plans.append(plan)
        free -= plan.kv_bytes
    assert all(p.num_pages > 0 for p in plans)
    steps = workspace_bytes(LLAMA3_8B, 2, 512, free_bytes=0)  # buffers and activations, the least headroom
    assert free >= processes * steps, "every process's steps still fit beside the pools"


def test_an_allocation_that_runs_out_of_memory_is_sized_again_from_what_is_free_then() -> None:
    import torch

    from thoughttree.runtime.load_options import allocate_sized

    free = iter([40 * GIB, 20 * GIB])
    released = []

    def allocate(pages: int) -> int:
        if pages * PAGE > 15 * GIB:  # another process took memory after it was read
            raise torch.OutOfMemoryError("CUDA out of memory")
        return pages

    pages = allocate_sized(lambda: _plan(next(free)).num_pages, allocate, release=lambda: released.append(1))
    assert pages == _plan(20 * GIB).num_pages and released == [1]


def test_an_allocation_that_keeps_failing_says_what_to_do() -> None:
    import torch

    from thoughttree.runtime.load_options import allocate_sized

    def allocate(pages: int) -> int:
        raise torch.OutOfMemoryError("CUDA out of memory")

    with pytest.raises(NotEnoughMemory, match=r"another program is taking GPU memory.*--kv-pages N"):
        allocate_sized(lambda: 100, allocate, attempts=2, device="cuda:0")
    with pytest.raises(NotEnoughMemory, match="Free GPU memory"):
        allocate_sized(lambda: _plan(WEIGHTS // 64).num_pages, allocate)


def test_the_lock_file_lets_one_holder_in_at_a_time(tmp_path) -> None:
    fcntl = pytest.importorskip("fcntl")
    from thoughttree.runtime.load_options import file_lock

    path = tmp_path / "gpu.lock"
    with file_lock(path, fcntl.flock, fcntl.LOCK_EX, fcntl.LOCK_UN):
        other = open(path)
        with pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released on leaving the block
    other.close()
    ran = []
    with file_lock(tmp_path / "missing" / "gpu.lock", fcntl.flock, fcntl.LOCK_EX, fcntl.LOCK_UN):
        ran.append(True)  # no lock file can be made there: the block runs unlocked
    assert ran


@pytest.mark.gpu
def test_a_gpu_pool_is_sized_under_the_gpus_lock_file() -> None:
    import fcntl

    import torch

    from thoughttree.runtime import load_options

    device, seen = torch.device("cuda", torch.cuda.current_device()), []
    path = load_options.gpu_lock_path(device)

    def size() -> int:
        with open(path) as other:  # another process would wait here
            with pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        seen.append(True)
        return 4

    with load_options.gpu_lock(device):
        pool = load_options.allocate_sized(size, lambda pages: torch.empty(pages, device=device))
    assert pool.numel() == 4 and seen == [True]
    with open(path) as other:  # released
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
