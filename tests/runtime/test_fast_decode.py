"""Decode steps on fixed buffers (and CUDA graphs on the GPU) against the general step.

On CPU the fast path runs its Triton kernels in the interpreter in float16 (small, slow); on
CUDA the same checks run in bfloat16 with graphs on and off, plus transformers on each path.
The interpreter's time goes mostly to rows: prompts are short, and a long prefix that a test
only needs in the KV is prefilled on the PyTorch layers (``prefill_on_pytorch``).
"""

from __future__ import annotations

import dataclasses
import gc

import pytest
import torch

from tiny_models import make_model, prefill_on_pytorch
from thoughttree import LM, RuntimeConfig, Sampling, ThoughtTree
from thoughttree.kernels import WorkConfig
from thoughttree.kernels.plan import tree_work
from thoughttree.kernels import linear as few_rows
from thoughttree.runtime.engine import DecodeRequest
from thoughttree.runtime.graphs import Capacity, DecodeArena, row_bucket
from thoughttree.runtime.kv_pool import KVPoolExhausted

CUDA = torch.cuda.is_available()
DEV = "cuda" if CUDA else "cpu"
DTYPE = "bfloat16" if CUDA else "float16"
PROMPT = list(range(3, 16))  # three pages of 4 and one token on a fourth


def _lm(path, *, fast: bool, graphs: bool = True, num_pages: int = 1024, max_rows: int = 512) -> LM:
    rc = RuntimeConfig(page_size=4, num_pages=num_pages, attention="deft", cuda_graphs=graphs, graph_max_rows=max_rows)
    lm = LM.from_pretrained(path, device=DEV, dtype=DTYPE, runtime=rc)
    lm.model.fused = fast  # the Triton layer pieces; the fast decode path needs them
    assert lm.engine.fast_decode == fast
    return lm


def _grow(lm: LM, sampling_a: Sampling, sampling_b: Sampling, stored: bool = False) -> tuple[ThoughtTree, list[list[int]], list[list[float]]]:
    """Three children of the prompt, then two under each of the first two; ``stored``: the
    prompt's KV stored on the PyTorch layers first (every step on the fixed buffers)."""
    tree = ThoughtTree(lm, prompt=PROMPT, seed=0)
    if stored:
        prefill_on_pytorch(lm, tree)
    kids = tree.expand([tree.root], n=3, sampling=sampling_a)[0]
    more = tree.expand(kids[:2], n=2, sampling=sampling_b)
    nodes = kids + [k for ks in more for k in ks]
    lm.check_integrity(tree)
    return tree, [n.tokens for n in nodes], [n.metadata["token_logprobs"] for n in nodes]


