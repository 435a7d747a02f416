"""Speculative decoding returns what plain decoding returns, token for token, and frees every draft."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from dataclasses import dataclass

import pytest
import torch

from thoughttree import LM, RuntimeConfig, Sampling, Speculative, ThoughtTree
from thoughttree.runtime.kv_pool import KVPool
from thoughttree.runtime.kv_tree import KVTree
from thoughttree.runtime.speculative import Branch, DraftModel, DraftTree, TreeLookup, order
from thoughttree.search.driver import search
from thoughttree.strategies import BFS, DFS, MCTS, Beam, BestOfN, SelfConsistency

from thoughttree.tasks import LogProb, Task, TaskConfig, ValuePrompt, Verifier

RUNTIME = RuntimeConfig(page_size=4, num_pages=4096)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Many small forwards: one intra-op thread is several times faster on a shared machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def load(path) -> LM:
    lm = LM.from_pretrained(path, device="cpu", runtime=RUNTIME)
    lm.engine.after_step = lambda: lm.kv.check_integrity()  # no draft KV left behind, none freed that is read
    return lm


class Echo:
    """A drafter that proposes what the target itself would draw greedily (a draft model equal to the
    target), or, with ``noise``, wrong tokens at every other level: acceptance runs of every length."""

    def __init__(self, lm: LM, noise: bool = False) -> None:
        self.inner, self.noise = DraftModel(lm, width=2), noise

    def begin(self, kv, branches):
        self.inner.begin(kv, branches)

    def propose(self, branches, max_nodes, max_depth):
        drafts = self.inner.propose(branches, max_nodes, max_depth)
        if self.noise:
            for d in drafts:
                d.tokens = [(t + 1) % 50 if depth % 2 == 0 else t for t, depth in zip(d.tokens, d.depths())]
                kids = Counter(zip(d.parents, d.tokens))
                if max(kids.values(), default=1) > 1:  # a collision made two siblings equal: keep the plain draft
                    return self.inner.propose(branches, max_nodes, max_depth)
        return drafts

    def accepted(self, branch, tokens):
        self.inner.accepted(branch, tokens)

    def end(self):
        self.inner.end()


def tree_tokens(tree: ThoughtTree) -> list[tuple]:
    return [
        (n.id, n.parent.id if n.parent else -1, tuple(n.tokens), n.metadata.get("finish_reason"), n.status)
        for n in tree.nodes
    ]


def logprobs(tree: ThoughtTree) -> list[float]:
    return [lp for n in tree.nodes for lp in n.metadata.get("token_logprobs", [])]


def same_trees(a: ThoughtTree, b: ThoughtTree) -> None:
    assert tree_tokens(a) == tree_tokens(b)
    # Float32 on the CPU: the logits of a row move by rounding with the batch's shape, no more.
    assert logprobs(a) == pytest.approx(logprobs(b), rel=1e-5, abs=1e-5)


@dataclass(frozen=True)
class TinyConfig(TaskConfig):
    sampling: Sampling = Sampling(max_tokens=12, stop=("\n",))
    kind: str = "verifier"


class Tiny(Task):
    """Continue a numbers prompt, valued by a verifier, a value prompt or log-probability."""

    def __init__(self, config: TinyConfig) -> None:
        self.config = config

    def prompt(self, problem: str) -> str:
        return f"Use {problem} to make 24.\n"

    def evaluator(self):
        if self.config.kind == "value":
            return ValuePrompt(
                prompt=lambda p, n: "value: " + n.path_text(include_root=False) + "\n",
                labels={"sure": 20.0, "likely": 1.0, "impossible": 0.001},
                samples=2,
                sampling=Sampling(max_tokens=3, temperature=1.0),
            )
        if self.config.kind == "logprob":
            return LogProb()
        return Verifier(lambda problem, node: sum(ch.isdigit() for ch in node.path_text(include_root=False)) / 10)

    def is_terminal(self, problem: str, node) -> bool:
        return node.depth >= 3

    def answer(self, problem: str, node) -> str | None:
        return node.path_text(include_root=False).strip() or None


STRATEGIES = [
    ("bfs", lambda: BFS(breadth=2, samples=2, depth=2), "value"),
    ("dfs", lambda: DFS(samples=2, depth=2, threshold=0.0), "verifier"),
    ("beam", lambda: Beam(width=2, samples=2, max_steps=2), "verifier"),
    ("mcts", lambda: MCTS(iterations=4, leaves_per_round=2, samples=2), "verifier"),
    ("best-of-n", lambda: BestOfN(n=4), "logprob"),
    ("self-consistency", lambda: SelfConsistency(n=4), "verifier"),
]


@pytest.fixture(scope="module")
def tiny_lm(tiny_model_dir) -> LM:
    lm = load(tiny_model_dir)
    lm.draft_twin = load(tiny_model_dir)  # a draft model equal to the target, in its own pool
    return lm


@pytest.mark.parametrize("make, kind", [s[1:] for s in STRATEGIES], ids=[s[0] for s in STRATEGIES])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_every_strategy_returns_the_same_tree(tiny_lm, make, kind, temperature):
    lm = tiny_lm
    sampling = Sampling(max_tokens=12, temperature=temperature, stop=("\n",))
    task = Tiny(TinyConfig(kind=kind, sampling=sampling))
    lm.speculative = None
    plain = search(task, make(), lm, problem="4 5 6 10", seed=2)
    drafted_before = lm.stats.draft_tokens
    trees = []
    # Greedy and sampled runs between them cover both drafters and every shape.
    specs = (
        (
            Speculative(drafter=Echo(lm.draft_twin), shape="dynamic", adaptive=False),
            Speculative(drafter="lookup", shape="chain", adaptive=False, max_depth=4),
        )
        if temperature == 0
        else (
            Speculative(drafter=Echo(lm.draft_twin, noise=True), shape="tree", top_k=2, adaptive=False),
            Speculative(drafter="lookup", shape="dynamic", max_nodes=6),
        )
    )
    for spec in specs:
        lm.speculative = spec
        trees.append(search(task, make(), lm, problem="4 5 6 10", seed=2).tree)
    lm.speculative = None
    for tree in trees:
        same_trees(plain.tree, tree)
    lm.check_integrity(plain.tree, *trees)
    for tree in (plain.tree, *trees):
        tree.release_kv()
    assert lm.stats.accepted_tokens > 0 and lm.stats.draft_tokens > drafted_before


@pytest.fixture(scope="module")
def arch_lm(arch_model_dir) -> LM:
    lm = load(arch_model_dir[1])
    lm.draft_twin = load(arch_model_dir[1])
    return lm


@pytest.mark.parametrize("shape", ["chain", "tree", "dynamic"])
def test_every_architecture_and_shape_decodes_the_same_tokens(arch_lm, shape):
    lm = arch_lm
    sampling = Sampling(max_tokens=10, temperature=1.0, top_k=20, top_p=0.9)
    spec = Sampling(
        max_tokens=10,
        temperature=1.0,
        top_k=20,
        top_p=0.9,
        speculative=Speculative(drafter=Echo(lm.draft_twin), shape=shape, adaptive=False, max_nodes=6),
    )
    with (
        ThoughtTree(lm, prompt="the quick brown fox", seed=4) as a,
        ThoughtTree(lm, prompt="the quick brown fox", seed=4) as b,
    ):
        a.expand([a.root], n=3, sampling=sampling)
        b.expand([b.root], n=3, sampling=spec)
        same_trees(a, b)
        lm.check_integrity(a, b)


def ends_inside_drafts(lm: LM, sampling: Sampling) -> None:
    """Decode with and without a draft of the target's own tokens; the same children must come out."""
    with (
        ThoughtTree(lm, prompt="Use 4 5 6 10 to make 24.", seed=7) as plain,
        ThoughtTree(lm, prompt="Use 4 5 6 10 to make 24.", seed=7) as drafted,
    ):
        plain.expand([plain.root], n=3, sampling=sampling)
        spec = Speculative(drafter=Echo(lm.draft_twin), shape="chain", adaptive=False, max_depth=8)
        drafted.expand([drafted.root], n=3, sampling=Sampling(**{**sampling.__dict__, "speculative": spec}))
        same_trees(plain, drafted)
        lm.check_integrity(plain, drafted)


