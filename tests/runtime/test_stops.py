"""Stop strings on token windows against the whole decoded text, and the fast detokenizer against
the tokenizer's own ``decode``, over tokenizers of the three kinds the supported families use."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from tests.tiny_models import make_tokenizer
from thoughttree import LM, RuntimeConfig
from thoughttree.runtime.detokenize import Detokenizer
from thoughttree.runtime.stops import StopWindow

_TEXT = [
    "don't stop: it's 10 - 4 = 6.\nNext line, isn't it? Yes! (left: 5 6 6)",
    "café naïve — 24 ≈ 4! 日本語 \n\n Numbers: 1 2 3\nInput: 4 4 6 8",
    "do n't stop , it 's a t . do n ' t stop ! is it ?\n a",  # the words tokenizer's
]


def _byte_level(tmp: Path) -> PreTrainedTokenizerFast:
    """Llama-3 / Qwen style: byte-level BPE (characters split across tokens)."""
    return make_tokenizer(tmp)


def _sentencepiece(tmp: Path) -> PreTrainedTokenizerFast:
    """Llama-2 / Mistral style: word-marker BPE with byte fallback, the leading space stripped."""
    norm = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    trainer = trainers.BpeTrainer(vocab_size=200, special_tokens=["<unk>", "<s>", "</s>"])
    trained = Tokenizer(models.BPE(unk_token="<unk>"))
    trained.normalizer = norm
    trained.train_from_iterator([t.encode("ascii", "ignore").decode() for t in _TEXT] * 4, trainer)  # others: bytes
    vocab = trained.get_vocab()
    for b in range(256):  # byte tokens for characters the vocabulary lacks
        vocab.setdefault(f"<0x{b:02X}>", len(vocab))
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in json.loads(trained.to_str())["model"]["merges"]]
    tok = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = norm
    tok.decoder = decoders.Sequence(
        [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    tok.add_special_tokens(["<unk>", "<s>", "</s>"])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def _cleaned_words(tmp: Path) -> PreTrainedTokenizerFast:
    """Words joined by spaces that transformers cleans up (" ." to ".", " n't" to "n't")."""
    words = ["<unk>", "</s>", "do", "n't", "'s", "it", "is", ".", ",", "?", "!", "'", "stop", "don", "a", "t", "n", "\n"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(["</s>"])
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>", unk_token="<unk>", clean_up_tokenization_spaces=True)


KINDS = {"byte_level": _byte_level, "sentencepiece": _sentencepiece, "cleaned_words": _cleaned_words}


@pytest.fixture(scope="module")
def tiny_lm(tiny_model_dir) -> LM:
    return LM.from_pretrained(tiny_model_dir, device="cpu")


@pytest.fixture(scope="module", params=sorted(KINDS))
def tokenizer(request, tmp_path_factory):
    return KINDS[request.param](tmp_path_factory.mktemp(request.param))


def test_the_probe_reads_whether_spaces_are_cleaned_up(tokenizer) -> None:
    detok = Detokenizer(tokenizer)
    ids = tokenizer.encode("a .", add_special_tokens=False)
    assert detok.cleans_up_spaces == ("a ." not in tokenizer.decode(ids, skip_special_tokens=True))
    if isinstance(tokenizer.backend_tokenizer.model, models.WordLevel):
        assert detok.cleans_up_spaces  # the words tokenizer is built to clean up


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fast_decode_equals_the_tokenizers_decode(tokenizer, data) -> None:
    detok = Detokenizer(tokenizer)
    vocab = len(tokenizer)
    lists = data.draw(st.lists(st.lists(st.integers(0, vocab - 1), max_size=12), min_size=1, max_size=4))
    want = [tokenizer.decode(t, skip_special_tokens=True) for t in lists]
    assert [detok(t) for t in lists] == want
    assert detok.batch(lists) == want


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_batch_encoding_equals_encoding_each_text(tokenizer, tiny_lm, data) -> None:
    lm = LM(tiny_lm.model, tokenizer, RuntimeConfig(kv_memory_bytes=1 << 20))
    pieces = st.sampled_from([t[i:j] for t in _TEXT for i in range(0, len(t), 7) for j in (i + 3, i + 11, len(t))])
    texts = data.draw(st.lists(st.one_of(pieces, st.text(max_size=12)), max_size=6))
    for bos in (True, False):
        assert lm.encode_batch(texts, add_bos=bos) == [lm.encode(t, add_bos=bos) for t in texts]


def _first_hit(window: StopWindow, tokens: list[int], stops: tuple[str, ...]) -> int | None:
    """The first length at which ``window`` finds a stop, feeding tokens one at a time."""
    for n in range(1, len(tokens) + 1):
        if window.hits(stops, [tokens[:n]])[0]:
            return n
    return None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_stop_is_found_at_the_token_that_completes_it(tokenizer, data) -> None:
    """Random tokens (from text, so that words, punctuation and split characters mix with random
    ids) and stops cut from their own text: the window finds each first where the whole text has it."""
    detok = Detokenizer(tokenizer)
    text_ids = tokenizer.encode(data.draw(st.sampled_from(_TEXT)), add_special_tokens=False)
    start = data.draw(st.integers(0, max(0, len(text_ids) - 8)))
    tokens = list(text_ids[start : start + data.draw(st.integers(4, 24))])
    for _ in range(data.draw(st.integers(0, 3))):
        tokens.insert(data.draw(st.integers(0, len(tokens))), data.draw(st.integers(0, len(tokenizer) - 1)))
    full = detok(tokens)
    stops = []
    for _ in range(data.draw(st.integers(1, 3))):
        a = data.draw(st.integers(0, max(0, len(full) - 1)))
        stop = full[a : a + data.draw(st.integers(1, 6))]
        if stop and "\ufffd" not in stop:
            stops.append(stop)
    if not stops:
        stops = ["\n"]
    stops = tuple(stops)
    want = next((n for n in range(1, len(tokens) + 1) if any(s in detok(tokens[:n]) for s in stops)), None)
    assert _first_hit(StopWindow(detok, detok.cleans_up_spaces), tokens, stops) == want


def test_a_stop_joined_by_a_clean_up_of_spaces_is_found(tmp_path) -> None:
    """ "do n '" then "t": the clean-up turns "do n ' t" into "don't", so "don" appears when "t"
    (which holds no "n") is added."""
    tok = _cleaned_words(tmp_path)
    detok = Detokenizer(tok)
    tokens = tok.encode("do n ' t", add_special_tokens=False)
    assert [detok(tokens[:n]) for n in (3, 4)] == ["do n '", "don't"]
    assert _first_hit(StopWindow(detok, detok.cleans_up_spaces), tokens, ("don",)) == 4


def test_a_window_starting_inside_a_character_widens_past_the_garbled_bytes(tmp_path) -> None:
    """A byte-fallback decoder shows a run of byte tokens cut inside a character as U+FFFD, one per
    byte: the window widens until the stop's text decodes."""
    tok = _sentencepiece(tmp_path)
    detok = Detokenizer(tok)
    ids = tok.encode("x 日本語", add_special_tokens=False)
    assert detok(ids[-8:]) == "\ufffd" * 8  # 本 and 語 too, though their bytes are whole
    assert _first_hit(StopWindow(detok, detok.cleans_up_spaces), ids, ("日本語",)) == len(ids)
    assert _first_hit(StopWindow(detok, detok.cleans_up_spaces), ids, ("\ufffd語",)) is None  # a stop holding U+FFFD


def test_a_row_whose_newest_token_cannot_end_a_stop_is_not_decoded(tokenizer) -> None:
    detok = Detokenizer(tokenizer)
    calls = []

    def counting(tokens: list[int]) -> str:
        calls.append(list(tokens))
        return detok(tokens)

    window = StopWindow(counting, detok.cleans_up_spaces)
    ids = tokenizer.encode("it is", add_special_tokens=False) if "it" in tokenizer.get_vocab() else [5, 6]
    window.hits(("\n",), [ids])  # decodes the newest token alone, once
    calls.clear()
    assert window.hits(("\n",), [ids]) == [False]
    assert calls == []  # its text was known and holds no newline: no window decoded