def _spy_warm_ups(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each graph capture from now on ran an eager warm-up first, in order."""
    real = DecodeArena._capture
    warm_ups: list[bool] = []

    def capture(self: DecodeArena, forward, warm_up: bool):
        warm_ups.append(warm_up)
        return real(self, forward, warm_up)

    monkeypatch.setattr(DecodeArena, "_capture", capture)
    return warm_ups


def _spy_few_row_projections(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Let the tiny model's projections take the few-row kernel (by default its weights are too
    narrow for it); returns the rows of each kernel call from now on."""
    monkeypatch.setattr(few_rows, "MIN_PROGRAMS", 1)
    real = few_rows.few_rows_linear
    calls: list[int] = []

    def spy(x, *args, **kwargs):
        calls.append(x.shape[0])
        return real(x, *args, **kwargs)

    monkeypatch.setattr(few_rows, "few_rows_linear", spy)
    return calls


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    # One layer on CPU: the interpreter runs every kernel program in Python.
    return make_model(tmp_path_factory.mktemp("fast"), "qwen3" if CUDA else "llama", num_hidden_layers=2 if CUDA else 1)


GREEDY = Sampling(max_tokens=4, temperature=0, ignore_eos=True)
SAMPLED = Sampling(max_tokens=3, temperature=1.0, top_k=50, ignore_eos=True)


@pytest.fixture(scope="module")
def general_steps(model_dir) -> tuple[list[list[int]], list[list[float]], int]:
    """Tokens, log-probabilities and forward steps of :func:`_grow` on the general steps."""
    slow = _lm(model_dir, fast=False)
    _, tokens, logprobs = _grow(slow, GREEDY, SAMPLED)
    assert slow.stats.fast_steps == 0
    return tokens, logprobs, slow.stats.forward_steps


@pytest.mark.parametrize(
    "work", [WorkConfig(), WorkConfig(fold_tail=0), WorkConfig(merge_block=1)], ids=["tails-in-merge", "tail-items", "merge-block-1"]
)
def test_fast_steps_equal_general_steps(model_dir, general_steps, work: WorkConfig) -> None:
    fast = _lm(model_dir, fast=True)
    fast.engine.decode_work_config = work
    _, tokens, logprobs = _grow(fast, GREEDY, SAMPLED)
    assert fast.stats.fast_steps > 0
    want_tokens, want_logprobs, general_forwards = general_steps
    # Lengths known in advance: the steps queued ahead of the host's reads add no step.
    assert fast.stats.overlapped_steps > 0 and fast.stats.forward_steps == general_forwards
    # Every metadata view and step input starts 16-byte aligned (Triton compiles per alignment).
    arena = fast.engine.arena
    w = arena.work
    views = (w.slots, w.items, w.q_perm, w.q_node, w.q_vis, w.merge_offsets, w.merge_rows, w.own_start, w.own_len, *arena.step_in)
    assert all(t.data_ptr() % 16 == 0 for t in views)
    assert tokens == want_tokens
    for a, b in zip(logprobs, want_logprobs):
        assert a == pytest.approx(b, abs=2e-2)


def test_a_search_step_whose_childrens_launch_is_read_by_the_merges(model_dir, monkeypatch) -> None:
    """Two samples of each of five 9-token children of a 100-token prompt: the children's
    launch beside the prompt's is folded into the merges (WorkConfig.fold_launches); tokens as
    the general steps give, and as the decode steps give without the fold."""
    folds = []

    def spy(*args):
        out = real(*args)
        folds.append(out is not None)
        return out

    real = tree_work._short_launches
    monkeypatch.setattr(tree_work, "_short_launches", spy)
    greedy = Sampling(max_tokens=2, temperature=0, ignore_eos=True)
    runs = []
    for fast, works in ((True, (WorkConfig(), WorkConfig(fold_launches=False))), (False, (WorkConfig(),))):
        lm = _lm(model_dir, fast=fast)
        tree = ThoughtTree(lm, prompt=[3 + i % 250 for i in range(100)], seed=0)
        kids = [tree.add_child(tree.root, [5 + 11 * i + j for j in range(9)], f"child {i}") for i in range(5)]
        prefill_on_pytorch(lm, tree, kids)  # the fold is a decode step's: their prefill only has to be stored
        for work in works:
            lm.engine.decode_work_config = work
            folds.clear()
            more = [k for ks in tree.expand(kids, n=2, sampling=greedy) for k in ks]
            lm.check_integrity(tree)
            if fast:
                assert any(folds) == work.fold_launches
            runs.append([k.tokens for k in more])
            for k in more:
                tree.prune(k)
    assert runs[0] == runs[1] == runs[2]


def test_first_step_runs_on_fixed_buffers_once_the_parents_have_kv(model_dir) -> None:
    """A prompt without KV takes one general forward (its prefill and step 0); a materialized
    prompt, and branches whose last token has no KV yet, start on the fixed buffers at step 0,
    the first row of each parent writing that token's KV; tokens as the general steps give."""
    got = []
    for fast in (True, False):
        lm = _lm(model_dir, fast=fast)
        tree = ThoughtTree(lm, prompt=PROMPT, seed=0)
        prefill_on_pytorch(lm, tree)
        before = (lm.stats.forward_steps, lm.stats.fast_steps)
        kids = tree.expand([tree.root], n=3, sampling=GREEDY)[0]
        more = tree.expand(kids[:2], n=2, sampling=SAMPLED)
        steps = (lm.stats.forward_steps - before[0], lm.stats.fast_steps - before[1])
        assert steps == ((7, 7) if fast else (7, 0))
        assert all(k.kv.written == len(k.kv.tokens) for k in kids[:2])  # their last tokens got KV once
        lm.check_integrity(tree)
        got.append(([k.tokens for k in kids], [[k.tokens for k in ks] for ks in more]))
    assert got[0] == got[1]


@pytest.mark.parametrize("attention", ["deft", "per_sequence"])
def test_general_forwards_on_fixed_buffers_equal_eager_ones(model_dir, attention: str) -> None:
    """Scoring sequences that share prefixes (one already stored in full, so its last row is only
    recomputed), and a prefill under existing KV: the general forward on the decode buffers
    (a graph per row and target bucket on the GPU) against the eager one with the same kernels
    (``graph_max_rows=1`` keeps forwards of more than one row eager) and against the PyTorch
    references."""
    prompt = [3 + i % 250 for i in range(40)]
    seqs = [prompt + [7, 8, 9], prompt + [7, 8, 10, 11], prompt[:30], prompt + [7, 8, 9, 12, 13]]
    out = []
    for fast, max_rows in ((True, 512), (True, 1), (False, 512)):
        lm = _lm(model_dir, fast=fast, max_rows=max_rows)
        lm.engine.attention = attention if fast else "reference"
        tree = ThoughtTree(lm, prompt=prompt, seed=0)
        prefill_on_pytorch(lm, tree)
        first = lm.tree_logits(seqs)
        arena = lm.engine.arena
        assert (arena is not None) == (fast and max_rows > 1)  # no decode step ran
        held = dict(arena.row_graphs) if arena is not None else {}
        again = lm.tree_logits(seqs)  # on the GPU: a replay of the graph the first call captured
        if arena is not None:
            assert lm.engine.arena is arena and arena.row_graphs == held and bool(held) == CUDA
        node = tree.extend(tree.root, " 5 6 7")
        tree.materialize([node])
        extended = lm.tree_logits([node.path_tokens()])  # one row, recomputed
        repeated = lm.tree_logits([prompt[:20]] * 9)  # nine targets on one recomputed row
        torch.testing.assert_close(repeated, repeated[:1].expand(9, -1), rtol=0, atol=0)
        lm.check_integrity(tree)
        torch.testing.assert_close(first, again, rtol=0, atol=0)
        out.append(torch.cat([first, extended, repeated[:1]]))
    assert out[0].shape == (6, lm.config.vocab_size)
    torch.testing.assert_close(out[0], out[1], rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(out[0], out[2], rtol=5e-2, atol=5e-2)


def test_more_samples_than_prefill_rows_from_a_short_prompt(model_dir) -> None:
    """Eight samples of a four-token prompt that needs its prefill: the first step's forward
    (on the decode buffers) has four rows and eight targets on its last; tokens as the general
    steps give."""
    sampling = Sampling(max_tokens=3, temperature=1.0, ignore_eos=True)
    got = []
    for fast in (True, False):
        lm = _lm(model_dir, fast=fast)
        tree = ThoughtTree(lm, prompt=[3, 17, 29, 41], seed=0)
        got.append([k.tokens for k in tree.expand([tree.root], n=8, sampling=sampling)[0]])
        lm.check_integrity(tree)
    assert got[0] == got[1] and len(set(map(tuple, got[0]))) > 1


def _plans_needed(lengths: list[int]) -> int:
    """Decode runs for branches of these lengths: finished ones ride along until half have finished."""
    plans, rows = 0, 0
    for k in range(1, max(lengths)):
        still = sum(n > k for n in lengths)
        if still and 2 * still <= rows or rows == 0:
            plans, rows = plans + 1, still
    return plans


def test_branches_finishing_at_different_steps_and_stop_strings(model_dir) -> None:
    fast = _lm(model_dir, fast=True)
    probe = ThoughtTree(fast, prompt=PROMPT, seed=0)
    kids = probe.expand([probe.root], n=4, sampling=Sampling(max_tokens=5, temperature=1.0, ignore_eos=True))[0]
    # A stop string made of the text of two generated tokens ends branches at different steps.
    stop = fast.decode(kids[0].tokens[1:3])
    probe.prune(probe.root)
    sampling = Sampling(max_tokens=5, temperature=1.0, ignore_eos=True, stop=stop)
    results = []
    for lm in (fast, _lm(model_dir, fast=False)):
        tree = ThoughtTree(lm, prompt=PROMPT, seed=0)
        builds = lm.stats.plan_builds
        got = tree.expand([tree.root], n=4, sampling=sampling)[0]
        lm.check_integrity(tree)
        results.append([(k.tokens, k.metadata["finish_reason"]) for k in got])
        if lm is fast:
            assert lm.stats.plan_builds - builds == _plans_needed([len(k.tokens) for k in got])
    assert results[0] == results[1]
    assert results[0][0][1] == "stop" and len(results[0][0][0]) == 3
    assert len({len(t) for t, _ in results[0]}) > 1


def test_requests_with_different_endings_in_one_fast_call_end_as_in_general_steps(model_dir) -> None:
    """One engine call mixing lengths, two tuples of stop strings and stop tokens: the fast steps
    give each request the tokens and finish reason the general steps give it."""
    fast, slow = _lm(model_dir, fast=True), _lm(model_dir, fast=False)
    probe = ThoughtTree(fast, prompt=PROMPT, seed=0)
    prefill_on_pytorch(fast, probe)
    (ref,) = probe.expand([probe.root], n=1, sampling=Sampling(max_tokens=6, temperature=0, ignore_eos=True))[0]
    probe.prune(probe.root)
    samplings = [
        Sampling(max_tokens=6, temperature=0, ignore_eos=True),
        Sampling(max_tokens=2, temperature=0, ignore_eos=True),
        Sampling(max_tokens=6, temperature=0, ignore_eos=True, stop=(fast.decode(ref.tokens[1:3]),)),
        Sampling(max_tokens=6, temperature=1.0, ignore_eos=True, stop=(fast.decode(ref.tokens[1:3]), "\n")),
        Sampling(max_tokens=6, temperature=0, ignore_eos=True, stop_token_ids=(ref.tokens[3],)),
    ]
    results = []
    for lm in (fast, slow):
        tree = ThoughtTree(lm, prompt=PROMPT, seed=0)
        prefill_on_pytorch(lm, tree, [tree.root])
        outs = lm.engine.decode([DecodeRequest(tree.root.kv, sp, seed) for seed, sp in enumerate(samplings)])
        results.append([(o.tokens, o.finish_reason) for o in outs])
        for o in outs:
            lm.kv.release(o.segment)
        lm.check_integrity(tree)
        tree.prune(tree.root)
    assert fast.stats.fast_steps > 0
    assert results[0] == results[1]
    reasons = [r for _, r in results[0]]
    assert reasons[:3] == ["length", "length", "stop"] and reasons[4] == "stop"
    assert len({len(t) for t, _ in results[0]}) > 1


def test_pool_exhaustion_in_a_fast_step_leaks_nothing(model_dir) -> None:
    lm = _lm(model_dir, fast=True, num_pages=10)
    tree = ThoughtTree(lm, prompt=PROMPT, seed=0)  # 4 of the 10 pages of 4
    with pytest.raises(KVPoolExhausted):
        tree.expand([tree.root], n=4, sampling=Sampling(max_tokens=16, ignore_eos=True))
    assert lm.stats.overlapped_steps > 0  # it ran out reserving slots for a step queued ahead of the host
    lm.check_integrity(tree)
    tree.prune(tree.root)
    assert lm.kv.pool.num_used == 0
    # The step queued when the pool ran out leaves nothing behind: the same LM decodes on as a fresh one.
    small = Sampling(max_tokens=3, temperature=1.0, ignore_eos=True)
    trees = [ThoughtTree(x, prompt=PROMPT, seed=1) for x in (lm, _lm(model_dir, fast=True, num_pages=10))]
    got, want = ([k.tokens for k in t.expand([t.root], n=2, sampling=small)[0]] for t in trees)
    assert got == want


def test_stats_describe_the_buffers_held_after_a_forward_replaces_them(model_dir) -> None:
    lm = _lm(model_dir, fast=True)
    tree = ThoughtTree(lm, prompt=PROMPT, seed=0)
    tree.expand([tree.root], n=2, sampling=Sampling(max_tokens=3, ignore_eos=True))
    first = lm.engine.arena
    assert lm.stats.graph_bytes == first.buffer_bytes + first.graph_bytes
    long = tree.add_child(tree.root, list(range(40, 160)), "long")
    prefill_on_pytorch(lm, tree, [long])
    lm.tree_logits([long.path_tokens() + [i] for i in (3, 4)])  # reads more KV slots than the buffers hold
    assert lm.engine.arena is not first
    assert (lm.stats.graphs, lm.stats.graph_bytes) == (lm.engine.arena.num_graphs,
                                                       lm.engine.arena.buffer_bytes + lm.engine.arena.graph_bytes)


def test_a_small_run_after_a_large_one_launches_only_its_own_items(model_dir) -> None:
    """Loaded after a run over many nodes, a one-branch run launches programs for its own work
    items (rounded up to a power of two), not for the buffers' whole capacity, and draws the
    same tokens as in buffers of its own size."""
    greedy = Sampling(max_tokens=4, temperature=0, ignore_eos=True)
    lm, fresh = _lm(model_dir, fast=True), _lm(model_dir, fast=True)
    for x in (lm, fresh):
        x.engine.decode_work_config = WorkConfig(fold_tail=0)  # each branch's tail is an item of its own
    big = ThoughtTree(lm, prompt=PROMPT, seed=0)
    big.expand([big.root], n=24, sampling=greedy)
    wide = lm.engine.arena
    got = []
    for x in (lm, fresh):
        tree = ThoughtTree(x, prompt=PROMPT, seed=1)
        got.append(tree.expand([tree.root], n=1, sampling=greedy)[0][0].tokens)
        x.check_integrity(tree, *([big] if x is lm else []))
    assert lm.engine.arena is wide and sum(wide.grid) < sum(wide.cap.items)
    assert all(g <= n and (g & (g - 1)) == 0 for g, n in zip(wide.grid, wide.cap.items))
    assert got[0] == got[1]


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_graphs_equal_eager_fixed_steps_and_bounded_buckets(model_dir) -> None:
    greedy = Sampling(max_tokens=24, temperature=0, ignore_eos=True)
    sampled = Sampling(max_tokens=16, temperature=0.8, ignore_eos=True)
    runs = []
    for graphs, max_rows in ((True, 512), (False, 512), (True, 2)):  # max_rows 2: larger batches run eagerly
        lm = _lm(model_dir, fast=True, graphs=graphs, max_rows=max_rows)
        _, tokens, logprobs = _grow(lm, greedy, sampled)
        runs.append((tokens, logprobs))
        if graphs and max_rows == 512:
            assert lm.stats.graph_replays > 0 and lm.stats.graphs > 0 and lm.stats.graph_bytes > 0
            assert lm.stats.graph_captures >= lm.stats.graphs  # each graph held was captured once at least
        if max_rows == 2:
            assert lm.stats.graph_replays == 0
        if not graphs:
            assert lm.stats.graph_captures == 0
    assert runs[0] == runs[1] == runs[2]


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_larger_buffers_recapture_without_an_eager_warm_up(model_dir, monkeypatch) -> None:
    """Buffers rebuilt larger capture each row bucket again; one whose kernels ran before (same
    tile classes and launch settings) skips the eager warm-up and still decodes as eager steps do."""
    greedy = Sampling(max_tokens=6, temperature=0, ignore_eos=True)
    warm_ups = _spy_warm_ups(monkeypatch)
    runs = []
    for graphs in (True, False):
        lm = _lm(model_dir, fast=True, graphs=graphs)
        tree = ThoughtTree(lm, prompt=PROMPT, seed=0)
        kids = tree.expand([tree.root], n=2, sampling=greedy)[0]
        first = lm.engine.arena
        held = len(warm_ups)
        lm.engine.arena_for(dataclasses.replace(first.cap, slots=2 * first.cap.slots), first.shapes)
        assert lm.engine.arena is not first and not lm.engine.arena.graphs
        again = tree.expand([tree.root], n=2, sampling=greedy)[0]  # the same work, on the new buffers
        lm.check_integrity(tree)
        runs.append([k.tokens for k in kids + again])
        if graphs:
            assert all(warm_ups[:held]) and warm_ups[held:] == [False] and lm.engine.arena.graphs
    assert runs[0] == runs[1] and runs[0][:2] == runs[0][2:]


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_a_new_row_bucket_is_captured_without_a_warm_up(model_dir, monkeypatch) -> None:
    """Only the first decode capture of a layout warms up; a batch of another row bucket is
    captured straight away and decodes as eager steps do."""
    greedy = Sampling(max_tokens=5, temperature=0, ignore_eos=True)
    warm_ups = _spy_warm_ups(monkeypatch)
    runs = []
    for graphs in (True, False):
        lm = _lm(model_dir, fast=True, graphs=graphs)
        tree = ThoughtTree(lm, prompt=PROMPT, seed=0)
        tree.materialize()
        lm.engine.arena_for(Capacity(64, 4096, (64, 64, 64), 4096, 64), lm.engine.arena.shapes)  # room for both batches
        warm_ups.clear()
        kids = [tree.expand([tree.root], n=n, sampling=greedy)[0] for n in (7, 2)]
        lm.check_integrity(tree)
        runs.append([k.tokens for ks in kids for k in ks])
        if graphs:
            arena = lm.engine.arena
            assert len(arena.graphs) == 2 and warm_ups.count(True) <= 1 and warm_ups.count(False) >= 1
            assert arena.last_graph is arena.graphs[row_bucket(2), arena.grid][0]  # the last step's, not the largest bucket's
    assert runs[0] == runs[1]


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_capture_survives_the_cycle_collector_freeing_a_dropped_lm(model_dir, monkeypatch) -> None:
    """A dropped LM that only a reference cycle keeps holds captured graphs. The cycle collector
    may run at any allocation, but never while another LM captures: it would destroy those
    graphs mid-capture, which invalidates the capture."""
    greedy = Sampling(max_tokens=4, temperature=0, ignore_eos=True)
    old = _lm(model_dir, fast=True)
    tree = ThoughtTree(old, prompt=PROMPT, seed=0)
    want = [k.tokens for k in tree.expand([tree.root], n=3, sampling=greedy)[0]]
    assert old.stats.graphs > 0
    cycle: list = [old, tree]
    cycle.append(cycle)
    box = [cycle]
    del old, tree, cycle
    real = DecodeArena._forward

    def forward(self: DecodeArena, b: int) -> torch.Tensor:
        if box and torch.cuda.is_current_stream_capturing():
            box.clear()  # the dropped LM is garbage now, mid-capture
            junk = [[[] for _ in range(8)] for _ in range(2000)]  # allocations that would trigger collections
            del junk
        return real(self, b)

    monkeypatch.setattr(DecodeArena, "_forward", forward)
    thresholds = gc.get_threshold()
    gc.set_threshold(1, 1, 1)  # every generation collected at nearly every allocation
    try:
        lm = _lm(model_dir, fast=True)
        tree = ThoughtTree(lm, prompt=PROMPT, seed=0)
        got = [k.tokens for k in tree.expand([tree.root], n=3, sampling=greedy)[0]]
    finally:
        gc.set_threshold(*thresholds)
    assert not box and lm.stats.graph_replays > 0 and lm.stats.graph_failures == 0  # no capture fell back
    assert got == want


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
@pytest.mark.parametrize("kernel", [False, True], ids=["cublas", "few-row-projections"])
def test_graphed_greedy_decoding_matches_transformers(model_dir, monkeypatch, kernel: bool) -> None:
    import transformers

    calls = _spy_few_row_projections(monkeypatch) if kernel else []
    ref = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).cuda().eval()
    lm = _lm(model_dir, fast=True)
    tree = ThoughtTree(lm, prompt=PROMPT, seed=0)
    kids = tree.expand([tree.root], n=3, sampling=Sampling(max_tokens=12, temperature=1.0, ignore_eos=True))[0]
    leaves = tree.expand(kids, n=1, sampling=Sampling(max_tokens=16, temperature=0, ignore_eos=True))
    assert lm.stats.graph_replays > 0
    for kid, (leaf,) in zip(kids, leaves):
        ids = torch.tensor([kid.path_tokens() + leaf.tokens[:-1]], device="cuda")
        with torch.no_grad():
            logits = ref(ids).logits[0, -len(leaf.tokens):]
        chosen = logits.gather(1, torch.tensor(leaf.tokens, device="cuda")[:, None])[:, 0]
        # Each greedy bf16 choice is transformers' fp32 top token or within bf16 noise of it.
        assert (logits.max(-1).values - chosen).max().item() < 0.25
    assert bool(calls) == kernel


@pytest.fixture(scope="module")
def rotary_dirs(tmp_path_factory):
    # Head dim 64 and no q/k norms: the q/k/v projection rotates and stores in its epilogue.
    return {arch: make_model(tmp_path_factory.mktemp(arch), arch, hidden_size=256, num_attention_heads=4, num_key_value_heads=2)
            for arch in ("llama", "qwen2")}


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
@pytest.mark.parametrize("arch", ["llama", "qwen2"])  # qwen2: q/k/v biases
def test_rotary_projection_matches_transformers_and_eager_steps(rotary_dirs, monkeypatch, arch: str) -> None:
    import transformers

    _spy_few_row_projections(monkeypatch)
    rotary: list[int] = []
    real = few_rows.few_rows_rope_store
    monkeypatch.setattr(few_rows, "few_rows_rope_store", lambda x, *a, **k: rotary.append(x.shape[0]) or real(x, *a, **k))
    path = rotary_dirs[arch]
    ref = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).cuda().eval()
    greedy = Sampling(max_tokens=16, temperature=0, ignore_eos=True)
    sampled = Sampling(max_tokens=8, temperature=0.8, ignore_eos=True)
    runs = []
    for graphs in (True, False):
        lm = _lm(path, fast=True, graphs=graphs)
        runs.append(_grow(lm, sampled, greedy))
        assert (lm.stats.graph_replays > 0) == graphs
    assert runs[0][1] == runs[1][1] and rotary
    for node in [n for n in runs[0][0] if n.depth == 2]:  # greedy leaves under sampled children, graphed
        ids = torch.tensor([node.parent.path_tokens() + node.tokens[:-1]], device="cuda")
        with torch.no_grad():
            logits = ref(ids).logits[0, -len(node.tokens):]
        chosen = logits.gather(1, torch.tensor(node.tokens, device="cuda")[:, None])[:, 0]
        assert (logits.max(-1).values - chosen).max().item() < 0.25


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_few_row_projections_in_graphs_equal_them_eagerly(model_dir, monkeypatch) -> None:
    calls = _spy_few_row_projections(monkeypatch)
    greedy = Sampling(max_tokens=12, temperature=0, ignore_eos=True)
    sampled = Sampling(max_tokens=8, temperature=0.8, ignore_eos=True)
    runs = [_grow(_lm(model_dir, fast=True, graphs=graphs), greedy, sampled)[1:] for graphs in (True, False)]
    assert runs[0] == runs[1]
    assert len(calls) > 0


