"""Game of 24: puzzles, exact checking, an exhaustive solver, step lines and prompt formats.

Pure Python (no torch). :mod:`.task` makes it a search task and :mod:`.run` runs a method over
a range of puzzles. The bundled model in ``thoughttree/models/game24`` is trained on the
formats of :mod:`.formats`; :mod:`.prompts` holds few-shot prompts for instruction-tuned models.
"""

from .arith import (
    CheckResult, Evaluated, ExpressionError, check_answer, evaluate_expression, format_number,
    format_numbers, parse_number, parse_numbers,
)
from .formats import (
    VALUE_LABELS, VALUE_OF_LABEL, ParsedCot, cot_prompt, format_answer, io_prompt, parse_cot,
    parse_io, parse_propose, parse_value, path_answer, propose_prompt, value_label, value_prompt,
)
from .prompts import few_shot_cot_prompt, few_shot_io_prompt, few_shot_propose_prompt, few_shot_value_prompt
from .puzzles import (
    NUM_PUZZLES, TEST_INDICES, VALIDATION_INDICES, get_puzzle, held_out_puzzles, load_puzzles, parse_puzzle,
    validation_puzzles,
)
from .solver import good_steps, is_solvable, next_steps, solution_paths, solve
from .steps import Step, StepCheck, compose_expression, make_state, make_step, parse_step, validate_step
from .task import Game24, Game24Config, Game24Direct, Game24DirectConfig

__all__ = [
    "NUM_PUZZLES", "TEST_INDICES", "VALIDATION_INDICES", "VALUE_LABELS", "VALUE_OF_LABEL",
    "CheckResult", "Evaluated", "Game24", "Game24Config", "Game24Direct", "Game24DirectConfig", "ExpressionError",
    "ParsedCot", "Step", "StepCheck",
    "check_answer", "compose_expression", "cot_prompt", "evaluate_expression",
    "few_shot_cot_prompt", "few_shot_io_prompt", "few_shot_propose_prompt", "few_shot_value_prompt",
    "format_answer", "format_number", "format_numbers", "get_puzzle", "good_steps",
    "held_out_puzzles", "io_prompt", "is_solvable", "load_puzzles", "make_state", "make_step",
    "next_steps", "parse_cot", "parse_io", "parse_number", "parse_numbers", "parse_propose",
    "parse_puzzle", "parse_step", "parse_value", "path_answer", "propose_prompt", "solution_paths",
    "solve", "validate_step", "validation_puzzles", "value_label", "value_prompt",
]
