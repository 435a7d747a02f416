"""What Tree-of-Thoughts BFS on Game of 24 needs from its model, simulated with the exact solver.

    python benchmarks/game24_oracle_bfs.py [--repeats 3] [--breadth 5]

No model runs: proposals are drawn by rule and values come from the solver (optionally with a
share of three-number verdicts flipped), over puzzles 900-999, so each line says how often BFS
can succeed at best with that many proposals per node. Proposal rules:

- ``uniform``: every proposal is a uniformly random valid canonical step;
- ``chain``: as the bundled model is trained to propose: uniform from four numbers; from three
  numbers a random pairing, then a step of that pair that keeps 24 reachable when it has one;
  from two numbers the step that makes 24 when there is one.

Proposals leaving the same numbers are merged, as the search does; values rank children
(sure 20 > likely 1 > impossible 0.001, ties by proposal order) and the best ``breadth`` stay.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Sequence

from thoughttree.tasks.game24.chain import hit, pairings
from thoughttree.tasks.game24.puzzles import held_out_puzzles
from thoughttree.tasks.game24.solver import good_steps, is_solvable, next_steps
from thoughttree.tasks.game24.steps import State, Step, make_state

TARGET_STATE = make_state([24])


def propose(state: State, rule: str, rng: random.Random) -> Step:
    steps = next_steps(state)
    if rule == "uniform" or len(state) == 4:
        return rng.choice(steps)
    if len(state) == 2:
        good = good_steps(state)
        return good[0] if good else rng.choice(steps)
    w, x, y = rng.choice(pairings(state))
    own = [s for s in steps if sorted((s.a, s.b)) == [x, y]]
    shared = hit(w, x, y)
    return rng.choice([s for s in own if s.result == shared] or own)


def value(state: State, accuracy: float, rng: random.Random) -> float:
    solvable = is_solvable(state)
    if len(state) == 3 and rng.random() > accuracy:
        solvable = not solvable
    return (20.0 if len(state) <= 2 else 1.0) if solvable else 0.001


def bfs(puzzle: Sequence[int], samples: Sequence[int], breadth: int, rule: str, accuracy: float,
        rng: random.Random) -> bool:
    frontier = [make_state(puzzle)]
    for depth in range(3):
        children: list[State] = []
        for state in frontier:
            seen: set[State] = set()
            for _ in range(samples[min(depth, len(samples) - 1)]):
                left = propose(state, rule, rng).left
                if left not in seen:
                    seen.add(left)
                    children.append(left)
        ranked = sorted(range(len(children)), key=lambda i: (-value(children[i], accuracy, rng), i))
        frontier = [children[i] for i in ranked[:breadth]]
    return TARGET_STATE in frontier


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="runs over the 100 puzzles per setting")
    parser.add_argument("--breadth", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    puzzles = held_out_puzzles()
    settings = [(rule, samples, accuracy) for accuracy in (1.0, 0.9) for rule, samples in (
        ("uniform", (10,)), ("uniform", (20,)), ("chain", (10,)), ("chain", (15,)),
        ("chain", (20, 6, 2)), ("chain", (20, 8, 2)), ("chain", (30, 8, 2)))]
    print("| proposals | proposals per node (by depth) | three-number value accuracy | BFS success |")
    print("|---|---|---|---|")
    for rule, samples, accuracy in settings:
        wins = sum(bfs(p, samples, args.breadth, rule, accuracy, rng) for _ in range(args.repeats) for p in puzzles)
        print(f"| {rule} | {','.join(map(str, samples))} | {accuracy:.0%} | "
              f"{wins / (args.repeats * len(puzzles)):.0%} |", flush=True)


if __name__ == "__main__":
    main()