def test_norms_left_to_the_next_projection_match_separate_norms(model_dir, monkeypatch) -> None:
    """With the few-row kernel on every projection, the attention output and MLP down projections
    add the residual and leave RMSNorm to the projection after them (linear.NormedRows): the
    same greedy tokens as with add_rms_norm launched between them (``norm_epilogue`` off, the
    other epilogues on), log-probabilities within rounding; the CPU's one layer covers the
    attention output, the GPU's two layers MLP down too."""
    _spy_few_row_projections(monkeypatch)
    folds: list[int] = []
    real = few_rows.few_rows_add_norm
    monkeypatch.setattr(few_rows, "few_rows_add_norm", lambda x, *a, **k: folds.append(x.shape[0]) or real(x, *a, **k))
    greedy = Sampling(max_tokens=3, temperature=0, ignore_eos=True)
    runs = []
    for fold in (True, False):
        lm = _lm(model_dir, fast=True)
        lm.model.norm_epilogue = fold
        before = len(folds)
        runs.append(_grow(lm, greedy, greedy, stored=True)[1:])
        assert (len(folds) > before) == fold
        assert lm.stats.fast_steps > 0
    assert runs[0][0] == runs[1][0]
    for a, b in zip(runs[0][1], runs[1][1]):
        assert a == pytest.approx(b, abs=2e-2)


