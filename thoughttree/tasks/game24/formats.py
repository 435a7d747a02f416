"""The compact prompt formats the bundled Game of 24 model is trained on, with their parsers.

Every prompt is one line ``<kind>: <numbers>\\n``; every completion ends with a newline (the
model then writes its end-of-sequence token), so ``stop="\\n"`` ends a single-line answer.

================  ==========================  ===============================================
kind              prompt                      completion
================  ==========================  ===============================================
propose           ``propose: 4 5 6 10\\n``      ``4 + 5 = 9 (left: 6 9 10)\\n`` (one step)
value             ``value: 6 9 10\\n``          ``likely\\n`` (``sure`` / ``likely`` / ``impossible``)
io                ``io: 4 5 6 10\\n``           ``4 + 5 * (10 - 6) = 24\\n`` (whole answer)
cot               ``cot: 4 5 6 10\\n``          three step lines, then ``answer: <expr> = 24\\n``
================  ==========================  ===============================================

Value labels come from the exact solver (:func:`value_label`):

- ``sure``: the state is exactly ``24``, or it has two numbers that can make 24;
- ``likely``: 24 is reachable from a state of three or four numbers;
- ``impossible``: 24 cannot be reached.

:data:`VALUE_OF_LABEL` turns labels into scores as Tree of Thoughts does.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction

from thoughttree.tasks.game24.arith import format_numbers
from thoughttree.tasks.game24.solver import is_solvable
from thoughttree.tasks.game24.steps import Step, StepCheck, compose_expression, make_state, validate_step

VALUE_LABELS = ("sure", "likely", "impossible")
VALUE_OF_LABEL: dict[str, float] = {"sure": 20.0, "likely": 1.0, "impossible": 0.001}
ANSWER_PREFIX = "answer: "
KINDS = ("propose", "value", "io", "cot")

Numbers = Iterable[Fraction | int | str]


def _first_line(completion: str) -> str:
    return completion.split("\n", 1)[0].strip()


def _prompt(kind: str, numbers: Numbers) -> str:
    return f"{kind}: {format_numbers(make_state(numbers))}\n"


def value_label(numbers: Numbers) -> str:
    """The solver's label for a state (see the module docstring for the rule)."""
    state = make_state(numbers)
    if not is_solvable(state):
        return "impossible"
    return "sure" if len(state) <= 2 else "likely"


def format_answer(expression: str) -> str:
    """``'<expression> = 24'``: the answer line that :func:`~.arith.check_answer` reads."""
    return f"{expression} = 24"


def path_answer(puzzle: Sequence[Fraction | int], steps: Sequence[Step | str]) -> str:
    """The answer ``'<expression> = 24'`` that a search path of steps from ``puzzle`` computes.

    ValueError if a step does not follow from the state before it. Whether the expression
    really is 24 is for the checker to say.
    """
    return format_answer(compose_expression(puzzle, steps))


# propose ---------------------------------------------------------------------------------

def propose_prompt(state: Numbers) -> str:
    """Prompt for one next step from ``state``; sample several completions for several children."""
    return _prompt("propose", state)


def propose_completion(step: Step) -> str:
    """The training target for a propose prompt."""
    return f"{step.text()}\n"


def parse_propose(completion: str, state: Numbers) -> StepCheck:
    """Read the first line of a propose completion and validate it against ``state``."""
    return validate_step(make_state(state), _first_line(completion))


# value -----------------------------------------------------------------------------------

def value_prompt(state: Numbers) -> str:
    """Prompt asking whether 24 can still be reached from ``state``."""
    return _prompt("value", state)


def value_completion(label: str) -> str:
    if label not in VALUE_LABELS:
        raise ValueError(f"unknown value label {label!r}; use one of {', '.join(VALUE_LABELS)}")
    return f"{label}\n"


def parse_value(completion: str) -> str | None:
    """The label of a value completion, or None when the first line is not a label."""
    label = _first_line(completion)
    return label if label in VALUE_LABELS else None


# io --------------------------------------------------------------------------------------

def io_prompt(puzzle: Numbers) -> str:
    """Prompt for the whole answer expression at once."""
    return _prompt("io", puzzle)


def io_completion(expression: str) -> str:
    return f"{format_answer(expression)}\n"


def parse_io(completion: str) -> str:
    """The answer line of an io completion (give it to ``check_answer``)."""
    return _first_line(completion)


# cot -------------------------------------------------------------------------------------

def cot_prompt(puzzle: Numbers) -> str:
    """Prompt for a chain of three steps followed by the answer line."""
    return _prompt("cot", puzzle)


def cot_completion(steps: Sequence[Step], expression: str) -> str:
    lines = [step.text() for step in steps]
    return "".join(f"{line}\n" for line in lines) + f"{ANSWER_PREFIX}{format_answer(expression)}\n"


@dataclass(frozen=True)
class ParsedCot:
    """A cot completion split into its step lines and its answer (None if it wrote none)."""

    steps: tuple[str, ...]
    answer: str | None


def parse_cot(completion: str) -> ParsedCot:
    """Split a cot completion; lines after the answer line are ignored.

    ``Answer:`` is accepted in any case, so few-shot replies of chat models parse too.
    """
    steps: list[str] = []
    for raw in completion.split("\n"):
        line = raw.strip()
        if line.lower().startswith(ANSWER_PREFIX.strip()):
            return ParsedCot(tuple(steps), line[len(ANSWER_PREFIX.strip()):].strip())
        if line:
            steps.append(line)
    return ParsedCot(tuple(steps), None)
