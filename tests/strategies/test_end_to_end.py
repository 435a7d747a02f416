"""Every strategy through thoughttree.search on a tiny random Llama (real runtime, CPU)."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from thoughttree import LM, RuntimeConfig, Sampling, Status
from thoughttree.search.driver import Budget, search
from thoughttree.search.results import SearchResult
from thoughttree.strategies import BFS, DFS, MCTS, Beam, BestOfN, SelfConsistency
from thoughttree.tasks import LogProb, Rollout, Task, TaskConfig, ValuePrompt, Verifier, Vote
from thoughttree.tree.serialize import tree_to_dict

GREEDY = Sampling(max_tokens=5, temperature=0.0, ignore_eos=True)
SAMPLED = Sampling(max_tokens=5, temperature=1.0, ignore_eos=True)


@dataclass(frozen=True)
class TinyConfig(TaskConfig):
    sampling: Sampling = SAMPLED
    kind: str = "verifier"


class Tiny(Task):
    """Continue a numbers prompt; value by a verifier, a value prompt, a vote or log-probability."""

    def __init__(self, config: TinyConfig | None = None) -> None:
        self.config = config or TinyConfig()

    def prompt(self, problem: str) -> str:
        return f"Use {problem} to make 24.\n"

    def evaluator(self):
        kind = self.config.kind
        if kind == "value":
            return ValuePrompt(prompt=lambda p, n: "value: " + n.path_text(include_root=False) + "\n",
                               labels={"sure": 20.0, "likely": 1.0, "impossible": 0.001}, samples=2,
                               sampling=Sampling(max_tokens=3, temperature=1.0))
        if kind == "vote":
            return Vote(prompt=lambda p, parent, kids: "vote:\n" + "\n".join(k.text for k in kids), samples=2,
                        sampling=Sampling(max_tokens=4, temperature=1.0))
        if kind == "logprob":
            return LogProb()
        return Verifier(lambda problem, node: sum(ch.isdigit() for ch in node.path_text(include_root=False)) / 10)

    def is_terminal(self, problem: str, node) -> bool:
        return node.depth >= 3

    def answer(self, problem: str, node) -> str | None:
        return node.path_text(include_root=False).strip() or None


@pytest.fixture
def lm(tiny_model_dir) -> LM:
    return LM.from_pretrained(tiny_model_dir, device="cpu", runtime=RuntimeConfig(page_size=4, num_pages=2048))


def check(lm, result):
    tree = result.tree
    lm.check_integrity(tree)
    assert result.statistics.rounds >= 1 and result.statistics.forward_steps > 0
    assert result.statistics.generated_tokens > 0
    for node in tree.nodes[1:]:
        assert node.text == lm.decode(node.tokens)
    json.dumps(tree_to_dict(tree))  # the tree saves
    return tree


STRATEGIES = [
    ("bfs-value", lambda: BFS(breadth=2, samples=2, depth=2), "value"),
    ("bfs-vote", lambda: BFS(breadth=2, samples=3, depth=2), "vote"),
    ("dfs", lambda: DFS(samples=2, depth=2, threshold=0.0), "verifier"),
    ("beam-thought", lambda: Beam(width=2, samples=2, max_steps=2), "verifier"),
    ("beam-value", lambda: Beam(width=2, samples=2, max_steps=2, score="value"), "logprob"),
    ("mcts-uct", lambda: MCTS(iterations=4, leaves_per_round=2, samples=2), "verifier"),
    ("mcts-puct", lambda: MCTS(iterations=4, leaves_per_round=2, samples=2, rule="puct"), "value"),
    ("best-of-n", lambda: BestOfN(n=4), "logprob"),
    ("self-consistency", lambda: SelfConsistency(n=4), "verifier"),
]


@pytest.mark.parametrize("make, kind", [s[1:] for s in STRATEGIES], ids=[s[0] for s in STRATEGIES])
def test_strategy_runs_on_a_real_model(lm, make, kind):
    result = search(Tiny(TinyConfig(kind=kind)), make(), lm, problem="4 5 6 10", seed=1)
    tree = check(lm, result)
    assert result.best is not None and result.best.parent is not None
    assert len(tree) > 2


def test_token_beam_on_a_real_model(lm):
    result = search(Tiny(), Beam(width=3, unit="token", max_steps=3), lm, problem="1 2 3 4")
    tree = check(lm, result)  # scored by tree_logits: nothing is sampled, the top tokens count as generated
    assert [len(n.tokens) for n in tree.nodes[1:]] == [1] * (len(tree) - 1)
    assert result.statistics.generated_tokens == len(tree) - 1
    assert max(n.depth for n in tree.nodes) == 3


def test_mcts_rollouts_on_a_real_model(lm):
    rollout = Rollout(reward=lambda problem, text: float(any(ch.isdigit() for ch in text)),
                      sampling=Sampling(max_tokens=4, temperature=1.0))
    result = search(Tiny(), MCTS(iterations=3, leaves_per_round=2, samples=2, rollout=rollout), lm, problem="1 1 1 8")
    tree = check(lm, result)
    assert all(n.value in (0.0, 1.0) for n in tree.nodes[1:] if n.value is not None)


def test_a_bfs_round_decodes_its_whole_frontier_together(lm):
    result = search(Tiny(), BFS(breadth=3, samples=3, depth=2), lm, problem="2 3 4 6")
    second = result.statistics.per_round[1]
    assert second.expanded == 3 and second.new_nodes == 9
    # one forward step per generated position for all nine children, not one per child
    assert second.expand.forward_steps == second.longest_generation == GREEDY.max_tokens
    assert second.expand.generated_tokens == 9 * GREEDY.max_tokens
    assert result.statistics.reuse_factor > 1.0
    check(lm, result)


def test_same_seed_same_saved_tree_and_save_load_save(lm, tmp_path):
    task = Tiny(TinyConfig(kind="value"))
    a = search(task, BFS(breadth=2, samples=2, depth=2), lm, problem="4 5 6 10", seed=3)
    a.tree.release_kv()
    b = search(task, BFS(breadth=2, samples=2, depth=2), lm, problem="4 5 6 10", seed=3)
    assert json.dumps(tree_to_dict(a.tree), sort_keys=True) == json.dumps(tree_to_dict(b.tree), sort_keys=True)
    b.save(tmp_path / "one.json")
    SearchResult.load(tmp_path / "one.json").save(tmp_path / "two.json")
    assert (tmp_path / "one.json").read_bytes() == (tmp_path / "two.json").read_bytes()
    assert json.loads((tmp_path / "one.json").read_text())["meta"]["attention"] == lm.engine.attention


def same_search(a: dict, b: dict) -> bool:
    """Same nodes, tokens, statuses and visits; log-probabilities equal to float32 rounding.

    The resumed tree's KV is recomputed by one prefill instead of step by step, and float32
    sums in another order differ in the last bits, so scores are compared with a tolerance.
    """
    assert len(a["nodes"]) == len(b["nodes"])
    for x, y in zip(a["nodes"], b["nodes"]):
        for key in ("id", "parent", "tokens", "text", "status", "visits"):
            assert x[key] == y[key], (x["id"], key)
        for key in ("logprob", "value"):
            assert (x[key] is None) == (y[key] is None) and x[key] == pytest.approx(y[key], abs=1e-4), (x["id"], key)
        assert x["metadata"].keys() == y["metadata"].keys()
        for key, value in x["metadata"].items():
            assert value == pytest.approx(y["metadata"][key], abs=1e-4), (x["id"], key)
    return True


@pytest.mark.parametrize("make", [
    lambda: BFS(breadth=2, samples=2, depth=3),
    lambda: MCTS(iterations=5, leaves_per_round=2, samples=2),
], ids=["bfs", "mcts"])
def test_resume_under_greedy_decoding_matches_an_uninterrupted_run(tiny_model_dir, tmp_path, make):
    def fresh():
        return LM.from_pretrained(tiny_model_dir, device="cpu", runtime=RuntimeConfig(page_size=4, num_pages=2048))

    task = Tiny(TinyConfig(sampling=GREEDY, dedupe=False))
    whole = search(task, make(), fresh(), problem="3 3 8 8", seed=4)
    search(task, make(), lm1 := fresh(), problem="3 3 8 8", seed=4, budget=Budget(max_rounds=1)).save(tmp_path / "r.json")
    del lm1
    lm2 = fresh()
    loaded = SearchResult.load(tmp_path / "r.json", lm=lm2)
    resumed = search(task, make(), lm2, problem="3 3 8 8", tree=loaded.tree)
    assert same_search(tree_to_dict(resumed.tree), tree_to_dict(whole.tree))
    assert resumed.best.id == whole.best.id
    lm2.check_integrity(resumed.tree)
    assert resumed.tree.root.kv is not None and any(n.status is Status.EXPANDED for n in resumed.tree.nodes)


def test_value_prompts_share_their_few_shot_prefix(lm):
    few_shot = "".join(f"value: {a} {b} {c}\nlikely\n" for a, b, c in [(1, 2, 3), (4, 5, 6), (7, 8, 9), (2, 4, 8)] * 3)
    prefix_tokens = len(lm.encode(few_shot, add_bos=True))
    evaluator = ValuePrompt(prompt=lambda p, n: few_shot + "value: " + n.text.strip() + "\n",
                            labels={"sure": 20.0, "likely": 1.0, "impossible": 0.001}, samples=3,
                            sampling=Sampling(max_tokens=2, temperature=1.0))

    class FewShot(Tiny):
        def evaluator(self):
            return evaluator

    result = search(FewShot(), BFS(breadth=2, samples=4, depth=1), lm, problem="4 5 6 10")
    round_one = result.statistics.per_round[0]
    prompts = round_one.evaluated * evaluator.samples  # twelve value prompts in one call
    assert round_one.evaluated == 4 and round_one.evaluate.forward_steps == 2
    # the shared few-shot prefix is computed once, not once per prompt
    assert prefix_tokens <= round_one.evaluate.prefill_tokens < prefix_tokens + prompts * 12
    check(lm, result)
