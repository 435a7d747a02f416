"""The search driver: budgets, errors that keep the tree, save/load/resume, determinism, live view."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import pytest
from fakes import FakeLM, ScriptConfig, ScriptTask, pick
from rich.console import Console

from thoughttree import Sampling
from thoughttree.view.live import LiveView
from thoughttree.search.driver import Budget, SearchError, search
from thoughttree.search.results import SearchResult, Statistics
from thoughttree.strategies import BFS, DFS, MCTS, Beam, BestOfN, from_dict
from thoughttree.tasks import Sample, TaskError, ValuePrompt
from thoughttree.tree import Status, ThoughtTree
from thoughttree.tree.serialize import RunFileError, tree_to_dict

LABELS = {"sure": 20.0, "likely": 1.0, "impossible": 0.001}
SAMPLED = ScriptConfig(sampling=Sampling(max_tokens=8, temperature=1.0, stop=(";",)))


def random_world():
    """A tree that depends on every sample seed: children and values are picked by seed."""
    children = lambda context, ordinal, seed: pick(["a;", "b;", "c;", "d;", "e;", "=1;"], seed)  # noqa: E731
    answers = lambda prompt, seed: pick(["sure", "likely", "impossible"], seed)  # noqa: E731
    evaluator = ValuePrompt(prompt=lambda p, n: "value " + n.path_text(include_root=False), labels=LABELS, samples=2)
    return FakeLM(children=children, answers=answers), ScriptTask(evaluator=evaluator, config=SAMPLED)


def dumps(tree) -> str:
    return json.dumps(tree_to_dict(tree), sort_keys=True)


# -- budgets -----------------------------------------------------------------------------------
@pytest.mark.parametrize("field", ["max_nodes", "max_generated_tokens", "max_rounds"])
@pytest.mark.parametrize("bad", [0, -3, 1.5])
def test_budget_limits_must_be_positive_integers(field, bad):
    with pytest.raises(ValueError, match=f"Budget {field} must be an integer >= 1"):
        Budget(**{field: bad})


def test_budget_seconds_must_be_positive():
    with pytest.raises(ValueError, match="max_seconds must be > 0"):
        Budget(max_seconds=0)


def test_round_budget_returns_the_best_so_far():
    lm, task = random_world()
    result = search(task, BFS(breadth=2, samples=3, depth=4), lm, problem="Q", budget=Budget(max_rounds=2))
    assert result.stopped == "max_rounds" and result.statistics.rounds == 2
    assert result.best is not None and result.best.depth == 2


def test_node_budget_caps_the_tree():
    lm, task = random_world()
    result = search(task, BFS(breadth=3, samples=3, depth=5), lm, problem="Q", budget=Budget(max_nodes=8))
    assert len(result.tree) <= 8 and result.stopped == "max_nodes"
    lm.check_kv([result.tree])


def test_token_and_time_budgets_stop_before_the_next_round():
    lm, task = random_world()
    result = search(task, BFS(breadth=3, samples=3, depth=5), lm, problem="Q", budget=Budget(max_generated_tokens=5))
    assert result.stopped == "max_generated_tokens" and result.statistics.rounds == 1
    lm, task = random_world()
    result = search(task, BFS(), lm, problem="Q", budget=Budget(max_seconds=1e-9))
    assert result.stopped == "max_seconds" and len(result.tree) == 1


# -- errors keep the tree ------------------------------------------------------------------------
def test_malformed_root_prompt_is_a_clear_error():
    class Bad(ScriptTask):
        def prompt(self, problem):
            return None

    with pytest.raises(TaskError, match="Bad.prompt returned NoneType"):
        search(Bad(), BFS(), FakeLM(), problem="Q")


def test_error_mid_search_keeps_the_tree_and_the_partial_result_saves(tmp_path):
    lm, _ = random_world()
    bad_value = ValuePrompt(prompt=lambda p, n: ["not", "tokens"] if n.depth == 2 else "value", labels=LABELS)
    task = ScriptTask(evaluator=bad_value, config=SAMPLED)
    with pytest.raises(SearchError, match="round 2: ValuePrompt.prompt returned list") as info:
        search(task, BFS(breadth=2, samples=2, depth=3), lm, problem="Q")
    err = info.value
    assert isinstance(err.__cause__, TaskError)
    assert len(err.tree) == 7 and err.partial_result.stopped == "error"
    err.partial_result.save(tmp_path / "partial.json")
    loaded = SearchResult.load(tmp_path / "partial.json")
    assert len(loaded.tree) == 7 and loaded.stopped == "error"


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_an_evaluator_value_that_is_not_finite_is_named(value):
    class Raw:  # an evaluator of one's own, which checks nothing itself
        bounds = (0.0, 1.0)

        def evaluate(self, lm, problem, nodes, *, seed, samples=None):
            return [value if n.text == "b;" else 0.5 for n in nodes]

    lm = FakeLM(children={"Q:": ["a;", "b;"]})
    with pytest.raises(SearchError, match=rf"the evaluator gave node \d+ the value {value}; values must be finite"):
        search(ScriptTask(evaluator=Raw()), BFS(breadth=1, samples=2, depth=1), lm, problem="Q")


def test_a_node_expanded_again_into_only_duplicates_keeps_its_earlier_children_and_stays_alive():
    from dataclasses import dataclass as frozen_config

    from thoughttree.strategies import Step, StrategyBase

    @frozen_config(frozen=True)
    class TwiceConfig:
        pass

    class Twice(StrategyBase):  # expands the root, then the root again
        Config = TwiceConfig

        def step(self):
            rounds = self.tree.root.metadata.get("rounds", 0)
            return Step(expand=[self.tree.root], n=2) if rounds < 2 else None

        def update(self, outcome):
            self.tree.root.metadata["rounds"] = self.tree.root.metadata.get("rounds", 0) + 1

    result = search(ScriptTask({"a;": 0.5, "b;": 0.7}), Twice(), FakeLM(children={"Q:": ["a;", "b;"]}), problem="Q")
    root = result.tree.root
    assert root.alive and [c.text for c in root.children if c.alive] == ["a;", "b;"]
    assert [c.metadata.get("rejected") for c in root.children if not c.alive] == ["duplicate", "duplicate"]


def test_bad_request_from_a_task_is_named():
    class Bad(ScriptTask):
        def request(self, problem, node):
            return Sampling()

    with pytest.raises(SearchError, match=r"return Sample\(sampling\) or Propose"):
        search(Bad(), BFS(), FakeLM(children={"Q:": ["a;"]}), problem="Q")


def test_wrong_arguments_are_named():
    with pytest.raises(TypeError, match="task must be a thoughttree.tasks.Task"):
        search(object(), BFS(), FakeLM(), problem="Q")
    with pytest.raises(TypeError, match=r"has no start\(\) method"):
        search(ScriptTask(), object(), FakeLM(), problem="Q")
    with pytest.raises(TypeError, match="budget must be"):
        search(ScriptTask(), BFS(), FakeLM(), problem="Q", budget={"max_rounds": 1})
    with pytest.raises(TypeError, match=r"got the class BFS; e\.g\. BFS\(\.\.\.\)"):
        search(ScriptTask(), BFS, FakeLM(), problem="Q")
    with pytest.raises(ValueError, match="threshold must be a finite number"):
        DFS(threshold=float("nan"))


def test_metadata_that_json_cannot_hold_names_its_node_when_saved(tmp_path):
    result = search(ScriptTask({"a;": 0.5}), BFS(breadth=1, samples=1, depth=1), FakeLM(children={"Q:": ["a;"]}),
                    problem="Q")
    result.tree.nodes[1].metadata["seen"] = {1, 2}
    with pytest.raises(RunFileError, match="problem 0's node 1 \\(its metadata\\): Object of type set"):
        result.save(tmp_path / "run.json")
    assert not (tmp_path / "run.json").exists()


def test_interrupt_returns_what_was_searched():
    def children(context, ordinal, seed):
        if context.count(";") >= 1:
            raise KeyboardInterrupt
        return pick(["a;", "b;"], ordinal)

    result = search(ScriptTask({"a;": 0.5, "b;": 0.4}), BFS(breadth=2, samples=2), FakeLM(children=children), problem="Q")
    assert result.stopped == "interrupted" and result.best.text == "a;"


# -- determinism, save, load, resume -------------------------------------------------------------
def test_same_seed_same_tree_bytes_and_another_seed_another_tree():
    runs = []
    for seed in (7, 7, 8):
        lm, task = random_world()
        runs.append(dumps(search(task, BFS(breadth=2, samples=3, depth=3), lm, problem="Q", seed=seed).tree))
    assert runs[0] == runs[1] and runs[0] != runs[2]


def test_save_load_save_is_identical(tmp_path):
    lm, task = random_world()
    result = search(task, MCTS(iterations=6, leaves_per_round=3, samples=2), lm, problem="Q", seed=1)
    result.save(tmp_path / "a.json")
    loaded = SearchResult.load(tmp_path / "a.json")
    loaded.save(tmp_path / "b.json")
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    assert loaded.answer == result.answer and loaded.best.id == result.best.id
    assert loaded.statistics == result.statistics
    meta = json.loads((tmp_path / "a.json").read_text())["meta"]
    assert meta["strategy"]["class"] == "MCTS" and meta["strategy"]["config"]["iterations"] == 6
    assert meta["task"]["class"] == "ScriptTask" and meta["seed"] == 1 and meta["search_format"] == 1
    assert repr(from_dict(meta["strategy"])) == repr(MCTS(iterations=6, leaves_per_round=3, samples=2))


@pytest.mark.parametrize("make", [
    lambda: BFS(breadth=2, samples=3, depth=4),
    lambda: DFS(samples=2, threshold=1.0, depth=4),
    lambda: MCTS(iterations=8, leaves_per_round=2, samples=2),
    lambda: Beam(width=2, samples=2, max_steps=4),
    lambda: BestOfN(n=4),
], ids=["bfs", "dfs", "mcts", "beam", "best_of_n"])
def test_resume_continues_to_the_uninterrupted_result(tmp_path, make):
    lm, task = random_world()
    whole = search(task, make(), lm, problem="Q", seed=5)
    lm, task = random_world()
    first = search(task, make(), lm, problem="Q", seed=5, budget=Budget(max_rounds=1))
    first.save(tmp_path / "run.json")
    lm, task = random_world()
    loaded = SearchResult.load(tmp_path / "run.json", lm=lm)
    resumed = search(task, make(), lm, problem="Q", tree=loaded.tree)
    assert dumps(resumed.tree) == dumps(whole.tree)
    assert resumed.best.id == whole.best.id and resumed.answer == whole.answer
    resumed.tree.check_integrity()
    lm.check_kv([resumed.tree])


def test_resume_after_a_failed_evaluation_scores_the_waiting_children_first(tmp_path):
    lm, task = random_world()
    whole = search(task, BFS(breadth=2, samples=2, depth=3), lm, problem="Q", seed=2)
    flaky_lm, _ = random_world()
    good = flaky_lm.answers
    flaky_lm.answers = lambda prompt, seed: (_ for _ in ()).throw(RuntimeError("device lost")) \
        if prompt.count(";") == 2 else good(prompt, seed)
    with pytest.raises(SearchError, match="device lost") as info:
        search(task, BFS(breadth=2, samples=2, depth=3), flaky_lm, problem="Q", seed=2)
    info.value.partial_result.save(tmp_path / "crash.json")
    lm, task = random_world()
    tree = SearchResult.load(tmp_path / "crash.json", lm=lm).tree
    assert any(n.value is None and n.depth == 2 for n in tree.nodes)
    resumed = search(task, BFS(breadth=2, samples=2, depth=3), lm, problem="Q", tree=tree)
    assert dumps(resumed.tree) == dumps(whole.tree)


def test_resume_refuses_another_problem(tmp_path):
    lm, task = random_world()
    result = search(task, BFS(depth=1), lm, problem="Q")
    with pytest.raises(TaskError, match="searched from another prompt"):
        search(task, BFS(depth=2), lm, problem="R", tree=result.tree)


def test_corrupt_and_newer_files_are_refused(tmp_path):
    lm, task = random_world()
    search(task, BFS(depth=1), lm, problem="Q").save(tmp_path / "ok.json")
    data = json.loads((tmp_path / "ok.json").read_text())
    (tmp_path / "cut.json").write_text((tmp_path / "ok.json").read_text()[:200])
    with pytest.raises(RunFileError, match="not valid JSON"):
        SearchResult.load(tmp_path / "cut.json")
    newer = {**data, "meta": {**data["meta"], "search_format": 99}}
    (tmp_path / "newer.json").write_text(json.dumps(newer))
    with pytest.raises(RunFileError, match="upgrade thoughttree"):
        SearchResult.load(tmp_path / "newer.json")
    broken = {**data, "problems": [{**data["problems"][0], "result": {"best": "x"}}]}
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    with pytest.raises(RunFileError, match="problem 0: result.best must be null or a node id below 4, got .x."):
        SearchResult.load(tmp_path / "broken.json")


def test_unsaveable_problem_is_named(tmp_path):
    lm, task = random_world()
    result = search(task, BFS(depth=1), lm, problem="Q")
    object.__setattr__(result, "problem", object())
    with pytest.raises(RunFileError, match="not JSON data"):
        result.save(tmp_path / "x.json")


# -- statistics and the live view ------------------------------------------------------------------
def test_statistics_add_up_over_rounds():
    lm, task = random_world()
    result = search(task, BFS(breadth=2, samples=3, depth=3), lm, problem="Q")
    stats = result.statistics
    assert stats.rounds == len(stats.per_round) == 3
    assert stats.forward_steps == sum(r.expand.forward_steps + r.evaluate.forward_steps for r in stats.per_round)
    assert stats.generated_tokens == lm.stats.generated_tokens
    assert stats.reuse_factor > 1.0  # siblings share their parents' KV
    assert stats.nodes == len(result.tree)
    halves = [t for r in stats.per_round for t in (r.expand_seconds, r.evaluate_seconds)]
    assert all(t > 0 for t in halves) and sum(halves) <= stats.wall_time


def test_run_files_without_round_times_still_load():
    lm, task = random_world()
    data = search(task, BFS(breadth=2, samples=2, depth=2), lm, problem="Q").statistics.to_dict()
    for r in data["per_round"]:
        del r["expand_seconds"], r["evaluate_seconds"]
    stats = Statistics.from_dict(data)
    assert [r.expand_seconds for r in stats.per_round] == [0.0, 0.0]


def test_a_result_is_solved_only_when_its_best_node_is_a_solution():
    tree = ThoughtTree(prompt=[1])
    solution, guess = tree.add_child(tree.root, [2], "=24"), tree.add_child(tree.root, [3], "=23")
    solution.status, guess.status = Status.SOLVED, Status.TERMINAL
    result = SearchResult("Q", tree, guess, (solution,), "23", "done", Statistics())
    assert not result.solved and not result.to_entry()["result"]["solved"]
    assert SearchResult("Q", tree, solution, (solution,), "24", "solved", Statistics()).solved


def test_live_view_is_updated_every_round():
    console = Console(record=True, width=100, height=40, force_terminal=True)
    lm, task = random_world()
    result = search(task, BFS(breadth=2, samples=2, depth=2), lm, problem="Q", live=LiveView(console=console))
    assert result.statistics.rounds == 2
    text = console.export_text()
    assert "KV reuse" in text and re.search(r"expanding [0-9.]+ s", text) and re.search(r"evaluating [0-9.]+ s", text)


def test_default_task_request_is_a_sample_of_its_config():
    task = ScriptTask()
    assert task.request("Q", None) == Sample(task.config.sampling)
    assert task.describe()["config"]["sampling"]["stop"] == [";"]


def test_a_strategy_that_never_finishes_is_named():
    from thoughttree.strategies import Step, StrategyBase

    @dataclass(frozen=True)
    class IdleConfig:
        pass

    class Idle(StrategyBase):
        Config = IdleConfig

        def step(self):
            return Step()

    with pytest.raises(SearchError, match="Idle returned 10001 empty steps in a row"):
        search(ScriptTask(), Idle(), FakeLM(), problem="Q")


def test_proposed_children_carry_their_proposal_probability_into_puct_priors():
    answers = lambda prompt, seed: pick(["a;\n", "bb;\n"], seed)  # noqa: E731
    lm = FakeLM(answers=answers, token_logprob=lambda context, ch: -2.0 if ch == "b" else -0.1)
    task = ScriptTask({"a;\n": 0.5, "bb;\n": 0.5}, propose=lambda node: "next " + node.path_text(),
                      config=ScriptConfig(sampling=Sampling(max_tokens=8, temperature=1.0), dedupe=True))
    mcts = MCTS(iterations=1, samples=6, rule="puct")
    result = search(task, mcts, lm, problem="Q")
    kids = result.tree.root.children
    assert sorted(k.text for k in kids) == ["a;\n", "bb;\n"]
    assert all(k.metadata["proposed"] and k.logprob == 0.0 for k in kids)
    priors = dict(zip((k.text for k in kids), mcts.priors(kids)))
    assert priors["a;\n"] > 0.5 > priors["bb;\n"]
