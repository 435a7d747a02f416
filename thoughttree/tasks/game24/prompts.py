"""Few-shot Game of 24 prompts for instruction-tuned models, in the Tree of Thoughts style.

These are for general chat models; the bundled model uses the compact formats of
:mod:`.formats` instead. Every in-context puzzle comes from the training part of the list
(indices below 900): ``4 9 10 13`` (index 999) is deliberately absent because it is a test
puzzle. The examples' steps and answers are checked by the test suite.
"""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction

from thoughttree.tasks.game24.arith import format_numbers
from thoughttree.tasks.game24.steps import make_state

# (puzzle, three step lines, answer expression); indices 37, 260, 511, 702, 868.
EXAMPLES: tuple[tuple[str, tuple[str, str, str], str], ...] = (
    ("2 11 11 12", ("11 * 12 = 132 (left: 2 11 132)", "132 / 11 = 12 (left: 2 12)",
                    "2 * 12 = 24 (left: 24)"), "2 * (11 * 12 / 11)"),
    ("4 5 9 9", ("9 / 9 = 1 (left: 1 4 5)", "1 + 5 = 6 (left: 4 6)", "4 * 6 = 24 (left: 24)"),
     "4 * (9 / 9 + 5)"),
    ("3 6 8 8", ("3 / 6 = 1/2 (left: 1/2 8 8)", "8 / 1/2 = 16 (left: 8 16)",
                 "8 + 16 = 24 (left: 24)"), "8 + 8 / (3 / 6)"),
    ("3 3 7 11", ("11 - 7 = 4 (left: 3 3 4)", "3 + 3 = 6 (left: 4 6)", "4 * 6 = 24 (left: 24)"),
     "(11 - 7) * (3 + 3)"),
    ("2 3 4 10", ("3 * 4 = 12 (left: 2 10 12)", "2 + 10 = 12 (left: 12 12)",
                  "12 + 12 = 24 (left: 24)"), "3 * 4 + (2 + 10)"),
)

IO_INSTRUCTIONS = ("Combine the four given numbers with +, -, * and / to make 24. Each number must be "
                   "used exactly once; parentheses are allowed. Reply with a single line of the form "
                   "'Answer: <expression> = 24'.\n")

COT_INSTRUCTIONS = ("Combine the four given numbers with +, -, * and / to make 24, using each number "
                    "exactly once. Work in three steps: every step takes two of the numbers you still "
                    "have, combines them, and lists what is left. Then write the whole calculation "
                    "as one line 'Answer: <expression> = 24'.\n")

PROPOSE_INSTRUCTIONS = ("Each line below is one possible next move in the game of 24: pick two of the "
                        "numbers, combine them with +, -, * or /, and after 'left:' write the numbers "
                        "you would have afterwards (the result replaces the two you used). List "
                        "several different moves, one per line.\n")

PROPOSE_EXAMPLE = """Numbers: 3 5 7 12
Possible next steps:
3 + 5 = 8 (left: 7 8 12)
12 / 3 = 4 (left: 4 5 7)
7 - 5 = 2 (left: 2 3 12)
3 * 7 = 21 (left: 5 12 21)
12 - 7 = 5 (left: 3 5 5)
5 + 7 = 12 (left: 3 12 12)
3 / 12 = 1/4 (left: 1/4 5 7)
5 * 12 = 60 (left: 3 7 60)
"""

VALUE_INSTRUCTIONS = ("Decide whether the numbers can still make 24 with +, -, * and /, each used "
                      "once. Try a few combinations, then give a verdict on the last line: 'sure' if "
                      "you found a way, 'likely' if it seems possible but is not settled, "
                      "'impossible' if the numbers are clearly too large, too small or cannot fit.\n")

VALUE_EXAMPLES = """Numbers: 10 14
10 + 14 = 24
sure
Numbers: 3 3 7
3 * 7 = 21, and 21 + 3 = 24
sure
Numbers: 2 9 13
2 + 9 = 11, 13 + 11 = 24
sure
Numbers: 6 8 9
6 + 8 + 9 = 23, 9 * 8 / 6 = 12, 6 * 9 - 8 = 46
not found yet, but the numbers are in a workable range
likely
Numbers: 11 12
11 + 12 = 23, 12 - 11 = 1, 11 * 12 = 132, 12 / 11 is not whole
impossible
Numbers: 1 2 3
1 + 2 + 3 = 6, (1 + 2) * 3 = 9, the largest product is 9
all of them are far below 24
impossible
Numbers: 1 1 11
(1 + 1) * 11 = 22, 1 + 1 + 11 = 13
too small to reach 24
impossible
"""


def _numbers(numbers: Iterable[Fraction | int | str]) -> str:
    return format_numbers(make_state(numbers))


def few_shot_io_prompt(puzzle: Iterable[Fraction | int | str]) -> str:
    """Five solved examples, then ``Input: <puzzle>``; the model answers in one line."""
    shots = "".join(f"Input: {p}\nAnswer: {answer} = 24\n" for p, _, answer in EXAMPLES)
    return f"{IO_INSTRUCTIONS}{shots}Input: {_numbers(puzzle)}\n"


def few_shot_cot_prompt(puzzle: Iterable[Fraction | int | str]) -> str:
    """Five worked examples (three steps and an answer each), then ``Input: <puzzle>``."""
    shots = "".join(f"Input: {p}\nSteps:\n" + "".join(f"{s}\n" for s in steps) + f"Answer: {answer} = 24\n"
                    for p, steps, answer in EXAMPLES)
    return f"{COT_INSTRUCTIONS}{shots}Input: {_numbers(puzzle)}\nSteps:\n"


def few_shot_propose_prompt(state: Iterable[Fraction | int | str]) -> str:
    """One example list of next steps, then the state; the model lists moves one per line."""
    return f"{PROPOSE_INSTRUCTIONS}{PROPOSE_EXAMPLE}Numbers: {_numbers(state)}\nPossible next steps:\n"


def few_shot_value_prompt(state: Iterable[Fraction | int | str]) -> str:
    """Worked verdicts, then the state; the last line of the reply is sure, likely or impossible."""
    return f"{VALUE_INSTRUCTIONS}{VALUE_EXAMPLES}Numbers: {_numbers(state)}\n"
