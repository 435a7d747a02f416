"""The thought tree: nodes, ids, structure edits, and the hand-off to a model runtime."""

from __future__ import annotations

import hashlib
import numbers
import operator
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from ..config import Sampling
from .backend import TreeBackend
from .node import Node, Status

if TYPE_CHECKING:
    import networkx as nx


class TreeError(RuntimeError):
    """A tree operation that cannot be done as asked."""


def check_seed(seed: object, name: str = "seed") -> int:
    """``seed`` when it is an integer (numpy's too; never a bool, float or string): TypeError otherwise."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(seed).__name__} {seed!r:.40}; "
                        "pass an int such as seed=0")
    return int(seed)


def derive_seed(*parts: object) -> int:
    """A stable 63-bit seed from its parts (same parts, same seed, on every machine)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


class ThoughtTree:
    """A forest of thoughts whose nodes own KV segments of one model runtime.

    >>> tree = ThoughtTree(lm, prompt="Use 4 5 6 10 to make 24.\\n")
    >>> kids = tree.expand([tree.root], n=5, sampling=Sampling(max_tokens=48, stop="\\n"))

    Ids are given per tree in creation order. Pruned nodes stay in the tree (for viewing and
    saving) with their KV freed. A tree's KV is held until pruned or released: call
    :meth:`release_kv` (or use the tree as a context manager) before dropping it. Without a model
    (``lm=None``) the tree is a plain data structure.
    """

    def __init__(
        self, lm: TreeBackend | None = None, prompt: str | Sequence[int] | None = None, *, seed: int = 0
    ) -> None:
        self.lm = lm
        self.seed = check_seed(seed)
        self.nodes: list[Node] = []
        self.roots: list[Node] = []
        if prompt is not None:
            self.add_root(prompt)

    # -- structure ---------------------------------------------------------------------------
    @property
    def root(self) -> Node:
        if not self.roots:
            raise TreeError("this tree has no root yet; create it with ThoughtTree(lm, prompt=...) or add_root()")
        return self.roots[0]

    def __len__(self) -> int:
        return len(self.nodes)

    def __iter__(self) -> Iterator[Node]:
        for root in self.roots:
            yield from root.descendants()

    def __getitem__(self, node_id: int) -> Node:
        if not 0 <= node_id < len(self.nodes):
            raise KeyError(f"no node {node_id} in this tree of {len(self.nodes)} nodes")
        return self.nodes[node_id]

    def _new(self, parent: Node | None, tokens: list[int], text: str, **fields: Any) -> Node:
        position = (len(self.roots),) if parent is None else (*parent.position, len(parent.children))
        node = Node(id=len(self.nodes), tree=self, parent=parent, tokens=tokens, text=text, position=position,
                    **fields)
        self.nodes.append(node)
        if parent is None:
            self.roots.append(node)
        else:
            parent.children.append(node)
        return node

    def add_root(self, prompt: str | Sequence[int]) -> Node:
        """A new root from prompt text (tokenised with BOS) or token ids."""
        if isinstance(prompt, str):
            if self.lm is None:
                raise TreeError("a text prompt needs a model to tokenise it; pass token ids or attach an lm")
            tokens = self.lm.encode(prompt, add_bos=True)
            text = self.lm.decode(tokens)  # what the model reads: a character the tokenizer drops is not shown
        else:
            tokens = self._tokens(prompt, "a root prompt")
            text = self.lm.decode(tokens) if self.lm is not None else ""
        if not tokens:
            raise TreeError("a root prompt needs at least one token")
        self._check_context(len(tokens))
        return self._new(None, tokens, text)

    def add_child(self, parent: Node, tokens: Sequence[int], text: str, **fields: Any) -> Node:
        """A child with given tokens (KV not yet materialised unless ``kv`` is passed)."""
        self._check_alive(parent)
        tokens = self._tokens(tokens, f"a child of node {parent.id}")
        if not tokens:
            raise TreeError(f"a child of node {parent.id} needs at least one token")
        self._check_context(parent.num_path_tokens + len(tokens))
        return self._new(parent, tokens, text, **fields)

    def extend(self, node: Node, text: str) -> Node:
        """Append ``text`` under ``node`` as a new child; returns the child."""
        if self.lm is None:
            raise TreeError("extend needs a model to tokenise text; attach an lm to the tree")
        if not text:
            raise TreeError("extend needs non-empty text")
        tokens = self.lm.encode(text, add_bos=False)
        return self.add_child(node, tokens, self.lm.decode(tokens))

    def path(self, node: Node) -> list[Node]:
        self._check_own(node)
        return node.path()

    def frontier(self) -> list[Node]:
        """Open leaves, in id order."""
        return [n for n in self.nodes if n.status is Status.OPEN and n.is_leaf]

    # -- model work --------------------------------------------------------------------------
    def expand(self, nodes: Sequence[Node], n: int = 1, sampling: Sampling | None = None) -> list[list[Node]]:
        """Sample ``n`` children under each node, all decoded together in one batch per step.

        Each child's seed depends on the tree seed, the sampling seed, its parent's
        :attr:`~Node.position` and its ordinal among that parent's children, so the same seed
        gives the same tree whatever else is in the batch and in whatever order nodes are
        expanded. Returns the new children per input node.

        With ``sampling.distinct`` the children of one node are distinct token sequences, sampled
        without replacement (fewer than ``n`` only when fewer sequences are possible), seeded by
        the tree seed, the sampling seed, the node's position and its number of children; each
        child's ``metadata["distinct"]`` holds its sampling log-probability, perturbed value,
        the threshold and its inclusion probability.
        """
        lm = self._need_lm("expand")
        sampling = Sampling() if sampling is None else sampling
        if not isinstance(sampling, Sampling):
            raise TreeError(f"sampling must be a thoughttree Sampling, got {type(sampling).__name__}; "
                            "e.g. Sampling(max_tokens=48, stop='\\n')")
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise TreeError(f"n must be an integer >= 1, got {n!r}")
        nodes = list(nodes)
        if len({id(x) for x in nodes}) != len(nodes):
            raise TreeError("expand got the same node twice; ask for more children with n instead")
        for node in nodes:
            self._check_alive(node)
            if node.num_path_tokens >= lm.max_context:
                raise TreeError(f"node {node.id}'s path of {node.num_path_tokens} tokens leaves no room in the model's "
                                f"context of {lm.max_context}; expand a shorter path")
        if sampling.distinct:
            distinct = getattr(lm, "generate_distinct", None)
            if distinct is None:
                raise TreeError(f"{type(lm).__name__} cannot sample distinct thoughts; use Sampling(distinct=False)")
            results = distinct(nodes, [n] * len(nodes), sampling,
                               [derive_seed(self.seed, sampling.seed, node.position, len(node.children), "distinct")
                                for node in nodes])
        else:
            seeds = [
                [derive_seed(self.seed, sampling.seed, node.position, len(node.children) + j) for j in range(n)]
                for node in nodes
            ]
            results = lm.generate(nodes, [n] * len(nodes), sampling, seeds)
        out: list[list[Node]] = []
        for node, gens in zip(nodes, results):
            kids = []
            for g in gens:
                kid = self._new(
                    node,
                    g.tokens,
                    g.text,
                    logprob=g.logprob,
                    kv=g.kv,
                    metadata={"finish_reason": g.finish_reason, "token_logprobs": g.token_logprobs,
                              **({"distinct": dict(g.extra)} if g.extra else {})},
                )
                kids.append(kid)
            if node.status is Status.OPEN:
                node.status = Status.EXPANDED
            out.append(kids)
        return out

    def materialize(self, nodes: Sequence[Node] | None = None) -> None:
        """Prefill the KV of these nodes' paths (all live nodes when None) in one batch."""
        lm = self._need_lm("materialize")
        for node in nodes or ():
            self._check_alive(node)
        todo = [n for n in (nodes if nodes is not None else self) if n.alive]
        lm.materialize(todo)

    # -- pruning -----------------------------------------------------------------------------
    def prune(self, node: Node) -> list[Any]:
        """Mark ``node`` and its subtree pruned and free their KV at once; returns the released handles."""
        self._check_own(node)
        released = []
        for x in node.descendants():
            x.status = Status.PRUNED
            if x.kv is not None:
                if self.lm is not None:
                    self.lm.release(x.kv)
                released.append(x.kv)
                x.kv = None
        return released

    def __enter__(self) -> ThoughtTree:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release_kv()

    def release_kv(self) -> None:
        """Free every node's KV (the tree stays readable and can be materialised again).

        KV stays in the model's pool until its nodes are pruned or this is called: a tree that is
        dropped without it keeps its KV there. ``with ThoughtTree(lm, prompt=...) as tree:``
        releases it on leaving the block.
        """
        for x in self.nodes:
            if x.kv is not None:
                if self.lm is not None:
                    self.lm.release(x.kv)
                x.kv = None

    def to_networkx(self) -> nx.DiGraph:
        """This tree as a networkx graph; see ``thoughttree.tree.export.to_networkx``."""
        from .export import to_networkx

        return to_networkx(self)

    # -- checks ------------------------------------------------------------------------------
    def check_integrity(self) -> None:
        """Raise AssertionError when the structure is inconsistent."""
        seen = set()
        for root in self.roots:
            assert root.parent is None, f"root {root.id} has a parent"
            for x in root.descendants():
                assert x.id not in seen, f"node {x.id} reachable twice"
                seen.add(x.id)
                assert self.nodes[x.id] is x, f"node {x.id} is not stored under its id"
                assert x.tree is self, f"node {x.id} belongs to another tree"
                for c in x.children:
                    assert c.parent is x, f"child {c.id} does not point back to {x.id}"
                if x.parent is not None and x.parent.status is Status.PRUNED:
                    assert x.status is Status.PRUNED, f"node {x.id} is live under pruned {x.parent.id}"
                if x.status is Status.PRUNED:
                    assert x.kv is None, f"pruned node {x.id} still holds KV"
                if x.kv is not None and x.parent is not None:
                    assert x.parent.kv is not None, f"node {x.id} holds KV but its parent {x.parent.id} does not"
        assert seen == set(range(len(self.nodes))), "some nodes are not reachable from a root"

    # -- helpers -----------------------------------------------------------------------------
    def _need_lm(self, what: str) -> TreeBackend:
        if self.lm is None:
            raise TreeError(f"{what} needs a model; create the tree with ThoughtTree(lm, prompt=...)")
        return self.lm

    def _check_own(self, node: Node) -> None:
        if not isinstance(node, Node):
            raise TreeError(f"expected a node of this tree, got {type(node).__name__}")
        if node.tree is not self:
            raise TreeError(f"node {node.id} belongs to another tree; pass nodes of this tree")

    def _check_alive(self, node: Node) -> None:
        self._check_own(node)
        if node.status is Status.PRUNED:
            raise TreeError(f"node {node.id} is pruned; choose a live node")

    def _tokens(self, values: Sequence[int], what: str) -> list[int]:
        """Token ids as ints, each a whole number in the model's vocabulary."""
        vocab = getattr(getattr(self.lm, "config", None), "vocab_size", None)
        out = []
        for t in values:
            try:
                value = operator.index(t)
            except TypeError:
                value = -1
            if isinstance(t, bool) or value < 0 or (vocab is not None and value >= vocab):
                bound = f" below {vocab}" if vocab is not None else ""
                raise TreeError(f"{what} has token id {t!r}; token ids are whole numbers from 0{bound}")
            out.append(value)
        return out

    def _check_context(self, length: int) -> None:
        if self.lm is not None and length > self.lm.max_context:
            raise TreeError(
                f"a path of {length} tokens is longer than the model's context of {self.lm.max_context}; "
                "shorten the prompt or the thoughts"
            )
