"""The bundled Game of 24 model's tokenizer: the format words plus single ASCII characters.

Numbers are spelled digit by digit, so any integer or fraction is representable and the
model does arithmetic on digits. Every printable ASCII character (and newline) is its own
token, so decoding an encoding gives the text back exactly; the format words (``propose``,
``left``, ``likely``...) are single tokens, which also makes each value label one token.
"""

from __future__ import annotations

import json
import string
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

SPECIAL_TOKENS = {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
# Longest first, so that e.g. "io" never splits a word that only starts like it.
WORDS = ("impossible", "propose", "answer", "likely", "value", "left", "sure", "cot", "io")
CHARACTERS = "\n" + "".join(c for c in string.printable if c not in "\t\n\r\x0b\x0c")


def build_tokenizer(model_max_length: int = 256) -> PreTrainedTokenizerFast:
    """A fast tokenizer that adds ``<s>`` in front of every encoded text."""
    vocab: dict[str, int] = {}
    for token in (*SPECIAL_TOKENS.values(), *WORDS, *CHARACTERS):
        vocab.setdefault(token, len(vocab))
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token=SPECIAL_TOKENS["unk_token"]))
    pattern = "|".join(WORDS) + r"|[\s\S]"
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(pattern), behavior="isolated")
    tokenizer.decoder = decoders.Fuse()
    bos = SPECIAL_TOKENS["bos_token"]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A $B", special_tokens=[(bos, vocab[bos])])
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, model_max_length=model_max_length,
                                   clean_up_tokenization_spaces=False, **SPECIAL_TOKENS)


def save_tokenizer(tokenizer: PreTrainedTokenizerFast, directory: Path) -> None:
    """``save_pretrained``, naming the class every transformers version knows
    (PreTrainedTokenizerFast), plus an explicit ``special_tokens_map.json`` for older loaders."""
    tokenizer.save_pretrained(directory)
    config_path = directory / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(config, indent=2) + "\n")
    (directory / "special_tokens_map.json").write_text(json.dumps(SPECIAL_TOKENS, indent=2) + "\n")
