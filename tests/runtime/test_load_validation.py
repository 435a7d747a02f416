"""Load-time validation names the field at fault: config values before the tokenizer, a file
given as the model directory, seeds, the tokenizer's size against the model's vocabulary."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from thoughttree import LM, ThoughtTree
from thoughttree.commands.model import bundled_model_path
from thoughttree.runtime import ModelLoadError


@pytest.fixture
def model_copy(tmp_path: Path) -> Path:
    return Path(shutil.copytree(bundled_model_path(), tmp_path / "model"))


def _with_config(path: Path, **change: object) -> Path:
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, **change}))
    return path


@pytest.mark.parametrize(
    "change,message",
    [
        ({"num_attention_heads": 7}, "num_attention_heads=7 is not a multiple of num_key_value_heads=2"),
        ({"hidden_size": -1}, "hidden_size=-1 must be a positive integer"),
        ({"num_hidden_layers": 0}, "num_hidden_layers=0 must be a positive integer"),
        ({"num_key_value_heads": -2}, "num_key_value_heads=-2 must be a positive integer"),
        ({"vocab_size": 0}, "vocab_size=0 must be a positive integer"),
        ({"rms_norm_eps": -1.0}, "rms_norm_eps=-1.0 must be a positive number"),
        ({"head_dim": None, "hidden_size": 250}, "hidden_size=250 is not a multiple of num_attention_heads=4"),
        ({"intermediate_size": "big"}, "intermediate_size='big' is not a number"),
    ],
)
def test_config_values_are_checked_before_the_tokenizer(model_copy: Path, change: dict, message: str):
    (model_copy / "tokenizer.json").unlink()  # a config check that came after the tokenizer would fail on it
    with pytest.raises(ModelLoadError, match=message.replace("(", r"\(")):
        LM.from_pretrained(_with_config(model_copy, **change), device="cpu")


def test_a_file_given_as_the_model_directory_is_named_as_such(model_copy: Path):
    with pytest.raises(ModelLoadError, match="is a file, not a directory.*config.json"):
        LM.from_pretrained(model_copy / "config.json", device="cpu")


def test_a_tokenizer_larger_than_the_vocabulary_is_refused_at_load(model_copy: Path):
    with pytest.raises(ModelLoadError, match=r"has 109 tokens, more than the model's vocab_size=100"):
        LM.from_pretrained(_with_config(model_copy, vocab_size=100), device="cpu")


@pytest.mark.parametrize("seed", [float("nan"), 2.5, "0", True, None, 1.0])
def test_seeds_are_integers_only(seed: object):
    with pytest.raises(TypeError, match="seed must be an integer"):
        ThoughtTree(seed=seed)


def test_integer_seeds_are_kept():
    assert ThoughtTree(seed=np.int64(7)).seed == 7 and ThoughtTree(seed=-3).seed == -3
