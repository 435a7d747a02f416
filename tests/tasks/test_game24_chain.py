"""The written chains that decide three-number states: exact on every state, and clean for the split."""

from __future__ import annotations

from collections import Counter
from fractions import Fraction

from thoughttree.tasks.game24 import held_out_puzzles, is_solvable, make_state, next_steps, parse_propose, parse_value
from thoughttree.tasks.game24.chain import (
    chain_states, hit, needs, pair_results, pairings, propose_chain, propose_targets, segment, step_text, value_chain,
)
from thoughttree.tasks.game24.dataset import Example, reachable_states, training_states
from thoughttree.tasks.game24.formats import propose_completion, value_completion, value_has_chain, value_label
from thoughttree.tasks.game24.split import held_out_states, leaked_states

F = Fraction


def test_needs_and_pair_results_are_the_canonical_arithmetic() -> None:
    assert needs(F(13)) == [11, 37, 312, F(24, 13), F(13, 24)]
    assert needs(F(24)) == [0, 48, 576, 1]
    assert needs(F(0)) == [24]
    assert pair_results(F(9), F(2)) == [11, 7, 18, F(9, 2), F(2, 9)]
    assert pair_results(F(0), F(5)) == [5, 0]
    assert pair_results(F(3), F(3)) == [6, 0, 9, 1]
    for w in (F(1), F(5), F(7, 3), F(30), F(169)):
        for r in needs(w):
            assert is_solvable((w, r)), (w, r)


def test_segment_and_chain_text() -> None:
    assert segment(F(13), F(2), F(9)) == "13: 11 37 312 24/13 13/24 ; 2 9: 11 7 18 9/2 2/9"
    assert value_chain((2, 9, 13)) == "13: 11 37 312 24/13 13/24 ; 2 9: 11 7 18 9/2 2/9 => 11"
    unsolvable = value_chain((1, 2, 3))
    assert unsolvable.count(" | ") == 2 and unsolvable.endswith("=> no")
    assert pairings((3, 3, 7)) == [(7, 3, 3), (3, 3, 7)]  # equal numbers: no repeated pairing
    assert value_completion("likely", (2, 9, 13)) == f"{value_chain((2, 9, 13))}\nlikely\n"
    assert value_completion("sure", (4, 6)) == "sure\n" and not value_has_chain((4, 6))


def test_value_chain_decides_every_three_number_state_exactly() -> None:
    states = training_states()[3] + reachable_states([make_state(p) for p in held_out_puzzles()])[3]
    assert len(states) > 15_000
    for state in states:
        chain = value_chain(state)
        assert chain.endswith("=> no") != is_solvable(state), (state, chain)
        assert chain_states(chain) == [state] * (chain.count(" | ") + 1)
        completion = value_completion(value_label(state), state)
        assert parse_value(completion) == value_label(state)
        assert len(chain) <= 240


def test_propose_chains_end_in_a_step_that_keeps_24_reachable_when_there_is_one() -> None:
    state = make_state((2, 9, 13))
    targets = dict(propose_targets(state))
    assert set(targets) == set(pairings(state))
    made = targets[(F(13), F(2), F(9))]
    assert [s.text() for s in made] == ["2 + 9 = 11 (left: 11 13)"]
    for pairing, steps in targets.items():
        for step in steps:
            line = propose_chain(pairing, step)
            assert step_text(line) == step.text()
            check = parse_propose(line + "\n", state)
            assert check.valid and check.step == step
            assert is_solvable(step.left) == (hit(*pairing) is not None)
    assert step_text("4 + 5 = 9 (left: 6 9 10)") == "4 + 5 = 9 (left: 6 9 10)"


def test_training_propose_targets(game24_examples: list[Example]) -> None:
    wanted = {"propose: 1 3 8\n", "propose: 4 6\n", "propose: 11 12\n"}
    by_prompt: dict[str, Counter] = {p: Counter() for p in wanted}
    for e in game24_examples:
        if e.kind == "propose" and e.prompt in wanted:
            by_prompt[e.prompt][e.completion] += 1
    three = by_prompt["propose: 1 3 8\n"]
    firsts = Counter(c.split(":", 1)[0] for c in three.elements())
    assert sorted(firsts.values()) == [2, 2, 2]  # every pairing equally often
    for completion in three:
        check = parse_propose(completion, (1, 3, 8))
        assert check.valid and check.state is not None
        pairing = next(p for p in pairings((1, 3, 8)) if completion.startswith(segment(*p)))
        assert is_solvable(check.state) == (hit(*pairing) is not None)
    assert any(is_solvable(parse_propose(c, (1, 3, 8)).state) for c in three)
    assert set(by_prompt["propose: 4 6\n"]) == {"4 * 6 = 24 (left: 24)\n"}
    assert set(by_prompt["propose: 11 12\n"]) == {f"{s.text()}\n" for s in next_steps((11, 12))}


def test_chains_show_their_state_to_the_split_check() -> None:
    held_out = held_out_states()
    state = next(s for s in held_out if len(s) == 3)
    assert leaked_states("value: 1 1 1\n", f"{value_chain(state)}\nimpossible\n", held_out) == [state] * len(
        chain_states(value_chain(state)))
    pairing, steps = propose_targets(state)[0]
    assert state in leaked_states("propose: 1 1 1\n", propose_completion(steps[0], pairing), held_out)