def test_stops_eos_and_length_inside_an_accepted_draft(tiny_lm):
    lm = tiny_lm
    greedy = Sampling(max_tokens=24, temperature=0.0, ignore_eos=True)
    with ThoughtTree(lm, prompt="Use 4 5 6 10 to make 24.", seed=7) as t:
        full = t.expand([t.root], n=1, sampling=greedy)[0][0]
    text, tokens = full.text, full.tokens
    stop = text[len(text) // 2 : len(text) // 2 + 2]
    assert stop.strip()
    before = lm.stats.accepted_tokens
    ends_inside_drafts(lm, Sampling(max_tokens=24, temperature=0.0, stop=(stop,), ignore_eos=True))
    assert lm.stats.accepted_tokens > before
    ends_inside_drafts(lm, Sampling(max_tokens=24, temperature=0.0, stop_token_ids=(tokens[9],), ignore_eos=True))
    ends_inside_drafts(lm, Sampling(max_tokens=7, temperature=0.0, ignore_eos=True))
    eos = lm.engine.eos
    lm.engine.eos = {tokens[6]}
    try:
        ends_inside_drafts(lm, Sampling(max_tokens=24, temperature=0.0))
    finally:
        lm.engine.eos = eos
    ends_inside_drafts(lm, Sampling(max_tokens=16, temperature=1.0, stop=(stop,)))


def test_context_limit_inside_a_draft(tiny_model_dir):
    lm = load(tiny_model_dir)
    lm.draft_twin = load(tiny_model_dir)
    prompt = lm.encode("Use 4 5 6 10 to make 24.")
    lm.engine.max_context = len(prompt) + 5  # the context, not max_tokens, ends these branches
    ends_inside_drafts(lm, Sampling(max_tokens=40, temperature=0.0, ignore_eos=True))


@pytest.mark.parametrize("pages", [16, 20, 24, 28])
def test_drafts_never_take_the_room_plain_decoding_needs(tiny_model_dir, pages):
    """A pool with room for plain decoding but not for every draft: drafts are dropped, never
    the step; the children are plain decoding's."""
    runtime = RuntimeConfig(page_size=4, num_pages=pages)
    lm, twin = (LM.from_pretrained(tiny_model_dir, device="cpu", runtime=runtime) for _ in range(2))
    lm.engine.after_step = lambda: lm.kv.check_integrity()
    sampling = Sampling(max_tokens=9, temperature=1.0, ignore_eos=True)
    spec = Speculative(drafter=DraftModel(twin), shape="dynamic", adaptive=False, max_depth=4)
    with ThoughtTree(lm, prompt="the cat sat", seed=2) as plain:
        plain.expand([plain.root], n=4, sampling=sampling)
        spare = lm.kv.pool.num_free
        plain.release_kv()
        with ThoughtTree(lm, prompt="the cat sat", seed=2) as drafted:
            drafted.expand([drafted.root], n=4, sampling=dataclasses.replace(sampling, speculative=spec))
            same_trees(plain, drafted)
            assert lm.kv.pool.num_free == spare
    assert lm.stats.draft_tokens > 0


@pytest.mark.parametrize("pages", [3, 5, 8])
def test_a_full_draft_pool_never_fails_the_targets_decoding(tiny_model_dir, pages):
    """A draft model whose own KV pool fills up drafts less (for some branches nothing); the
    target's children are plain decoding's, call after call."""
    lm = load(tiny_model_dir)
    draft = LM.from_pretrained(tiny_model_dir, device="cpu", runtime=RuntimeConfig(page_size=4, num_pages=pages))
    spec = Speculative(drafter=DraftModel(draft), shape="chain", adaptive=False, max_depth=4)
    sampling = Sampling(max_tokens=14, temperature=1.0, ignore_eos=True)
    with (
        ThoughtTree(lm, prompt="the cat sat on the mat", seed=4) as plain,
        ThoughtTree(lm, prompt="the cat sat on the mat", seed=4) as drafted,
    ):
        for tree, s in ((plain, sampling), (drafted, dataclasses.replace(sampling, speculative=spec))):
            kids = tree.expand([tree.root], n=3, sampling=s)[0]
            tree.expand(kids[:2], n=2, sampling=s)
        same_trees(plain, drafted)
    draft.kv.check_integrity()


@pytest.fixture(scope="module")
def bundled_lm() -> LM:
    from thoughttree.commands.model import bundled_model_path

    lm = load(bundled_model_path())
    lm.draft_twin = load(bundled_model_path())
    return lm


def test_sampled_distribution_is_the_targets(bundled_lm):
    """Second tokens drawn through accepted drafts follow the target's own probabilities (a chi-square
    test on the bundled model's small vocabulary)."""
    lm = bundled_lm
    prompt = "Input: 4 5 6 10\n"
    spec = Speculative(drafter=Echo(lm.draft_twin), shape="tree", top_k=2, adaptive=False, max_depth=2)
    before = lm.stats.accepted_tokens
    with ThoughtTree(lm, prompt=prompt, seed=11) as tree:
        kids = tree.expand(
            [tree.root], n=400, sampling=Sampling(max_tokens=2, temperature=1.0, ignore_eos=True, speculative=spec)
        )[0]
        first = Counter(k.tokens[0] for k in kids).most_common(1)[0][0]
        seconds = Counter(k.tokens[1] for k in kids if k.tokens[0] == first)
        probs = torch.softmax(lm.tree_logits([lm.encode(prompt) + [first]])[0], dim=-1)
    assert lm.stats.accepted_tokens - before > 100
    total = sum(seconds.values())
    top = probs.argsort(descending=True)[:4].tolist()
    cells = [(seconds[t], float(probs[t])) for t in top]
    cells.append((total - sum(c for c, _ in cells), max(0.0, 1.0 - sum(p for _, p in cells))))
    chi2 = sum((c - total * p) ** 2 / (total * p) for c, p in cells if total * p > 1e-9)
    assert chi2 < 18.5, f"chi-square {chi2:.1f} over {cells} (p < 0.001 for 4 degrees of freedom)"


def test_lookup_finds_continuations_in_sibling_nodes():
    kv = KVTree(KVPool(1, 64, 4, 1, 2, dtype=torch.float32, device="cpu"))
    root = kv.insert(None, [1, 2, 3])
    sibling = kv.insert(root, [7, 8, 9, 10, 11])
    cousin = kv.insert(root, [7, 8, 5, 6])
    mine = kv.insert(root, [4, 7, 8])
    lookup = TreeLookup(ngram=2)
    lookup.begin(kv, [Branch(0, mine, [])])
    draft = lookup.propose([Branch(0, mine, [])], max_nodes=8, max_depth=3)[0]
    paths = {tuple(draft.path(k)) for k in range(len(draft)) if k not in draft.parents}
    assert paths == {(9, 10, 11), (5, 6)}
    assert order(draft, "chain", 1) and len(order(draft, "chain", 1)) in (2, 3)
    lookup.end()
    for s in (sibling, cousin, mine):
        kv.release(s)
    kv.check_integrity()


def test_lookup_ranks_a_sampled_branchs_continuations_with_its_own_noise():
    """Three matches continue with 9, one with 5: a greedy branch drafts 9 first; a sampled branch
    drafts first the token whose log-count plus the sampler's noise at that draw step is largest,
    so over seeds the one match in four comes first about as often as the sampler would draw it."""
    from thoughttree.kernels.reference import uniform_noise_at

    kv = KVTree(KVPool(1, 64, 4, 1, 2, dtype=torch.float32, device="cpu"))
    root = kv.insert(None, [1, 2, 3])
    held = [kv.insert(root, [20 + a, 7, 8, t]) for a, t in enumerate((9, 9, 9, 5))]
    mine = kv.insert(root, [4, 7, 8])
    lookup = TreeLookup(ngram=2)
    sampled = Sampling(temperature=1.0)

    def first(branch: Branch) -> int:
        lookup.begin(kv, [branch])
        draft = lookup.propose([branch], max_nodes=2, max_depth=1)[0]
        lookup.end()
        return draft.tokens[max(range(len(draft)), key=lambda k: draft.scores[k])]

    assert first(Branch(0, mine, [11, 12])) == 9
    firsts = []
    for seed in range(400):
        g = -torch.log(-torch.log(uniform_noise_at(torch.tensor(seed), torch.tensor(2), torch.tensor([9, 5]))))
        want = 9 if math.log(3) + g[0] > g[1] else 5
        firsts.append(first(Branch(0, mine, [11, 12], sampled, seed)))
        assert firsts[-1] == want
    assert 0.15 < firsts.count(5) / len(firsts) < 0.35
    for seg in (*held, mine):
        kv.release(seg)
    kv.check_integrity()


def test_shapes_keep_every_prefix_closed_under_parents():
    d = DraftTree()
    a = d.add(-1, 5, 0.6)
    b = d.add(-1, 6, 0.3)
    d.add(a, 7, 0.5)
    d.add(b, 8, 0.3)
    d.add(a, 9, 0.1)
    assert order(d, "chain", 1) == [0, 2]
    assert order(d, "tree", 1) == [0, 2]
    assert order(d, "tree", 2) == [0, 1, 2, 4, 3]
    dyn = order(d, "dynamic", 1)
    assert dyn == [0, 2, 1, 3, 4]
    for n in range(len(dyn) + 1):
        d.subset(dyn[:n])  # raises when a node comes before its parent


def test_cost_model_stops_drafting_when_drafts_are_never_kept():
    from thoughttree.runtime.speculative import CostModel

    cost = CostModel()
    nodes = [[(0.9, 1), (0.8, 2)]] * 8
    assert cost.budgets(8, nodes, adaptive=True) != [0] * 8
    for _ in range(60):
        cost.record_step(8, 0.010)
        cost.record_step(24, 0.022)  # rows dear: 16 more cost more than a plain step
        cost.record_acceptance([0.9, 0.8], [1, 2], [False, False])
        cost.end_step()
    assert cost.budgets(8, nodes, adaptive=True) == [0] * 8
    asks = [cost.worth_drafting(8) for _ in range(4000)]
    # The drafter is asked now and then only, less and less often: 16, 32, ... up to 1024 apart.
    at = [k for k, asked in enumerate(asks) if asked]
    gaps = [b - a for a, b in zip(at, at[1:])]
    assert gaps[:4] == [16, 32, 64, 128] and max(gaps) == 1024, gaps
    assert cost.budgets(8, nodes, adaptive=False) == [2] * 8
    for _ in range(60):  # the same rows, every draft kept: drafting pays again
        cost.record_acceptance([0.9, 0.8], [1, 2], [True, True])
        cost.end_step()
    assert cost.budgets(8, nodes, adaptive=True) == [2] * 8


def test_cost_model_learns_that_unsure_drafts_are_kept():
    from thoughttree.runtime.speculative import CostModel

    cost = CostModel()
    for _ in range(40):
        cost.record_step(1, 0.010)
        cost.record_step(9, 0.011)  # rows cheap: a GPU below its FLOP limit
        cost.record_acceptance([0.01], [1], [True])  # a draft model unsure of tokens it gets right
        cost.end_step()
    assert cost.acceptance(0.01, 1) > 0.9
    assert cost.budgets(1, [[(0.01, 1), (0.0001, 2)]], adaptive=True)[0] >= 1


def test_a_score_bin_not_measured_yet_leans_on_its_depth():
    """Drafts never kept at depth 1 in one score bin make a node of another score at depth 1
    unlikely too, long before that bin has measurements of its own, and deeper nodes no likelier
    (a node is kept only after its parent)."""
    from thoughttree.runtime.speculative import CostModel

    cost = CostModel()
    fresh = [cost.acceptance(0.5, d) for d in (1, 2, 3)]
    assert fresh[0] > fresh[1] > fresh[2] > 0.1
    for _ in range(30):
        cost.record_acceptance([0.95], [1], [False])
    assert cost.acceptance(0.5, 1) < 0.1 < fresh[0]
    assert cost.acceptance(0.95, 3) <= cost.acceptance(0.95, 2) < 0.1
    for _ in range(200):  # a bin measured well goes by its own count
        cost.record_acceptance([0.5, 0.5], [1, 2], [True, True])
    assert cost.acceptance(0.5, 1) > 0.95 and cost.acceptance(0.5, 2) > 0.5


def test_a_draft_model_with_another_tokenizer_is_refused(tiny_model_dir):
    from thoughttree.commands.model import bundled_model_path

    lm = load(tiny_model_dir)
    with pytest.raises(ValueError, match="different tokenizer") as info:
        lm.engine.speculator.drafter(Speculative(drafter=f"draft:{bundled_model_path()}"))
    assert str(tiny_model_dir) in str(info.value) and "game24" in str(info.value)


def test_a_draft_model_without_the_targets_padded_ids_drafts_around_them(tmp_path):
    """A target whose vocabulary is padded past its tokenizer samples ids the draft model has no
    embedding for: those branches decode plainly, the others keep speculating, the tokens are the same."""
    from tiny_models import make_model, make_tokenizer

    words = len(make_tokenizer(tmp_path / "tokenizer"))
    lm = load(make_model(tmp_path / "target", "llama", vocab_size=words + 64, initializer_range=0.3))
    draft = load(make_model(tmp_path / "draft", "llama", vocab_size=words))
    plain = Sampling(max_tokens=20, temperature=1.0, ignore_eos=True)
    spec = Speculative(drafter=DraftModel(draft), adaptive=False)
    with (
        ThoughtTree(lm, prompt="the cat", seed=3) as a,
        ThoughtTree(lm, prompt="the cat", seed=3) as b,
    ):
        kids = a.expand([a.root], n=4, sampling=plain)[0]
        assert any(max(k.tokens) >= words for k in kids)  # the case under test happens
        before = lm.stats.draft_tokens
        b.expand([b.root], n=4, sampling=Sampling(**{**plain.__dict__, "speculative": spec}))
        assert lm.stats.draft_tokens > before
        same_trees(a, b)
        lm.check_integrity(a, b)


def test_lookup_on_the_bundled_model_keeps_the_tokens_and_saves_forwards(bundled_lm):
    lm = bundled_lm
    sampling = Sampling(max_tokens=24, temperature=0.7, stop="\n")
    trees = []
    for spec in (None, "lookup"):
        lm.speculative = spec
        steps = lm.stats.forward_steps
        tree = ThoughtTree(lm, prompt="Input: 4 5 6 10\nSteps:\n", seed=1)
        for _ in range(2):
            tree.expand(tree.frontier()[:3], n=3, sampling=sampling)
        trees.append((tree, lm.stats.forward_steps - steps))
    same_trees(trees[0][0], trees[1][0])
    assert trees[1][1] < trees[0][1]
    assert math.isfinite(lm.stats.acceptance_rate) and lm.stats.tokens_per_forward > 0


def test_the_command_line_option_sets_the_models_default():
    from thoughttree.commands.common import CliError
    from thoughttree.commands.model import load_model

    lm = load_model("bundled", "cpu", None, speculative="auto")
    assert lm.speculative == Speculative(drafter="lookup")
    with pytest.raises(CliError, match="--speculative bogus: .*'lookup', 'draft:PATH'"):
        load_model("bundled", "cpu", None, speculative="bogus")
    with pytest.raises(CliError, match="--speculative draft:/nonexistent: .*does not exist"):
        load_model("bundled", "cpu", None, speculative="draft:/nonexistent")


def test_the_bundled_draft_model_drafts_for_the_bundled_model():
    """``draft:bundled`` is the bundled model's draft model: trained on the same data and split,
    same tokenizer; its sampled drafts on a Game of 24 prompt are mostly kept, and the children
    are plain decoding's."""
    import json

    from thoughttree.commands.model import bundled_draft_path, bundled_model_path, load_model

    draft, target = (
        json.loads((p / "training.json").read_text()) for p in (bundled_draft_path(), bundled_model_path())
    )
    assert draft["size"] == "draft"
    assert {k: draft[k] for k in ("split", "held_out", "data_sha256")} == {
        k: target[k] for k in ("split", "held_out", "data_sha256")
    }
    lm = load_model("bundled", "cpu", None, speculative="draft:bundled")
    assert lm.speculative.drafter == f"draft:{bundled_draft_path()}"
    sampling = Sampling(max_tokens=32, temperature=1.0, stop="\n")
    spec = dataclasses.replace(lm.speculative, shape="chain", adaptive=False)
    with (
        ThoughtTree(lm, prompt="propose: 4 5 6 10\n", seed=3) as plain,
        ThoughtTree(lm, prompt="propose: 4 5 6 10\n", seed=3) as drafted,
    ):
        plain.expand([plain.root], n=8, sampling=dataclasses.replace(sampling, speculative=Speculative(drafter="off")))
        before = (lm.stats.accepted_tokens, lm.stats.draft_tokens)
        drafted.expand([drafted.root], n=8, sampling=dataclasses.replace(sampling, speculative=spec))
        same_trees(plain, drafted)
    kept, drafted_tokens = lm.stats.accepted_tokens - before[0], lm.stats.draft_tokens - before[1]
    assert kept > 0.6 * drafted_tokens > 0


class Unseeded:
    """A drafter that hides each branch's sampling and seed from ``inner``: it drafts the most
    likely tokens, as a drafter that knows nothing of the sampler's noise would."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def begin(self, kv, branches):
        self.inner.begin(kv, [dataclasses.replace(b, sampling=None) for b in branches])

    def propose(self, branches, max_nodes, max_depth):
        return self.inner.propose([dataclasses.replace(b, sampling=None) for b in branches], max_nodes, max_depth)

    def accepted(self, branch, tokens):
        self.inner.accepted(dataclasses.replace(branch, sampling=None), tokens)

    def end(self):
        self.inner.end()


def test_a_draft_model_draws_with_the_targets_noise(tiny_lm):
    """A sampled branch's draft model perturbs its logits with the noise the target's sampler
    adds at the same draw steps: a draft model equal to the target proposes the very tokens the
    target then draws, so its drafts are kept, where proposing its most likely tokens keeps few."""
    sampling = Sampling(max_tokens=24, temperature=1.0, top_k=40, ignore_eos=True)
    rates = {}
    with ThoughtTree(tiny_lm, prompt="the cat", seed=5) as plain:
        plain.expand([plain.root], n=3, sampling=sampling)
        for name, drafter in (
            ("seeded", DraftModel(tiny_lm.draft_twin)),
            ("unseeded", Unseeded(DraftModel(tiny_lm.draft_twin))),
        ):
            spec = Speculative(drafter=drafter, shape="chain", adaptive=False)
            before = (tiny_lm.stats.accepted_tokens, tiny_lm.stats.draft_tokens)
            with ThoughtTree(tiny_lm, prompt="the cat", seed=5) as tree:
                tree.expand([tree.root], n=3, sampling=dataclasses.replace(sampling, speculative=spec))
                same_trees(plain, tree)
            kept, drafted = (tiny_lm.stats.accepted_tokens - before[0], tiny_lm.stats.draft_tokens - before[1])
            rates[name] = kept / drafted
    assert rates["seeded"] > 0.9 and rates["unseeded"] < 0.5, rates


def test_the_drafter_is_asked_one_level_past_what_was_verified(tiny_lm, monkeypatch):
    """With the cost model sizing drafts, a drafter is asked for one level more than the deepest
    one verified in the step before (the first time, for the full depth)."""
    from thoughttree.runtime.speculative import CostModel

    asked: list[int] = []
    verify = iter([2, 0, 0, 1, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3])
    monkeypatch.setattr(CostModel, "worth_drafting", lambda self, rows: True)
    monkeypatch.setattr(CostModel, "budgets", lambda self, rows, nodes, adaptive: [next(verify)] * len(nodes))

    class Asked(Echo):
        def propose(self, branches, max_nodes, max_depth):
            asked.append(max_depth)
            return super().propose(branches, max_nodes, max_depth)

    spec = Speculative(drafter=Asked(tiny_lm.draft_twin), shape="chain", max_depth=6)
    with ThoughtTree(tiny_lm, prompt="the cat", seed=1) as tree:
        tree.expand(
            [tree.root], n=1, sampling=Sampling(max_tokens=20, temperature=0.0, ignore_eos=True, speculative=spec)
        )
    assert asked[:8] == [6, 3, 1, 1, 2, 3, 4, 4]  # a proposal of 2 levels verifies 2, not 3


def test_perturbed_scores_are_what_the_sampler_takes_the_argmax_of():
    from thoughttree.runtime.sampler import perturbed_scores, sample_packed

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 97, generator=g) * 3
    params = [
        Sampling(temperature=0.0),
        Sampling(temperature=1.0),
        Sampling(temperature=0.7, top_k=5),
        Sampling(temperature=1.3, top_p=0.8),
        Sampling(temperature=1.0, min_p=0.2),
        Sampling(temperature=0.0, top_k=3),
    ]
    seeds, steps = [3, 1 << 40, 7, 7, 11, 2], [0, 5, 9, 9, 1, 4]
    drawn = sample_packed(logits, params, seeds, steps, fused=False)[:, 0].long()
    assert torch.equal(perturbed_scores(logits, params, seeds, steps).argmax(dim=-1), drawn)
