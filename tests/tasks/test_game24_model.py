"""The bundled Game of 24 model directory: loads with transformers, tokenizer round trips."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from thoughttree.tasks.game24 import (
    VALUE_LABELS, cot_prompt, io_prompt, make_state, next_steps, parse_propose, parse_value,
    path_answer, propose_prompt, solve, value_prompt,
)
from thoughttree.tasks.game24.formats import cot_completion, io_completion, propose_completion, value_completion
from thoughttree.tasks.game24.prompts import few_shot_cot_prompt, few_shot_value_prompt

MODEL_DIR = Path(__file__).resolve().parents[2] / "thoughttree" / "models" / "game24"


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(MODEL_DIR)


@pytest.fixture(scope="module")
def model():
    return AutoModelForCausalLM.from_pretrained(MODEL_DIR, dtype=torch.float32).eval()


def _format_texts() -> list[str]:
    puzzle = (4, 5, 6, 10)
    path = solve(puzzle)
    assert path is not None
    expression = path_answer(puzzle, path).removesuffix(" = 24")
    texts = [propose_prompt(puzzle), value_prompt(puzzle), io_prompt(puzzle), cot_prompt(puzzle),
             io_completion(expression), cot_completion(path, expression),
             value_prompt(("591/49", "3/7")), few_shot_cot_prompt(puzzle), few_shot_value_prompt((4, 6))]
    texts += [value_completion(label) for label in VALUE_LABELS]
    texts += [propose_completion(step) for step in next_steps((1, 5, 5, 5))]
    return texts


def test_files_and_size() -> None:
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "special_tokens_map.json", "README.md"):
        assert (MODEL_DIR / name).is_file(), name
    assert (MODEL_DIR / "model.safetensors").stat().st_size <= 16 * 2**20
    config = json.loads((MODEL_DIR / "config.json").read_text())
    assert config["model_type"] == "llama" and config["architectures"] == ["LlamaForCausalLM"]


def test_tokenizer_round_trips_every_format(tokenizer) -> None:
    assert tokenizer.bos_token == "<s>" and tokenizer.eos_token == "</s>" and tokenizer.pad_token == "<pad>"
    for text in _format_texts():
        ids = tokenizer(text)["input_ids"]
        assert ids[0] == tokenizer.bos_token_id
        assert tokenizer.unk_token_id not in ids, text
        assert tokenizer.decode(ids, skip_special_tokens=True) == text
    for label in VALUE_LABELS:  # one token each, so a label's probability is one softmax entry
        assert len(tokenizer(label, add_special_tokens=False)["input_ids"]) == 1


def test_prompt_then_completion_tokenizes_as_concatenation(tokenizer) -> None:
    prompt, completion = propose_prompt((4, 5, 6, 10)), "4 + 5 = 9 (left: 6 9 10)\n"
    joint = tokenizer(prompt + completion)["input_ids"]
    assert joint == tokenizer(prompt)["input_ids"] + tokenizer(completion, add_special_tokens=False)["input_ids"]


def test_model_loads_and_answers_in_format(tokenizer, model) -> None:
    assert model.config.vocab_size == len(tokenizer)
    assert 3_000_000 < sum(p.numel() for p in model.parameters()) < 8_000_000

    def greedy(prompt: str) -> str:
        ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
        out = model.generate(ids, max_new_tokens=40, do_sample=False, pad_token_id=tokenizer.pad_token_id,
                             eos_token_id=tokenizer.eos_token_id)
        return tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)

    state = make_state((4, 5, 6, 10))
    assert parse_propose(greedy(propose_prompt(state)), state).valid
    assert parse_value(greedy(value_prompt((4, 6)))) == "sure"
    assert parse_value(greedy(value_prompt((1, 1, 1)))) == "impossible"


def test_lookahead_values_states_by_the_best_state_one_step_on() -> None:
    """The default evaluator of the bundled model: three-number states by their proposals' best
    two-number state, two-number states directly; the proposals' tokens count as generated."""
    from thoughttree import LM, RuntimeConfig, ThoughtTree
    from thoughttree.tasks import LabelProbs, Lookahead
    from thoughttree.tasks.game24 import Game24, Game24Config

    lm = LM.from_pretrained(MODEL_DIR, device="cpu", runtime=RuntimeConfig(num_pages=1024))
    task, problem = Game24(Game24Config(value="lookahead", lookahead_samples=30)), "1 2 3 4"
    evaluator = task.evaluator()
    assert isinstance(evaluator, Lookahead)
    tree = ThoughtTree(lm, prompt=task.prompt(problem))
    texts = ["1 * 2 = 2 (left: 2 3 4)\n", "3 - 2 = 1 (left: 1 1 4)\n", "2 * 3 = 6 (left: 1 4 6)\n"]
    nodes = [tree.add_child(tree.root, lm.encode(t, add_bos=False), t) for t in texts]
    two = tree.add_child(nodes[2], lm.encode("1 * 4 = 4 (left: 4 6)\n", add_bos=False), "1 * 4 = 4 (left: 4 6)\n")
    before = lm.stats.generated_tokens
    high, low, _, direct = evaluator.evaluate(lm, problem, [*nodes, two], seed=0)
    assert lm.stats.generated_tokens - before >= 3 * 30, "every proposal's tokens are counted"
    assert high > 10 and low < 0.1, "2 3 4 reaches 24 (4 * 6, 2 * 12), 1 1 4 does not"
    probs = LabelProbs(prompt=lambda p, n: value_prompt((4, 6)), labels=evaluator.leaf.labels)
    assert direct == pytest.approx(probs.evaluate(lm, problem, [two], seed=0)[0], rel=1e-4)
    lm.check_integrity(tree)


def test_a_lookahead_that_decodes_an_expansions_proposals_leaves_the_search_unchanged() -> None:
    """Distinct proposals: a look-ahead valuing with 4 of the 6 proposals an expansion asks for
    decodes all 6, so that expanding a kept state decodes nothing; the tree is the same."""
    import dataclasses

    from thoughttree import LM, RuntimeConfig
    from thoughttree.search.driver import search
    from thoughttree.strategies import BFS
    from thoughttree.tasks.game24 import Game24, Game24Config

    lm = LM.from_pretrained(MODEL_DIR, device="cpu", runtime=RuntimeConfig(num_pages=2048))
    config = Game24Config(value="lookahead", lookahead_samples=4)
    config = dataclasses.replace(config, sampling=dataclasses.replace(config.sampling, distinct=True))
    runs = {}
    for shared in (None, 6):
        task = Game24(dataclasses.replace(config, expansion_samples=shared))
        runs[shared] = search(task, BFS(breadth=2, samples=6, depth=3, evaluations=4), lm, problem="4 5 6 10")
    plain, shared = runs[None], runs[6]

    def nodes(result):
        return [(n.depth, n.text, n.value) for n in result.tree.nodes]

    assert nodes(shared) == nodes(plain)
    assert plain.statistics.per_round[1].expand.generated_tokens > 0
    assert shared.statistics.per_round[1].expand.generated_tokens == 0, "the kept states' children were decoded"
    with pytest.raises(ValueError, match="expansion_samples"):
        Game24Config(expansion_samples=0)