def test_one_arena_switching_between_folded_and_unfolded_tails(model_dir) -> None:
    greedy = Sampling(max_tokens=3, temperature=0, ignore_eos=True)
    runs = []
    for fast in (True, False):
        lm = _lm(model_dir, fast=fast)
        tree = ThoughtTree(lm, prompt=PROMPT, seed=0)
        prefill_on_pytorch(lm, tree)
        kids = tree.expand([tree.root], n=3, sampling=greedy)[0]
        lm.engine.decode_work_config = WorkConfig(fold_tail=0)  # the same buffers, tails now as items
        more = tree.expand(kids, n=1, sampling=greedy)
        lm.engine.decode_work_config = WorkConfig()
        last = tree.expand([k for ks in more for k in ks], n=1, sampling=greedy)
        lm.check_integrity(tree)
        runs.append([n.tokens for n in kids + [k for ks in more + last for k in ks]])
    assert runs[0] == runs[1]


def test_an_arena_is_kept_across_work_sizing_and_rebuilt_for_new_launch_settings(model_dir) -> None:
    lm = _lm(model_dir, fast=True)
    tree = ThoughtTree(lm, prompt=PROMPT, seed=0)
    prefill_on_pytorch(lm, tree)
    tree.expand([tree.root], n=2, sampling=Sampling(max_tokens=2, temperature=0, ignore_eos=True))
    engine = lm.engine
    first = engine.arena
    engine.decode_work_config = WorkConfig(fold_own=0, fold_tail=0, rounds=(1, 2))  # work sizing only
    assert engine.arena_for(first.cap, first.shapes) is first
    engine.decode_work_config = WorkConfig(merge_block=1)  # a launch setting its graphs hold
    rebuilt = engine.arena_for(first.cap, first.shapes)
    assert rebuilt is not first and rebuilt.work.merge_block == 1


