"""Seeded generation of the supervised examples the bundled Game of 24 model is trained on.

The held-out split is :mod:`.split`: no state of four or three numbers reachable from a
validation or test puzzle (indices 850-899, 1000-1049 and 900-999 by default) appears in any
example, as prompt or inside a completion. Roots are every multiset of four numbers from 1..13
(1,820) except the held-out ones; states
are everything reachable from them by canonical steps that avoid held-out states.

- propose: every distinct valid step of every state once, plus ``propose_good_extra`` more
  copies of each step that keeps 24 reachable (so sampling covers all steps and leans to
  useful ones); a four-number state's steps into held-out states are left out;
- value: every state with its exact solver label, ``value_repeats`` times per number count
  whatever the label, so the label probabilities stay calibrated to the true frequencies of
  four- and three-number states; two-number states from which 24 is reachable (exact
  arithmetic, 0.5% of them) get ``value_positive_extra`` more copies so they are learned;
- io / cot: solvable roots only, each with several solutions drawn from its solution paths
  that avoid held-out states (an answer expression whose written grouping passes through a
  held-out state is drawn again).

Every example is checked with :func:`.split.leaked_states` before it is kept.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from thoughttree.tasks.game24.formats import (
    cot_completion, cot_prompt, io_completion, io_prompt, propose_completion, propose_prompt,
    value_completion, value_label, value_prompt,
)
from thoughttree.tasks.game24.solver import good_steps, is_solvable, next_steps, solution_paths
from thoughttree.tasks.game24.split import HELD_OUT_INDICES, held_out_states, is_clean_path, leaked_states
from thoughttree.tasks.game24.steps import State, compose_expression, make_state


@dataclass(frozen=True)
class Example:
    """One training sequence: the loss is taken on ``completion`` only."""

    kind: str
    prompt: str
    completion: str


@dataclass(frozen=True)
class DataConfig:
    """What to generate. Counts are per state and number count 4, 3, 2 (propose, value) or per
    puzzle (io, cot)."""

    seed: int = 0
    held_out: tuple[int, ...] = HELD_OUT_INDICES
    propose_good_extra: tuple[int, int, int] = (2, 2, 2)
    value_repeats: tuple[int, int, int] = (4, 2, 1)
    value_positive_extra: tuple[int, int, int] = (0, 0, 8)
    value_single_negatives: int = 2000
    value_single_positives: int = 200
    solutions_per_puzzle: int = 16
    kinds: tuple[str, ...] = field(default=("propose", "value", "io", "cot"))

    def __post_init__(self) -> None:
        unknown = set(self.kinds) - {"propose", "value", "io", "cot"}
        if unknown:
            raise ValueError(f"unknown example kinds {sorted(unknown)}; use propose, value, io, cot")
        for name in ("propose_good_extra", "value_repeats", "value_positive_extra"):
            if any(n < 0 for n in getattr(self, name)):
                raise ValueError(f"{name} must be counts >= 0, got {getattr(self, name)}")


def training_roots(held_out: Sequence[int] = HELD_OUT_INDICES) -> list[State]:
    """All four-number multisets from 1..13 except the held-out puzzles' starting states."""
    excluded = held_out_states(held_out)
    roots = (make_state(c) for c in itertools.combinations_with_replacement(range(1, 14), 4))
    return [r for r in roots if r not in excluded]


def reachable_states(roots: Sequence[State], excluded: frozenset[State] = frozenset()) -> dict[int, list[State]]:
    """States by number count (4, 3, 2, 1) reachable from ``roots`` through canonical steps that
    never enter ``excluded``; each list sorted for determinism."""
    by_size: dict[int, set[State]] = {4: set(roots) - excluded}
    for size in (3, 2, 1):
        by_size[size] = {step.left for state in by_size[size + 1] for step in next_steps(state)} - excluded
    return {size: sorted(states) for size, states in by_size.items()}


def training_states(held_out: Sequence[int] = HELD_OUT_INDICES) -> dict[int, list[State]]:
    """The states the training data is about (see the module docstring)."""
    return reachable_states(training_roots(held_out), held_out_states(held_out))


def _propose(config: DataConfig, states: dict[int, list[State]], excluded: frozenset[State]) -> list[Example]:
    examples = []
    for size, extra in zip((4, 3, 2), config.propose_good_extra):
        for state in states[size]:
            good, prompt = set(good_steps(state)), propose_prompt(state)
            for step in next_steps(state):
                if step.left in excluded:
                    continue
                example = Example("propose", prompt, propose_completion(step))
                examples += [example] * (1 + (extra if step in good else 0))
    return examples


def _value(config: DataConfig, states: dict[int, list[State]], rng: random.Random) -> list[Example]:
    examples = []
    for size, repeats, extra in zip((4, 3, 2), config.value_repeats, config.value_positive_extra):
        for state in states[size]:
            label = value_label(state)
            copies = repeats + (extra if label != "impossible" else 0)
            examples += [Example("value", value_prompt(state), value_completion(label))] * copies
    singles = [s for s in states[1] if not is_solvable(s)]
    for state in rng.sample(singles, min(config.value_single_negatives, len(singles))):
        examples.append(Example("value", value_prompt(state), value_completion("impossible")))
    examples += [Example("value", value_prompt([24]), value_completion("sure"))] * config.value_single_positives
    return examples


def _solutions(config: DataConfig, roots: Sequence[State], excluded: frozenset[State],
               rng: random.Random) -> list[Example]:
    examples = []
    for root in roots:
        paths = [p for p in solution_paths(root) if is_clean_path([root, *(s.left for s in p)], excluded)]
        if not paths:
            continue
        drawn = 0
        for _ in range(4 * config.solutions_per_puzzle):  # answers written through a held-out state are redrawn
            if drawn == config.solutions_per_puzzle:
                break
            path = paths[rng.randrange(len(paths))]
            expression = compose_expression(root, path)
            cot = Example("cot", cot_prompt(root), cot_completion(path, expression))
            if leaked_states(cot.prompt, cot.completion, excluded):
                continue
            drawn += 1
            if "io" in config.kinds:
                examples.append(Example("io", io_prompt(root), io_completion(expression)))
            if "cot" in config.kinds:
                examples.append(cot)
    return examples


def generate_examples(config: DataConfig = DataConfig()) -> list[Example]:
    """All examples for ``config``, shuffled; the same config gives the same list.

    Every example is checked against the held-out states; one that shows any is dropped
    (by construction there are none).
    """
    rng = random.Random(config.seed)
    excluded = held_out_states(config.held_out)
    roots = training_roots(config.held_out)
    examples: list[Example] = []
    if "propose" in config.kinds or "value" in config.kinds:
        states = reachable_states(roots, excluded)
        if "propose" in config.kinds:
            examples += _propose(config, states, excluded)
        if "value" in config.kinds:
            examples += _value(config, states, rng)
    if "io" in config.kinds or "cot" in config.kinds:
        examples += _solutions(config, roots, excluded, rng)
    clean = {e: not leaked_states(e.prompt, e.completion, excluded) for e in set(examples)}
    examples = [e for e in examples if clean[e]]
    rng.shuffle(examples)
    return examples


def data_sha256(examples: Sequence[Example]) -> str:
    """SHA-256 of the examples as JSON Lines in order (what ``training/game24/make_data.py`` writes)."""
    digest = hashlib.sha256()
    for e in examples:
        digest.update((example_line(e) + "\n").encode())
    return digest.hexdigest()


def example_line(example: Example) -> str:
    """One example as a JSON Lines record, without the newline."""
    return json.dumps({"kind": example.kind, "prompt": example.prompt, "completion": example.completion})
