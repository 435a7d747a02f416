"""Spending tokens well: state dedupe, token budgets, PUCT priors, best-of-k at equal tokens."""

from __future__ import annotations

import dataclasses

import pytest

from thoughttree.tasks.game24.compare import best_of, matching_k, pool_size, tokens_per_sample
from thoughttree.search.game24_methods import Game24Run, run_game24
from thoughttree.tasks.game24.task import Game24
from thoughttree.tree import ThoughtTree


def _entry(*samples: tuple[bool, float, int]) -> dict:
    return {"result": {"samples": [{"correct": c, "logprob": lp, "tokens": t} for c, lp, t in samples]}}


def test_best_of_k_by_checker_and_by_logprob() -> None:
    entries = [_entry((False, -0.1, 10), (True, -0.5, 10), (True, -0.05, 20)),
               _entry((False, -0.3, 10), (False, -0.1, 10), (True, -0.9, 10))]
    assert pool_size(entries) == 3 and tokens_per_sample(entries) == pytest.approx(70 / 6)
    one = best_of(entries, 1)
    assert (one.oracle, one.by_logprob, one.tokens_per_puzzle) == (0.0, 0.0, 10.0)
    two = best_of(entries, 2)
    assert (two.oracle, two.by_logprob) == (0.5, 0.0)
    three = best_of(entries, 3)
    assert (three.oracle, three.by_logprob, three.tokens_per_puzzle) == (1.0, 0.5, 35.0)
    with pytest.raises(ValueError, match="1..3 samples"):
        best_of(entries, 4)
    with pytest.raises(ValueError, match="no 'samples'"):
        best_of([{"result": {}}], 1)
    assert matching_k(1000, 19.6) == 51 and matching_k(3, 19.6) == 1
    with pytest.raises(ValueError, match="tokens per sample"):
        matching_k(100, 0)


def test_steps_leaving_the_same_numbers_are_one_child() -> None:
    task, tree = Game24(), ThoughtTree(prompt=[1, 2, 3])
    a = task.dedupe_key("4 5 6 10", tree.root, "4 + 5 = 9 (left: 6 9 10)\n")
    assert a == task.dedupe_key("4 5 6 10", tree.root, "5 + 4 = 9 (left: 9 6 10)\n")
    assert a != task.dedupe_key("4 5 6 10", tree.root, "10 - 6 = 4 (left: 4 4 5)\n")
    assert task.dedupe_key("4 5 6 10", tree.root, "not a step\n") == "not a step\n"


@pytest.fixture(scope="module")
def lm():
    from thoughttree.commands.game24 import load_model

    return load_model("bundled", "cpu", None)


def test_io_run_lists_its_samples_for_best_of_k(lm) -> None:
    run = run_game24(lm, Game24Run(method="io", k=4, start=900, end=901, seed=0)).run
    assert pool_size(run.problems) == 4
    for entry in run.problems:
        samples = entry["result"]["samples"]
        assert all(s["tokens"] > 0 and s["logprob"] <= 0 for s in samples)
        assert entry["result"]["correct"] == any(s["correct"] for s in samples)
    assert sum(s["tokens"] for e in run.problems for s in e["result"]["samples"]) == run.totals["generated_tokens"]
    assert best_of(run.problems, 4).oracle == run.totals["success_rate"]


def test_token_budget_stops_searches_early(lm) -> None:
    run = Game24Run(method="bfs", start=900, end=901, seed=0, samples=10, value="probs", max_tokens_per_problem=40)
    capped = run_game24(lm, run).run
    # the first round (10 proposals of at most 32 tokens, then values) passes 40; no second round
    assert 40 <= capped.totals["generated_tokens"] <= 40 + 10 * 32
    assert capped.problems[0]["result"]["stopped"] == "max_generated_tokens"
    assert capped.problems[0]["result"]["statistics"]["rounds"] <= 2
    with pytest.raises(ValueError, match="max-tokens-per-problem"):
        Game24Run(max_tokens_per_problem=0)


def test_mcts_with_the_model_priors(lm) -> None:
    run = run_game24(lm, Game24Run(method="mcts", rule="puct", iterations=2, start=900, end=901, seed=0)).run
    assert run.meta["run"]["rule"] == "puct" and run.totals["generated_tokens"] > 0
    with pytest.raises(ValueError, match="--rule"):
        Game24Run(method="mcts", rule="best")


def test_a_budgeted_search_that_ends_unsolved_starts_again(lm) -> None:
    run = Game24Run(method="beam", width=1, samples=2, evaluations=2, value="lookahead", start=900, end=901, seed=0,
                    max_tokens_per_problem=600)
    entry = run_game24(lm, run).run.problems[0]["result"]
    first = run_game24(lm, dataclasses.replace(run, restarts=False)).run.problems[0]["result"]
    if first["correct"]:
        pytest.skip("the first search solved the puzzle: nothing to restart")
    assert entry["searches"] > 1
    assert entry["statistics"]["generated_tokens"] > first["statistics"]["generated_tokens"]
    assert entry["statistics"]["generated_tokens"] >= 600 or entry["correct"]


def test_distinct_proposals_in_a_game24_search(lm) -> None:
    run = Game24Run(method="bfs", breadth=1, samples=6, evaluations=3, start=900, end=901, seed=0, distinct=True)
    tree = run_game24(lm, run).run.problems[0]["tree"]
    first = [n for n in tree["nodes"] if n.get("parent") == 0]
    texts = [n["text"] for n in first]
    assert first and len(set(texts)) == len(texts)
    assert all(0 < n["metadata"]["distinct"]["inclusion"] <= 1 for n in first)
