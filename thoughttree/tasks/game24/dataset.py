"""Seeded generation of the supervised examples the bundled Game of 24 model is trained on.

Roots are every multiset of four numbers from 1..13 (1,820; the 1,362 solvable ones are
exactly the puzzle list) except the starting states of the held-out puzzles (indices
900-999 by default). States are everything reachable from the roots by canonical steps, so
an intermediate state that a held-out puzzle shares with another root can appear; a
held-out starting state never does.

- propose: for each state, a target step drawn half the time from the steps that keep 24
  reachable and otherwise from all valid steps, so sampling gives varied, often sensible
  children (a state with no such step gets any valid step);
- value: every state once with its solver label, with reachable states repeated so that the
  rare positive labels are learned (reachable states are ~9% of 3-number and ~0.5% of
  2-number states);
- io / cot: solvable roots only, each with several solutions drawn at random.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from thoughttree.tasks.game24.formats import (
    cot_completion, cot_prompt, io_completion, io_prompt, propose_completion, propose_prompt,
    value_completion, value_label, value_prompt,
)
from thoughttree.tasks.game24.puzzles import TEST_INDICES, load_puzzles
from thoughttree.tasks.game24.solver import good_steps, is_solvable, next_steps, solution_paths
from thoughttree.tasks.game24.steps import State, compose_expression, make_state


@dataclass(frozen=True)
class Example:
    """One training sequence: the loss is taken on ``completion`` only."""

    kind: str
    prompt: str
    completion: str


@dataclass(frozen=True)
class DataConfig:
    """What to generate. Counts are per state (propose, value) or per puzzle (io, cot)."""

    seed: int = 0
    held_out: tuple[int, ...] = tuple(TEST_INDICES)
    propose_good_share: float = 0.5
    # samples per state by number count: 4 numbers, 3 numbers, 2 numbers
    propose_samples: tuple[int, int, int] = (16, 3, 1)
    # extra samples for states from which 24 is reachable (what a search keeps expanding)
    propose_reachable_extra: tuple[int, int, int] = (0, 6, 20)
    # how often a reachable state's value example is repeated: 4, 3, 2 numbers
    value_positive_repeats: tuple[int, int, int] = (1, 5, 40)
    value_root_repeats: int = 2
    value_single_negatives: int = 2000
    value_single_positives: int = 200
    solutions_per_puzzle: int = 16
    kinds: tuple[str, ...] = field(default=("propose", "value", "io", "cot"))

    def __post_init__(self) -> None:
        if not 0.0 <= self.propose_good_share <= 1.0:
            raise ValueError(f"propose_good_share must be in [0, 1], got {self.propose_good_share}")
        unknown = set(self.kinds) - {"propose", "value", "io", "cot"}
        if unknown:
            raise ValueError(f"unknown example kinds {sorted(unknown)}; use propose, value, io, cot")


def training_roots(held_out: Sequence[int] = tuple(TEST_INDICES)) -> list[State]:
    """All four-number multisets from 1..13 except the held-out puzzles' starting states."""
    puzzles = load_puzzles()
    excluded = {make_state(puzzles[i]) for i in held_out}
    roots = (make_state(c) for c in itertools.combinations_with_replacement(range(1, 14), 4))
    return [r for r in roots if r not in excluded]


def reachable_states(roots: Sequence[State]) -> dict[int, list[State]]:
    """States by number count (4, 3, 2, 1) reachable from ``roots``, each sorted for determinism."""
    by_size: dict[int, set[State]] = {4: set(roots)}
    for size in (3, 2, 1):
        by_size[size] = {step.left for state in by_size[size + 1] for step in next_steps(state)}
    return {size: sorted(states) for size, states in by_size.items()}


def _propose(config: DataConfig, states: dict[int, list[State]], rng: random.Random) -> list[Example]:
    examples = []
    for size, base, extra in zip((4, 3, 2), config.propose_samples, config.propose_reachable_extra):
        for state in states[size]:
            steps, good = next_steps(state), good_steps(state)
            for _ in range(base + (extra if good else 0)):
                pool = good if good and rng.random() < config.propose_good_share else steps
                step = pool[rng.randrange(len(pool))]
                examples.append(Example("propose", propose_prompt(state), propose_completion(step)))
    return examples


def _value(config: DataConfig, states: dict[int, list[State]], rng: random.Random) -> list[Example]:
    examples = []
    for size, positive_repeats in zip((4, 3, 2), config.value_positive_repeats):
        for state in states[size]:
            label = value_label(state)
            repeats = positive_repeats if label != "impossible" else 1
            repeats *= config.value_root_repeats if size == 4 else 1
            examples += [Example("value", value_prompt(state), value_completion(label))] * repeats
    singles = [s for s in states[1] if not is_solvable(s)]
    for state in rng.sample(singles, min(config.value_single_negatives, len(singles))):
        examples.append(Example("value", value_prompt(state), value_completion("impossible")))
    examples += [Example("value", value_prompt([24]), value_completion("sure"))] * config.value_single_positives
    return examples


def _solutions(config: DataConfig, roots: Sequence[State], rng: random.Random) -> list[Example]:
    examples = []
    for root in roots:
        paths = solution_paths(root)
        if not paths:
            continue
        for _ in range(config.solutions_per_puzzle):
            path = paths[rng.randrange(len(paths))]
            expression = compose_expression(root, path)
            if "io" in config.kinds:
                examples.append(Example("io", io_prompt(root), io_completion(expression)))
            if "cot" in config.kinds:
                examples.append(Example("cot", cot_prompt(root), cot_completion(path, expression)))
    return examples


def generate_examples(config: DataConfig = DataConfig()) -> list[Example]:
    """All examples for ``config``, shuffled; the same config gives the same list."""
    rng = random.Random(config.seed)
    roots = training_roots(config.held_out)
    examples: list[Example] = []
    if "propose" in config.kinds or "value" in config.kinds:
        states = reachable_states(roots)
        if "propose" in config.kinds:
            examples += _propose(config, states, rng)
        if "value" in config.kinds:
            examples += _value(config, states, rng)
    if "io" in config.kinds or "cot" in config.kinds:
        examples += _solutions(config, roots, rng)
    rng.shuffle(examples)
    return examples
