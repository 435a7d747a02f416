"""Speculative token trees, measured side by side with plain decoding in one run.

CPU rows (``--part cpu``): the bundled model searches Game of 24 puzzles (``--start``, ``--limit``)
with ToT BFS (b=5) and MCTS, seed 0, each puzzle once without speculation and once with each of
``--speculative`` (default: the tree lookup and the bundled draft model); each row says whether
both found the same solved puzzles and the same trees token for token, the generated tokens, the
search wall times and their ratio, the drafters' seconds, the acceptance rate (draft tokens kept
/ verified) and tokens per target forward.

    python benchmarks/speculative.py --part cpu --limit 10

GPU rows (``--part gpu``, Llama-3-8B shape with random weights): the time of one verification
step on the decode buffers (:class:`VerifyBatch`: the forward, the draws, and the host's work
around them) with 1-16 draft nodes per branch, as a chain and as a binary tree, at 1, 8 and 64
branches (``--prompt`` tokens shared), against a plain step (0 draft nodes) and against its
floor, the larger of the weights' read time at the measured copy bandwidth and the rows' matmul
FLOPs at the measured bf16 rate; then tokens per second of whole expansions (each timed on its
second call, the first call's ratio beside it) with the tree-lookup drafter, with a small random
draft model, with a draft model equal to the target (on random weights the top tokens are near
ties, so rounding differences between the draft's one-row steps and the verification rows
reject many of its drafts) and with :class:`Replay`, which proposes the tokens an earlier run
drew (the upper bound of any drafter); chain against tree drafts, and the draft nodes
per branch per step the cost model chose at each batch size.

The CPU rows run on another device with ``--device`` (``--part cpu --device cuda``: the same
searches on a GPU).

    python benchmarks/speculative.py --part gpu
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from thoughttree import Sampling, Speculative, ThoughtTree, search
from thoughttree.runtime.speculative import DraftTree
from thoughttree.search.game24_methods import Game24Run
from thoughttree.commands.model import load_model
from thoughttree.tasks.game24.arith import check_answer
from thoughttree.tasks.game24.task import as_puzzle
from thoughttree.tree.thought_tree import derive_seed


TINY = dict(layers=2, hidden=128, heads=4, kv_heads=2, intermediate=256, vocab=512)  # checks the code path on a CPU


def tree_tokens(tree: ThoughtTree) -> list[tuple[int, tuple[int, ...]]]:
    return [(n.parent.id if n.parent else -1, tuple(n.tokens)) for n in tree.nodes]


class Replay:
    """A drafter that proposes each branch's next tokens from an earlier run of the same
    expansion (``outputs[key]``: branch ``key``'s tokens), as a chain scored 1: every draft token
    is kept wherever the step draws what that run drew, so it bounds what any drafter can gain.
    On a GPU a step's row count moves the logits by a rounding step, which can change a
    near-tie; the benchmark hands it each speculating run's outputs for the next."""

    def __init__(self, outputs: list[list[int]]) -> None:
        self.outputs = outputs

    def begin(self, kv, branches) -> None:
        pass

    def propose(self, branches, max_nodes: int, max_depth: int) -> list[DraftTree]:
        drafts = []
        for b in branches:
            done = len(b.generated)
            draft = DraftTree()
            for j, token in enumerate(self.outputs[b.key][done : done + min(max_nodes, max_depth)]):
                draft.add(j - 1, token, 1.0)
            drafts.append(draft)
        return drafts

    def accepted(self, branch, tokens) -> None:
        pass

    def end(self) -> None:
        pass


def cpu_rows(args: argparse.Namespace, console: Console) -> None:
    device = args.device or "cpu"
    lm = load_model("bundled", device, None)
    where = f"CPU ({torch.get_num_threads()} thread(s))" if device == "cpu" else torch.cuda.get_device_name()
    drafters = args.speculative.split(",")
    table = Table(
        title=f"Game of 24, bundled model, {where}, puzzles {args.start}-{args.start + args.limit - 1}, seed 0"
    )
    for col in (
        "method",
        "--speculative",
        "same solved",
        "same trees",
        "solved",
        "generated tokens",
        "off s",
        "on s",
        "off / on",
        "drafting s",
        "acceptance",
        "tokens / forward off",
        "tokens / forward on",
    ):
        table.add_column(col, justify="right")
    keys = ("generated_tokens", "forward_steps", "accepted_tokens", "draft_tokens", "draft_seconds")
    for method in args.methods.split(","):
        # Speculation drafts for sampled decoding; distinct proposals run their own beam search.
        run = Game24Run(method=method, start=args.start, end=args.start + args.limit, seed=0, distinct=False)
        modes = ["off", *drafters]
        seconds = dict.fromkeys(modes, 0.0)
        solved: dict[str, list[bool]] = {m: [] for m in modes}
        trees: dict[str, list] = {m: [] for m in modes}
        moved = {m: dict.fromkeys(keys, 0.0) for m in modes}
        for index, text in run.problems():
            # Each puzzle once without speculation, then once with each drafter, one after another.
            for mode in modes:
                lm.speculative = None if mode == "off" else mode
                task, strategy = run.task_and_strategy()
                s0 = {k: getattr(lm.stats, k) for k in keys}
                t0 = time.perf_counter()
                result = search(task, strategy, lm, problem=text, seed=derive_seed(run.seed, index))
                seconds[mode] += time.perf_counter() - t0
                for k in keys:
                    moved[mode][k] += getattr(lm.stats, k) - s0[k]
                check = None if result.answer is None else check_answer(result.answer, as_puzzle(text))
                solved[mode].append(bool(check is not None and check.correct))
                trees[mode].append(tree_tokens(result.tree))
                result.tree.release_kv()
        lm.speculative = None
        off = moved["off"]
        for mode in drafters:
            on = moved[mode]
            table.add_row(
                method,
                f"draft:…/{Path(mode[6:]).name}" if mode.startswith("draft:") else mode,
                str(solved["off"] == solved[mode]),
                str(trees["off"] == trees[mode]),
                f"{sum(solved[mode])}/{len(solved[mode])}",
                f"{off['generated_tokens']:.0f} / {on['generated_tokens']:.0f}",
                f"{seconds['off']:.1f}",
                f"{seconds[mode]:.1f}",
                f"{seconds['off'] / seconds[mode]:.2f}×",
                f"{on['draft_seconds']:.1f}",
                f"{on['accepted_tokens'] / max(1, on['draft_tokens']):.2f}",
                f"{off['generated_tokens'] / max(1, off['forward_steps']):.2f}",
                f"{on['generated_tokens'] / max(1, on['forward_steps']):.2f}",
            )
    console.print(table)


def gpu_rows(args: argparse.Namespace, console: Console) -> None:
    from profile_step import random_lm
    from tree_decode import SHAPES, step_bytes
    from tree_timing import roofs

    from thoughttree.runtime.decode_requests import DecodeRequest
    from thoughttree.runtime.speculative import DraftModel
    from thoughttree.runtime.verify_batch import VerifyBatch

    shapes = {**SHAPES, "tiny": TINY}
    dev = torch.device(args.device or "cuda")
    lm = random_lm(shapes[args.shape], str(dev), kv_bytes=args.kv_gib << 30)
    measured = roofs(dev)
    copy, mm = measured if measured is not None else (float("inf"), float("inf"))
    weights, _ = step_bytes(lm)
    params = weights / lm.model.w["lm_head"].element_size()
    prompt = [(7 * i + 3) % 256 for i in range(args.prompt)]

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize()

    console.print(f"measured now: copy {copy / 1e12:.2f} TB/s, bf16 matmul {mm / 1e12:.0f} TFLOP/s")
    table = Table(title=f"verification step, {args.shape}, {args.prompt}-token prompt, {dev}")
    for col in ("branches", "draft", "nodes/branch", "rows", "ms", "÷ plain step", "floor ms", "÷ floor"):
        table.add_column(col, justify="right")
    for branches in args.branches:
        for shape in ("chain", "tree"):
            tree = ThoughtTree(lm, prompt=prompt, seed=0)
            short = Sampling(max_tokens=4, temperature=1.0, ignore_eos=True)
            kids = tree.expand([tree.root], n=branches, sampling=short)[0]
            # Each branch mid-decode: one generated token whose KV the step writes, then k draft nodes.
            go_on = Sampling(max_tokens=64, temperature=1.0, ignore_eos=True)
            requests = [DecodeRequest(kid.kv, go_on, b) for b, kid in enumerate(kids)]
            tails = [lm.kv.open_child(kid.kv) for kid in kids]
            lm.kv.append_each(tails, [5] * branches)
            ids = list(range(branches))
            batch = VerifyBatch(lm.engine, ids, requests, tails, depth=16, tree=shape == "tree")
            plain = None
            for k in (0, 1, 2, 4, 8, 16) if shape == "chain" else (0, 4, 8, 16):
                drafts = {i: [5 + j for j in range(k)] for i in ids}
                # A chain, or a binary tree: node j under node (j - 1) // 2.
                up = list(range(-1, k - 1)) if shape == "chain" else [(j - 1) // 2 for j in range(k)]
                times = []
                for rep in range(args.reps + 2):
                    sync()
                    t0 = time.perf_counter()
                    batch.verify(ids, drafts, {i: up for i in ids})
                    if rep >= 2:
                        times.append(time.perf_counter() - t0)
                    for t in tails:  # back to the state before the step
                        lm.kv.truncate(t, 1)
                        t.written = 0
                rows = branches * (k + 1)
                ms = 1e3 * sorted(times)[len(times) // 2]
                plain = ms if k == 0 else plain
                floor = 1e3 * max(weights / copy, 2 * params * rows / mm)
                table.add_row(
                    str(branches),
                    shape,
                    str(k),
                    str(rows),
                    f"{ms:.2f}",
                    f"{ms / plain:.2f}",
                    f"{floor:.2f}" if floor else "–",
                    f"{ms / floor:.2f}" if floor else "–",
                )
            for t in tails:
                lm.kv.release(t)
            tree.release_kv()
    console.print(table)

    # The small draft model shares the target's vocabulary, as a draft model with its tokenizer does.
    small_shape = {**(TINY if args.shape == "tiny" else SHAPES["default"]), "vocab": shapes[args.shape]["vocab"]}
    small = random_lm(small_shape, str(dev), kv_bytes=args.kv_gib << 28)
    twin = random_lm(shapes[args.shape], str(dev), kv_bytes=args.kv_gib << 29) if args.twin else None
    table = Table(title=f"tokens/s of {args.tokens}-token expansions, {args.shape}, {dev}")
    for col in (
        "branches",
        "drafter",
        "shape",
        "tokens/s",
        "÷ off",
        "first call ÷ off",
        "acceptance",
        "tokens/forward",
        "draft nodes/branch/step",
        "captures, plans",
    ):
        table.add_column(col, justify="right")
    drafters = [("off", None), ("lookup", "lookup"), ("random small model", DraftModel(small))]
    if twin is not None:
        drafters.append(("the target itself", DraftModel(twin)))

    def expand(spec: Speculative | None, branches: int) -> tuple[float, tuple[int, ...], list[list[int]]]:
        """Seconds of one expansion of ``branches`` children, the stats it moved, and the
        children's tokens."""
        sampling = Sampling(max_tokens=args.tokens, temperature=0.0, ignore_eos=True, speculative=spec)
        keys = (
            "generated_tokens",
            "forward_steps",
            "accepted_tokens",
            "draft_tokens",
            "speculative_steps",
            "graph_captures",
            "plan_builds",
        )
        s0 = [getattr(lm.stats, k) for k in keys]
        tree = ThoughtTree(lm, prompt=prompt, seed=1)
        tree.materialize()
        sync()
        t0 = time.perf_counter()
        kids = tree.expand([tree.root], n=branches, sampling=sampling)[0]
        sync()
        dt = time.perf_counter() - t0
        tree.release_kv()
        return dt, tuple(getattr(lm.stats, k) - a for k, a in zip(keys, s0)), [list(k.tokens) for k in kids]

    for branches in args.branches:
        replay = Replay(expand(None, branches)[2])
        for name, drafter in [*drafters, ("replay of an earlier run", replay)]:
            # The cost model sizes chain and dynamic drafts; "full" verifies every draft node it is given.
            shapes = ("chain", "chain, full") if drafter is replay else ("chain", "dynamic", "dynamic, full")
            for shape in shapes if drafter is not None else ("-",):
                spec = (
                    None
                    if drafter is None
                    else Speculative(drafter=drafter, shape=shape.split(",")[0], adaptive=not shape.endswith("full"))
                )
                # The first call also captures graphs and plans for new row counts, and the cost
                # model starts from its priors; the calls after it are what later calls of a search
                # cost, each timed right after one without speculation on the same buffers.
                first, _, outputs = expand(spec, branches)
                if drafter is replay:
                    replay.outputs = outputs
                first_off = expand(None, branches)[0]
                pairs = []
                for _ in range(3):
                    off = expand(None, branches)[0]
                    on, moved, outputs = expand(spec, branches)
                    if drafter is replay:
                        replay.outputs = outputs
                    pairs.append((off, on, moved))
                off, on, moved = sorted(pairs, key=lambda p: p[1] / p[0])[1]  # the median ratio
                gen, forwards, accepted, drafted, steps, captures, plans = moved
                table.add_row(
                    str(branches),
                    name,
                    shape,
                    f"{gen / on:.0f}",
                    f"{off / on:.2f}",
                    f"{first_off / first:.2f}",
                    f"{accepted / max(1, drafted):.2f}",
                    f"{gen / max(1, forwards):.2f}",
                    f"{drafted / max(1, steps * branches):.2f}",
                    f"{captures}, {plans}",
                )
    console.print(table)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=("cpu", "gpu"), default="cpu")
    p.add_argument(
        "--speculative",
        default="lookup,draft:thoughttree/models/game24-draft",
        help="the speculation options compared with none, comma-separated (cpu part; default: the tree "
        "lookup and the bundled draft model)",
    )
    p.add_argument("--methods", default="bfs,mcts")
    p.add_argument("--start", type=int, default=900)
    p.add_argument("--limit", type=int, default=100, help="puzzles from --start (default 100: 900-999)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads on the CPU (default 1)")
    p.add_argument("--shape", default="llama3-8b", help="llama3-8b, default, or tiny (a check of the code on a CPU)")
    p.add_argument("--kv-gib", type=int, default=16, help="KV pool of the target (GiB; the draft models get less)")
    p.add_argument("--device", help="where the part runs (default: cpu for the cpu part, cuda for the gpu part)")
    p.add_argument("--prompt", type=int, default=2048)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument(
        "--branches",
        type=lambda text: [int(x) for x in text.split(",")],
        default=[1, 8, 64],
        help="branch counts of the gpu part (comma-separated; default 1,8,64)",
    )
    p.add_argument(
        "--twin",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run a draft model equal to the target (a second copy of its weights)",
    )
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    console = Console(width=200)
    console.print(f"$ python {shlex.join(sys.argv)}")
    if args.part == "cpu":
        cpu_rows(args, console)
    else:
        gpu_rows(args, console)


if __name__ == "__main__":
    main()
