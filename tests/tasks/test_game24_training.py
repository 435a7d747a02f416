"""The training script and the GPU entry script, on a few examples on CPU."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
from pathlib import Path

from thoughttree.tasks.game24.dataset import DataConfig, data_sha256, generate_examples
from thoughttree.tasks.game24.formats import value_label
from thoughttree.tasks.game24.steps import make_state

TRAINING = Path(__file__).resolve().parents[2] / "training" / "game24"


def _train_module():
    spec = importlib.util.spec_from_file_location("game24_train", TRAINING / "train.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_train_writes_model_summary_and_data_hash(tmp_path, monkeypatch) -> None:
    train = _train_module()
    # io examples of the last 162 puzzles only: the same generator, small enough for a test
    small = generate_examples(DataConfig(kinds=("io",), solutions_per_puzzle=1, held_out=tuple(range(1200))))
    monkeypatch.setattr(train, "generate_examples", lambda config: small)
    out = tmp_path / "model"
    train.main(["--out", str(out), "--steps", "2", "--batch-size", "4", "--warmup", "1", "--device", "cpu",
                "--summary", str(tmp_path / "summary.json")])
    recorded = json.loads((out / "training.json").read_text())
    assert recorded["data_sha256"] == train.data_sha256(small) != train.data_sha256(small[:-1])
    assert recorded["split"].startswith("strict") and recorded["steps"] == 2
    assert recorded["held_out"] == {"validation": [*range(850, 900), *range(1000, 1050)], "test": [*range(900, 1000)]}
    assert json.loads((tmp_path / "summary.json").read_text())["data_sha256"] == recorded["data_sha256"]
    assert (out / "model.safetensors").stat().st_size < 20 * 2**20


def test_train_writes_a_draft_model_with_the_same_tokenizer(tmp_path, monkeypatch) -> None:
    from thoughttree import LM

    train = _train_module()
    small = generate_examples(DataConfig(kinds=("io",), solutions_per_puzzle=1, held_out=tuple(range(1200))))
    monkeypatch.setattr(train, "generate_examples", lambda config: small)
    out = tmp_path / "draft"
    train.main(["--out", str(out), "--size", "draft", "--steps", "1", "--batch-size", "4", "--warmup", "1", "--device", "cpu"])
    assert json.loads((out / "training.json").read_text())["size"] == "draft"
    config = json.loads((out / "config.json").read_text())
    assert (config["num_hidden_layers"], config["hidden_size"]) == train.SIZES["draft"][:2]
    bundled = json.loads((Path(__file__).resolve().parents[2] / "thoughttree/models/game24/tokenizer.json").read_text())
    assert json.loads((out / "tokenizer.json").read_text())["model"]["vocab"] == bundled["model"]["vocab"]
    assert LM.from_pretrained(out, device="cpu").config.vocab_size == config["vocab_size"]


def test_make_data_writes_the_examples_and_prints_their_hash(tmp_path, monkeypatch, capsys) -> None:
    spec = importlib.util.spec_from_file_location("game24_make_data", TRAINING / "make_data.py")
    assert spec is not None and spec.loader is not None
    make_data = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_data)
    small = generate_examples(DataConfig(kinds=("io",), solutions_per_puzzle=1, held_out=tuple(range(1200))))
    monkeypatch.setattr(make_data, "generate_examples", lambda config: small)
    out = tmp_path / "data.jsonl"
    make_data.main(["--out", str(out)])
    text = out.read_bytes()
    assert [json.loads(line)["completion"] for line in text.splitlines()] == [e.completion for e in small]
    printed = capsys.readouterr().out
    assert f"sha256: {hashlib.sha256(text).hexdigest()}" in printed and data_sha256(small) in printed
    assert "validation 850-899 and 1000-1049; test 900-999" in printed


def test_gpu_run_script_rejects_bad_arguments() -> None:
    for args in ([], ["a", "b"], ["a", "--smoke", "c"]):
        done = subprocess.run(["bash", str(TRAINING / "gpu_run.sh"), *args], capture_output=True, text=True)
        assert done.returncode == 2 and "usage:" in done.stderr


def test_evaluation_reports_no_rate_for_a_group_without_unseen_states() -> None:
    spec = importlib.util.spec_from_file_location("game24_evaluate", TRAINING / "evaluate.py")
    assert spec is not None and spec.loader is not None
    evaluate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(evaluate)

    class Solver:
        """Answers every value prompt with the solver's label."""

        def generate(self, prompts: list[str], max_new_tokens: int, sample: bool) -> list[str]:
            return [value_label(p.split(":", 1)[1].split()) + "\n" for p in prompts]

    group = [make_state([4, 6]), make_state([12, 12])]
    seen = evaluate.eval_value(Solver(), {"2": group}, seen=set(group))["2"]
    assert seen["accuracy"] == 1.0 and seen["unseen_n"] == 0 and seen["unseen_accuracy"] is None
    unseen = evaluate.eval_value(Solver(), {"2": group}, seen=set())["2"]
    assert unseen["unseen_n"] == 2 and unseen["unseen_accuracy"] == 1.0