def test_arena_capacity_leaves_room_where_trees_grow() -> None:
    need = Capacity(rows=8, slots=300, items=(3, 0, 9), partials=40, tail_pieces=5)
    first = need.grown(None, min_rows=512)
    assert first == Capacity(rows=512, slots=1024, items=(4, 0, 16), partials=128, tail_pieces=16)
    assert first.holds(need)
    # A tree twice as large fits the same buffers: no rebuild, no graph recaptured.
    assert first.holds(Capacity(rows=16, slots=600, items=(4, 0, 16), partials=80, tail_pieces=9))
    # Past them, only the sizes that overflow grow (with room again); the others stay.
    more = Capacity(rows=8, slots=1500, items=(20, 1, 9), partials=40, tail_pieces=5).grown(first, min_rows=512)
    assert more == Capacity(rows=512, slots=4096, items=(32, 1, 16), partials=128, tail_pieces=16)
    assert Capacity(rows=768, slots=1, items=(0, 0, 0), partials=1, tail_pieces=1).grown(more, min_rows=512).rows == 768


def test_distinct_children_on_the_fixed_buffers_match_the_general_step(model_dir) -> None:
    sp = Sampling(max_tokens=3, temperature=0.8, top_k=5, distinct=True)
    got = []
    for fast in (True, False):
        lm = _lm(model_dir, fast=fast)
        with ThoughtTree(lm, prompt=PROMPT, seed=4) as tree:
            kids = tree.expand([tree.root], n=3, sampling=sp)[0]
            more = tree.expand(kids[:2], n=2, sampling=sp)
            lm.check_integrity(tree)
            got.append([k.tokens for k in kids + [g for gs in more for g in gs]])
        assert lm.kv.num_tokens == 0
    assert all(len({tuple(t) for t in group}) == len(group) for group in (got[0][:3], got[0][3:5], got[0][5:]))
    assert got[0] == got[1]
