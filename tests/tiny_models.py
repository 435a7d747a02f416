"""Tiny random checkpoints of each supported architecture with a real tokenizer, saved by transformers."""

from __future__ import annotations

from pathlib import Path

import torch

ARCHS = ("llama", "mistral", "qwen2", "qwen3")
_CORPUS = [
    "Use 4 5 6 10 to make 24. 10 - 4 = 6 (left: 5 6 6)",
    "the quick brown fox jumps over the lazy dog",
    "Tree of thoughts search expands many branches at once.",
    "value: sure likely impossible. answer: (10 - 4) * 5 - 6 = 24",
    "0 1 2 3 4 5 6 7 8 9 + - * / ( ) = \n",
]


def make_tokenizer(path: Path):
    """A small byte-level BPE tokenizer (real `tokenizers` model) with BOS/EOS, saved to ``path``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<pad>", "<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(_CORPUS * 4, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    fast.save_pretrained(path)
    return fast


def make_model(path: Path, arch: str, *, tie: bool = False, seed: int = 0, **overrides) -> Path:
    """A random tiny checkpoint of ``arch`` plus tokenizer in ``path``, float32, saved by transformers."""
    import transformers

    tok = make_tokenizer(path)
    common = dict(
        # Qwen's tokenizer class adds <|endoftext|> after the trained vocabulary: the model has a row for it.
        vocab_size=len(tok) + (1 if arch.startswith("qwen") else 0),
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=tie,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    common.update(overrides)
    if arch == "llama":
        cfg = transformers.LlamaConfig(
            rope_scaling={
                "rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
            **common,
        )
        cls = transformers.LlamaForCausalLM
    elif arch == "mistral":
        cfg, cls = transformers.MistralConfig(sliding_window=None, **common), transformers.MistralForCausalLM
    elif arch == "qwen2":
        cfg, cls = transformers.Qwen2Config(**common), transformers.Qwen2ForCausalLM
    elif arch == "qwen3":
        cfg, cls = transformers.Qwen3Config(**{"head_dim": 16, **common}), transformers.Qwen3ForCausalLM
    else:
        raise ValueError(arch)
    torch.manual_seed(seed)
    model = cls(cfg).eval()
    with torch.no_grad():  # random init leaves norms at 1 and biases at 0: perturb so they matter
        for name, p in model.named_parameters():
            if "norm" in name or "bias" in name:
                p.add_(torch.randn_like(p) * 0.2)
    model.save_pretrained(path)
    return path




def prefill_on_pytorch(lm, tree, nodes=None) -> None:
    """Store the KV of these nodes' paths (every live node's when None) through the PyTorch layers
    and the reference attention, whatever path ``lm`` is set to take: a prefix that a test needs
    stored but does not check, at a fraction of the Triton interpreter's time on the CPU."""
    fused, attention = lm.model.fused, lm.engine.attention
    lm.model.fused, lm.engine.attention = False, "reference"
    try:
        tree.materialize(nodes)
    finally:
        lm.model.fused, lm.engine.attention = fused, attention
