"""A tiny random Llama with a real tokenizer, built in a second, for the transformers backend tests.

Two tokenizer styles cover the two ways tokens map to bytes: GPT-2 byte-level
BPE (SmolLM2, Qwen, Llama 3) and SentencePiece-style ``▁`` + ``<0xNN>`` byte
fallback (Llama 2, Mistral).
"""
from __future__ import annotations

import json
from pathlib import Path

CORPUS = ("The lighthouse keeper walked along the shore. The sea was grey and the wind was cold. "
          "He found a bottle with a message inside. Héllo wörld, naïve café! 1234567890 "
          "Numbers, letters, and some punctuation: ; : ? ! ( ) [ ] { } \"quotes\" 'single'.\n") * 20
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                 "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def build_tokenizer(style: str = "bytelevel", vocab_size: int = 400):
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if style == "bytelevel":
        tk = Tokenizer(models.BPE())
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tk.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tk.train_from_iterator([CORPUS], trainer)
    else:  # SentencePiece-like: ▁ marks spaces, unknown characters fall back to <0xNN> bytes
        tk = Tokenizer(models.BPE())
        tk.normalizer = normalizers.Replace(" ", "\u2581")
        tk.pre_tokenizer = pre_tokenizers.Split("\u2581", behavior="merged_with_next")
        tk.train_from_iterator([CORPUS], trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS))
        # Rebuild the model with the 256 byte tokens as ordinary vocabulary entries, as in
        # Llama 2's tokenizer (they are not added/special tokens there).
        spec = json.loads(tk.to_str())["model"]
        vocab = dict(spec["vocab"])
        for b in range(256):
            vocab.setdefault(f"<0x{b:02X}>", len(vocab))
        merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in spec["merges"]]
        tk.model = models.BPE(vocab=vocab, merges=merges, byte_fallback=True)
        tk.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                        decoders.Fuse()])
    return PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<|endoftext|>", eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", chat_template=CHAT_TEMPLATE)


def make_tiny_model(folder: Path, *, style: str = "bytelevel", seed: int = 0, layers: int = 2,
                    hidden: int = 64) -> Path:
    """Save a random tiny Llama (safetensors) and its tokenizer into ``folder``."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    tok = build_tokenizer(style)
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=512, bos_token_id=tok.bos_token_id,
                      eos_token_id=tok.eos_token_id, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():  # larger logits than the default init, so greedy choices are well separated
        model.lm_head.weight.mul_(8.0)
    model.generation_config = GenerationConfig(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    return folder
