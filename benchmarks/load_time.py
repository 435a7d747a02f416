"""Loading a checkpoint onto the GPU: thoughttree's loader against transformers, each in a fresh process.

Builds a randomly initialised Llama-family checkpoint of a chosen shape (bf16 safetensors, in
/dev/shm unless ``--dir`` names an existing one), then loads it in turn, ``--repeats`` times each,
every load in its own process so that none finds another's memory:

- ``weights``: thoughttree's checkpoint reader alone (``checkpoint.load_transformer``);
- ``LM``: the whole ``LM.from_pretrained`` (tokenizer, weights, KV pool);
- ``transformers``: ``AutoModelForCausalLM.from_pretrained(dtype=bfloat16, device_map="cuda")``.

Prints seconds, checkpoint GB per second, the most anonymous host memory the process held
(sampled every 5 ms: the file's pages mapped by safetensors are page cache and not counted) and
the most GPU memory allocated. The checkpoint's pages are in memory throughout (/dev/shm, or
the page cache after the first load), so this times the loader, not the disk.

    python benchmarks/load_time.py [--shape llama3-8b] [--repeats 2] [--dir CHECKPOINT]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tree_decode import SHAPES, build_model  # noqa: E402

LOADERS = ("weights", "LM", "transformers")


def _anon_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


def child(loader: str, path: str) -> None:
    """Load once and print one JSON line of measurements."""
    torch.zeros(1, device="cuda")  # the CUDA context is not the loader's time
    base = _anon_bytes()
    peak = [base]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.005):
            peak[0] = max(peak[0], _anon_bytes())

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    start = time.perf_counter()
    if loader == "weights":
        from thoughttree.runtime.checkpoint import load_transformer
        from thoughttree.runtime.model_config import ModelConfig

        load_transformer(path, ModelConfig.from_dir(path), device=torch.device("cuda"), dtype=torch.bfloat16)
    elif loader == "LM":
        from thoughttree import LM, RuntimeConfig

        LM.from_pretrained(path, device="cuda", dtype="bfloat16", runtime=RuntimeConfig(kv_memory_bytes=1 << 30))
    else:
        import transformers

        transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16, device_map="cuda")
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    done.set()
    watcher.join()
    peak[0] = max(peak[0], _anon_bytes())
    print(json.dumps(dict(seconds=seconds, host=peak[0] - base, gpu=torch.cuda.max_memory_allocated())))


def measure(loader: str, path: str) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--child", loader, path], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{loader} load failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", choices=sorted(SHAPES), default="llama3-8b")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--dir", help="an existing checkpoint to load instead of a random one")
    p.add_argument("--child", nargs=2, metavar=("LOADER", "PATH"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(*args.child)
    console = Console(width=160)
    console.print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    console.print("command: python " + " ".join(shlex.quote(a) for a in sys.argv))
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(dir=shm) as tmp:
        path = args.dir
        if path is None:
            shape = argparse.Namespace(**SHAPES[args.shape])
            build_model(Path(tmp), shape)
            path = tmp
        size = sum(f.stat().st_size for f in Path(path).glob("*.safetensors"))
        table = Table(title=f"loading {path} ({size / 1e9:.2f} GB of safetensors) onto the GPU", title_justify="left")
        for col in ("loader", "run", "seconds", "GB/s", "host memory GB", "GPU memory GB", "fastest transformers ÷ this"):
            table.add_column(col, justify="right")
        rows = [(loader, r, measure(loader, path)) for r in range(args.repeats) for loader in LOADERS]
        best = min(m["seconds"] for loader, _, m in rows if loader == "transformers")
        for loader, r, m in rows:
            table.add_row(loader, str(r + 1), f"{m['seconds']:.2f}", f"{size / m['seconds'] / 1e9:.1f}",
                          f"{m['host'] / 1e9:.2f}", f"{m['gpu'] / 1e9:.2f}", f"{best / m['seconds']:.1f}×")
        console.print(table)


if __name__ == "__main__":
    main()
