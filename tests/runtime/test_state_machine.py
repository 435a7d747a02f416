"""Random expand / extend / prune / pool exhaustion / interrupts on two trees of two models.

After every step both models' KV pools and trees pass ``check_integrity`` with exact reference
counts; a step that fails (a full pool, an interrupt, a node of the other tree) changes nothing
it should not; and pruning everything returns every page.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from thoughttree import LM, RuntimeConfig, Sampling, ThoughtTree
from thoughttree.runtime import KVPoolExhausted
from thoughttree.tree import TreeError
from tiny_models import make_model

WORDS = [" jumps", " over the", " 10 - 4 = 6", "\n", " sure"]


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> list[LM]:
    out = []
    for arch in ("llama", "qwen2"):
        path = make_model(tmp_path_factory.mktemp(arch), arch)
        out.append(LM.from_pretrained(path, device="cpu", runtime=RuntimeConfig(page_size=4, num_pages=10)))
    return out


def snapshot(tree: ThoughtTree) -> list[tuple]:
    return [(n.id, n.status, n.kv is not None, len(n.children)) for n in tree.nodes]


class Interrupt:
    """Raise KeyboardInterrupt on the model's ``after``-th forward pass from now."""

    def __init__(self, lm: LM, after: int) -> None:
        self.lm, self.left, self.forward = lm, after, lm.engine.forward

    def __call__(self, *args, **kwargs):
        self.left -= 1
        if self.left < 0:
            raise KeyboardInterrupt
        return self.forward(*args, **kwargs)

    def __enter__(self) -> Interrupt:
        self.lm.engine.forward = self
        return self

    def __exit__(self, *exc: object) -> None:
        del self.lm.engine.forward


def machine(lms: list[LM]) -> type[RuleBasedStateMachine]:
    class Trees(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.lms = lms
            self.trees = [ThoughtTree(lm, prompt="the quick brown fox", seed=i) for i, lm in enumerate(lms)]

        def live(self, t: int, pick: int):
            nodes = [n for n in self.trees[t].nodes if n.alive]
            return nodes[pick % len(nodes)] if nodes else None

        @rule(t=st.integers(0, 1), pick=st.integers(0, 99), n=st.integers(1, 3), tokens=st.integers(1, 10))
        def expand(self, t, pick, n, tokens):
            tree, node = self.trees[t], self.live(t, pick)
            if node is None:
                return
            before, used = snapshot(tree), self.lms[t].kv.pool.num_used
            try:
                tree.expand([node], n=n, sampling=Sampling(max_tokens=tokens, ignore_eos=True))
            except KVPoolExhausted:
                event("expand: pool full")
                assert len(tree) == len(before) and self.lms[t].kv.pool.num_used >= used  # the path may keep KV

        @rule(t=st.integers(0, 1), pick=st.integers(0, 99), word=st.sampled_from(WORDS))
        def extend(self, t, pick, word):
            node = self.live(t, pick)
            if node is not None:
                node.extend(word)

        @rule(t=st.integers(0, 1), pick=st.integers(0, 99))
        def materialize(self, t, pick):
            node = self.live(t, pick)
            if node is None:
                return
            before = snapshot(self.trees[t])
            try:
                self.trees[t].materialize([node])
            except KVPoolExhausted:
                event("materialize: pool full")
                assert snapshot(self.trees[t]) == before  # all or nothing

        @rule(t=st.integers(0, 1), pick=st.integers(0, 99))
        def prune(self, t, pick):
            node = self.live(t, pick)
            if node is not None and not node.is_root:
                self.trees[t].prune(node)
                assert all(x.kv is None for x in node.descendants())

        @rule(t=st.integers(0, 1), pick=st.integers(0, 99), after=st.integers(0, 4), n=st.integers(1, 3))
        def interrupt(self, t, pick, after, n):
            tree, node = self.trees[t], self.live(t, pick)
            if node is None:
                return
            size = len(tree)
            with Interrupt(self.lms[t], after):
                try:
                    tree.expand([node], n=n, sampling=Sampling(max_tokens=4, ignore_eos=True))
                except KeyboardInterrupt:
                    event("expand: interrupted")
                    assert len(tree) == size  # no half-made children
                except KVPoolExhausted:
                    pass

        @rule(t=st.integers(0, 1), pick=st.integers(0, 99),
              method=st.sampled_from(["expand", "prune", "materialize", "add_child", "path"]))
        def other_trees_node(self, t, pick, method):
            mine, other = self.trees[t], self.trees[1 - t]
            stranger = other.nodes[pick % len(other.nodes)]
            before = snapshot(mine), snapshot(other)
            call = {
                "expand": lambda: mine.expand([stranger]),
                "prune": lambda: mine.prune(stranger),
                "materialize": lambda: mine.materialize([stranger]),
                "add_child": lambda: mine.add_child(stranger, [5], "x"),
                "path": lambda: mine.path(stranger),
            }[method]
            with pytest.raises(TreeError, match="another tree"):
                call()
            assert (snapshot(mine), snapshot(other)) == before

        @invariant()
        def pools_and_trees_agree(self):
            for lm, tree in zip(self.lms, self.trees):
                lm.check_integrity(tree)

        def teardown(self):
            for lm, tree in zip(self.lms, self.trees):
                tree.prune(tree.root)
                lm.check_integrity(tree)
                assert lm.kv.pool.num_used == 0 and not lm.kv.segments, "pruning everything returns every page"

    return Trees


def test_random_operations_on_two_trees_of_two_models(models):
    Trees = machine(models)
    Trees.TestCase.settings = settings(max_examples=25, stateful_step_count=20, deadline=None,
                                       suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                              HealthCheck.too_slow])
    Trees.TestCase().runTest()
