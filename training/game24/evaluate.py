"""Held-out evaluation of the bundled Game of 24 model with transformers ``generate``.

    PYTHONPATH=. python training/game24/evaluate.py --model thoughttree/models/game24 --range val --out eval_val.json

Everything is measured on one held-out range, ``--range val`` (the validation puzzles 850-899
and 1000-1049, for choosing settings) or ``--range test`` (900-999, for reporting), and the
states reachable from its puzzles; none of their four- or three-number states is in the training
data, but most of their two-number states are (see ``thoughttree.tasks.game24.split``):

- propose: share of greedy and sampled (T=1) completions that are valid steps, and share of
  those that keep 24 reachable;
- value: greedy label against the solver's label, per number count, also on the states that
  never occur in training (``unseen_n``; few two-number states are among them); and the
  calibration of P(24 reachable) = p(sure) + p(likely) from the label probabilities (Brier
  score, expected calibration error over 10 bins);
- io / cot: greedy success, and the mean and any-of-k success of k samples (T=1);
- bfs: a plain Tree-of-Thoughts breadth-first search (k proposals per node, value = expected
  label score from the label probabilities, keep the best ``breadth``) as a sanity check.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from thoughttree.tasks.game24.arith import check_answer
from thoughttree.tasks.game24.dataset import reachable_states, training_states
from thoughttree.tasks.game24.formats import (
    VALUE_LABELS, VALUE_OF_LABEL, cot_prompt, io_prompt, parse_cot, parse_io, parse_propose,
    parse_value, path_answer, propose_prompt, value_label, value_prompt,
)
from thoughttree.tasks.game24.solver import is_solvable
from thoughttree.tasks.game24.split import HELD_OUT_INDICES, RANGES, model_held_out
from thoughttree.tasks.game24.steps import State, Step, make_state


class Generator:
    """Batched left-padded generation and next-token probabilities for one model."""

    def __init__(self, model_dir: Path, device: str, batch_size: int, dtype: torch.dtype) -> None:
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.tokenizer.padding_side = "left"
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device).eval()
        self.device, self.batch_size = device, batch_size

    def _batches(self, prompts: Sequence[str]):
        for start in range(0, len(prompts), self.batch_size):
            chunk = list(prompts[start:start + self.batch_size])
            yield self.tokenizer(chunk, return_tensors="pt", padding=True).to(self.device)

    @torch.no_grad()
    def generate(self, prompts: Sequence[str], max_new_tokens: int, sample: bool) -> list[str]:
        texts: list[str] = []
        for batch in self._batches(prompts):
            out = self.model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=sample,
                                      temperature=1.0 if sample else None, top_k=None, top_p=None,
                                      pad_token_id=self.tokenizer.pad_token_id,
                                      eos_token_id=self.tokenizer.eos_token_id)
            new = out[:, batch["input_ids"].shape[1]:]
            texts += self.tokenizer.batch_decode(new, skip_special_tokens=True)
        return texts

    @torch.no_grad()
    def label_probabilities(self, prompts: Sequence[str]) -> torch.Tensor:
        """``[len(prompts), 3]`` probabilities of sure / likely / impossible as the next token."""
        label_ids = [self.tokenizer.convert_tokens_to_ids(label) for label in VALUE_LABELS]
        rows = []
        for batch in self._batches(prompts):
            logits = self.model(**batch).logits[:, -1].float()
            rows.append(torch.softmax(logits, dim=-1)[:, label_ids].cpu())
        return torch.cat(rows)


def _share(flags: Sequence[bool]) -> float | None:
    """The share of true flags; None for no flags (a rate over nothing is not 0)."""
    return round(sum(flags) / len(flags), 4) if flags else None


def eval_propose(gen: Generator, states: dict[str, list[State]], samples: int) -> dict:
    result = {}
    for name, group in states.items():
        for mode, prompts_of in (("greedy", 1), ("sampled", samples)):
            prompts = [propose_prompt(s) for s in group for _ in range(prompts_of)]
            origins = [s for s in group for _ in range(prompts_of)]
            outs = gen.generate(prompts, max_new_tokens=40, sample=mode == "sampled")
            checks = [parse_propose(o, s) for o, s in zip(outs, origins)]
            valid = [c.valid for c in checks]
            good = [c.valid and c.state is not None and is_solvable(c.state) for c in checks]
            result[f"{name}/{mode}"] = {"n": len(valid), "valid": _share(valid), "keeps_24_reachable": _share(good)}
    return result


def eval_value(gen: Generator, states: dict[str, list[State]], seen: set[State]) -> dict:
    result = {}
    for name, group in states.items():
        outs = gen.generate([value_prompt(s) for s in group], max_new_tokens=3, sample=False)
        truth = [value_label(s) for s in group]
        hits = [parse_value(o) == t for o, t in zip(outs, truth)]
        recall = {label: _share([h for h, t in zip(hits, truth) if t == label])
                  for label in VALUE_LABELS if label in truth}
        unseen = [h for h, s in zip(hits, group) if s not in seen]
        result[name] = {"n": len(hits), "accuracy": _share(hits), "recall": recall,
                        "balanced_accuracy": round(sum(recall.values()) / len(recall), 4),
                        "label_counts": {label: truth.count(label) for label in VALUE_LABELS},
                        "unseen_n": len(unseen), "unseen_accuracy": _share(unseen)}
    return result


def calibration(probs: torch.Tensor, truth: Sequence[bool], bins: int = 10) -> dict:
    """Brier score and expected calibration error of P(solvable) = p(sure) + p(likely)."""
    p = (probs[:, :2].sum(-1) / probs.sum(-1).clamp(min=1e-9)).tolist()
    brier = sum((q - t) ** 2 for q, t in zip(p, truth)) / max(1, len(p))
    ece = 0.0
    for b in range(bins):
        inside = [(q, t) for q, t in zip(p, truth) if min(int(q * bins), bins - 1) == b]
        if inside:
            gap = sum(q for q, _ in inside) / len(inside) - sum(t for _, t in inside) / len(inside)
            ece += len(inside) / len(p) * abs(gap)
    return {"n": len(p), "brier": round(brier, 4), "ece": round(ece, 4),
            "mean_p": round(sum(p) / max(1, len(p)), 4), "positive_rate": _share(list(truth))}


def eval_calibration(gen: Generator, states: dict[str, list[State]]) -> dict:
    return {name: calibration(gen.label_probabilities([value_prompt(s) for s in group]),
                              [is_solvable(s) for s in group])
            for name, group in states.items() if group}


def eval_answers(gen: Generator, puzzles: list[tuple[int, ...]], samples: int) -> dict:
    result = {}
    for kind, prompt_of, max_new in (("io", io_prompt, 40), ("cot", cot_prompt, 140)):
        def correct(text: str, puzzle: tuple[int, ...]) -> bool:
            answer = parse_io(text) if kind == "io" else parse_cot(text).answer
            return answer is not None and check_answer(answer, puzzle).correct
        greedy = gen.generate([prompt_of(p) for p in puzzles], max_new, sample=False)
        sampled = gen.generate([prompt_of(p) for p in puzzles for _ in range(samples)], max_new, sample=True)
        per_puzzle = [[correct(sampled[i * samples + j], p) for j in range(samples)] for i, p in enumerate(puzzles)]
        result[kind] = {"greedy_success": _share([correct(t, p) for t, p in zip(greedy, puzzles)]),
                        "sampled_mean_success": _share([c for row in per_puzzle for c in row]),
                        f"any_of_{samples}_success": _share([any(row) for row in per_puzzle]),
                        "greedy_example": greedy[0]}
    return result


def eval_bfs(gen: Generator, puzzles: list[tuple[int, ...]], breadth: int, proposals: int) -> dict:
    """ToT BFS for all puzzles at once: three rounds of propose -> value -> keep ``breadth``."""
    frontiers: list[list[tuple[State, tuple[Step, ...]]]] = [[(make_state(p), ())] for p in puzzles]
    for _ in range(3):
        owners, prompts, nodes = [], [], []
        for i, frontier in enumerate(frontiers):
            for node in frontier:
                owners += [i] * proposals
                prompts += [propose_prompt(node[0])] * proposals
                nodes += [node] * proposals
        outs = gen.generate(prompts, max_new_tokens=40, sample=True)
        children: list[dict[State, tuple[State, tuple[Step, ...]]]] = [{} for _ in puzzles]
        for i, node, out in zip(owners, nodes, outs):
            check = parse_propose(out, node[0])
            if check.valid and check.state is not None and check.step is not None:
                path = (*node[1], check.step)
                children[i].setdefault(check.state, (check.state, path))  # same state, same future
        flat = [(i, child) for i, kids in enumerate(children) for child in kids.values()]
        probs = gen.label_probabilities([value_prompt(c[0]) for _, c in flat]) if flat else torch.empty(0, 3)
        weights = torch.tensor([VALUE_OF_LABEL[label] for label in VALUE_LABELS])
        scores = (probs * weights).sum(-1).tolist()
        ranked: list[list[tuple[float, tuple[State, tuple[Step, ...]]]]] = [[] for _ in puzzles]
        for (i, child), score in zip(flat, scores):
            ranked[i].append((score, child))
        frontiers = [[c for _, c in sorted(r, key=lambda x: -x[0])[:breadth]] for r in ranked]
    solved_any, solved_top = [], []
    for puzzle, frontier in zip(puzzles, frontiers):
        ok = [check_answer(path_answer(puzzle, path), puzzle).correct for _, path in frontier]
        solved_any.append(any(ok))
        solved_top.append(bool(ok) and ok[0])
    return {"breadth": breadth, "proposals_per_node": proposals,
            "any_of_final_success": _share(solved_any), "top1_success": _share(solved_top)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--range", choices=sorted(RANGES), required=True,
                        help="held-out puzzles to measure on: val (850-899, 1000-1049) or test (900-999)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    parser.add_argument("--limit", type=int, default=None, help="use only this many states per group (smoke test)")
    args = parser.parse_args()
    started = time.time()
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    gen = Generator(args.model, args.device, args.batch_size, getattr(torch, args.dtype))
    held_out = RANGES[args.range]
    puzzles = held_out.puzzles()[:args.limit]
    range_states = reachable_states([make_state(p) for p in puzzles])
    trained_held_out = model_held_out(args.model)  # None: a model that does not say what it was trained on
    seen = {s for group in training_states(trained_held_out or HELD_OUT_INDICES).values() for s in group}
    held_out_of_training = None if trained_held_out is None else set(held_out.indices) <= set(trained_held_out)
    if held_out_of_training is False:
        print(f"warning: {args.model}/training.json does not hold the {held_out.name} puzzles out of its training "
              "data; these numbers are not held-out results", flush=True)

    def pick(group: list[State], n: int) -> list[State]:
        return rng.sample(group, min(n, len(group), args.limit or n))

    two = [s for s in range_states[2] if is_solvable(s)]
    three = [s for s in range_states[3] if is_solvable(s)]
    propose_sets = {"4": pick(range_states[4], 100), "3": pick(range_states[3], 500),
                    "3_reachable": pick(three, 300), "2": pick(range_states[2], 500),
                    "2_reachable": pick(two, 300)}
    value_sets = {"4": pick(range_states[4], 100), "3": pick(range_states[3], 2000),
                  "2": pick(range_states[2], 2000), "2_reachable": pick(two, 500)}
    report = {"model": str(args.model), "device": args.device, "dtype": args.dtype, "seed": args.seed,
              "range": held_out.name, "puzzles": len(puzzles), "held_out_of_training": held_out_of_training,
              "held_out": f"{held_out.name} puzzles {held_out.label} and the states reachable from them; two-number "
                          "states may also be in the training data (value: unseen_n of n were not)",
              "propose": eval_propose(gen, propose_sets, samples=5),
              "value": eval_value(gen, value_sets, seen),
              "value_calibration": eval_calibration(gen, value_sets),
              "answers": eval_answers(gen, puzzles, args.samples),
              "bfs": eval_bfs(gen, puzzles, breadth=5, proposals=5),
              "bfs_10_proposals": eval_bfs(gen, puzzles, breadth=5, proposals=10)}
    report["seconds"] = round(time.time() - started, 1)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
