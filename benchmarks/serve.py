"""Requests and tokens per second of ``thoughttree serve`` against the number of concurrent clients.

Starts the server in this process (uvicorn on 127.0.0.1, a free port) and drives it with
``--clients`` concurrent HTTP clients, each sending ``--requests`` completions one after another.
Every request is ``--prompt-tokens`` token ids plus ``--max-tokens`` generated (EOS ignored, so
every request generates the same number). Prompts are either *shared*: one common prefix of all
but the last 8 tokens, then 8 tokens of the request's own; or *unshared*: every token the
request's own. From the server's engine counters it reports the prompt tokens prefilled (a
shared prefix is computed once, whoever sent it), and the KV tokens attention read per query row
(``attended``) against the distinct KV tokens in the steps' trees (``unique``): their ratio is how
many times a shared prefix's KV would be read by per-sequence attention for each time it is read here.

    python benchmarks/serve.py                                   # CPU, the bundled model
    python benchmarks/serve.py --shape llama3-8b --prompt-tokens 2048 --max-tokens 64 \\
        --clients 1,4,16,64,256                                  # GPU, a random Llama-3-8B-shaped model
"""

from __future__ import annotations

import argparse
import asyncio
import random
import socket
import sys
import threading
import time
from pathlib import Path

import httpx
import uvicorn
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))

from thoughttree.serve.app import ServeConfig, create_app  # noqa: E402

SUFFIX = 8  # tokens of its own at the end of each shared-prefix prompt


def load(args: argparse.Namespace):
    if args.shape:
        from profile_step import random_lm
        from tree_decode import SHAPES

        return random_lm(SHAPES[args.shape], device=args.device or "cuda")
    from thoughttree.commands.model import load_model

    return load_model("bundled", args.device, None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prompts(count: int, length: int, shared: bool, vocab: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    first = 3  # after <pad>/<s>/</s>-like ids
    prefix = [1] + [rng.randrange(first, vocab) for _ in range(length - 1 - SUFFIX)]
    if shared:
        return [prefix + [rng.randrange(first, vocab) for _ in range(SUFFIX)] for _ in range(count)]
    return [[1] + [rng.randrange(first, vocab) for _ in range(length - 1)] for _ in range(count)]


async def drive(base: str, clients: int, requests: int, work: list[list[int]], max_tokens: int) -> int:
    """Send every prompt of ``work``, ``clients`` at a time; returns the tokens generated."""
    limits = httpx.Limits(max_connections=clients + 4)
    async with httpx.AsyncClient(base_url=base, timeout=600, limits=limits) as http:

        async def client(c: int) -> int:
            made = 0
            for r in range(requests):
                body = {
                    "model": "bench",
                    "prompt": work[c * requests + r],
                    "max_tokens": max_tokens,
                    "ignore_eos": True,
                    "temperature": 1.0,
                    "seed": c * requests + r,
                }
                response = await http.post("/v1/completions", json=body)
                response.raise_for_status()
                made += response.json()["usage"]["completion_tokens"]
            return made

        return sum(await asyncio.gather(*(client(c) for c in range(clients))))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", help="a random model of this shape (benchmarks/tree_decode.py SHAPES), on the GPU")
    p.add_argument("--device")
    p.add_argument("--clients", default="1,4,16,64", help="comma-separated numbers of concurrent clients")
    p.add_argument("--requests", type=int, default=2, help="requests per client, one after another")
    p.add_argument("--prompt-tokens", type=int, default=120)
    p.add_argument("--max-tokens", type=int, default=16)
    args = p.parse_args()
    lm = load(args)
    if args.prompt_tokens + args.max_tokens > lm.max_context or args.prompt_tokens <= SUFFIX:
        p.error(f"--prompt-tokens must be > {SUFFIX} and leave --max-tokens room in the context of {lm.max_context}")
    port = free_port()
    app = create_app(lm, ServeConfig(model_name="bench", max_waiting=4096))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    base = f"http://127.0.0.1:{port}"
    vocab = min(lm.config.vocab_size, len(lm.tokenizer))
    asyncio.run(drive(base, 2, 1, prompts(2, args.prompt_tokens, False, vocab, 99), args.max_tokens))  # warm-up
    table = Table(
        title=f"thoughttree serve, {args.shape or 'bundled game24 model'} on {lm.device}: "
        f"{args.prompt_tokens}-token prompts, {args.max_tokens} tokens each, "
        f"{args.requests} requests per client"
    )
    for col in ("prompts", "clients", "requests", "req/s", "gen tok/s", "prefilled", "attended / unique"):
        table.add_column(col, justify="right")
    for shared in (True, False):
        for clients in [int(c) for c in args.clients.split(",")]:
            work = prompts(clients * args.requests, args.prompt_tokens, shared, vocab, clients)
            before = httpx.get(f"{base}/health").json()["engine"]
            start = time.perf_counter()
            made = asyncio.run(drive(base, clients, args.requests, work, args.max_tokens))
            seconds = time.perf_counter() - start
            after = httpx.get(f"{base}/health").json()["engine"]
            d = {k: after[k] - before[k] for k in ("prefill_tokens", "attended_tokens", "unique_tokens")}
            row = (
                "shared" if shared else "unshared",
                str(clients),
                str(len(work)),
                f"{len(work) / seconds:.1f}",
                f"{made / seconds:.0f}",
                f"{d['prefill_tokens']:,}",
                f"{d['attended_tokens'] / max(1, d['unique_tokens']):.2f}",
            )
            table.add_row(*row)
            print(" | ".join(row), file=sys.stderr, flush=True)
    server.should_exit = True
    thread.join(timeout=30)
    Console().print(table)


if __name__ == "__main__":
    main()
