"""Tokens as the shared loop needs them: the bytes each id prints (byte-level BPE,
SentencePiece byte fallback, or the tokenizer's own decode), the chat template,
and every id that ends a turn."""
from __future__ import annotations

import json
import re
from typing import Any

_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")
END_OF_TURN = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|eot|>", "<|endoftext|>")


def byte_decoder() -> dict[str, int]:
    """GPT-2's printable-character alias for each byte, inverted."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def decoder_kind(tok: Any) -> str:
    """'bytelevel', 'spm' (▁ for space + <0xNN> byte fallback) or 'other', from the tokenizer's decoder."""
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is None:  # a slow SentencePiece tokenizer
        spm = getattr(tok, "sp_model", None) is not None or "▁" in "".join(list(tok.get_vocab())[:2000])
        return "spm" if spm else "other"
    dec = json.loads(backend.to_str()).get("decoder") or {}
    text = json.dumps(dec)
    if '"ByteLevel"' in text:
        return "bytelevel"
    if "ByteFallback" in text or "Metaspace" in text or "\u2581" in text or "\\u2581" in text:
        return "spm"
    return "other"


def control_ids(tok: Any) -> set[int]:
    """Ids of special tokens: they steer the model and print nothing."""
    control = {i for i, t in tok.added_tokens_decoder.items() if t.special}
    control.update(tok.all_special_ids)
    return control


def chat_template(tok: Any) -> str | None:
    """The tokenizer's chat template; of several named ones, the default."""
    tmpl = tok.chat_template
    if isinstance(tmpl, dict):  # several named templates: the default one drives chat
        tmpl = tmpl.get("default") or next(iter(tmpl.values()), None)
    return tmpl


def end_ids(model: Any, tok: Any, template: str | None, control: set[int]) -> frozenset[int]:
    """Every id that ends generation: generation_config's and the tokenizer's EOS, and
    the end-of-turn tokens the chat template writes."""
    eos: set[int] = set()
    gen = getattr(model, "generation_config", None)
    for src in (getattr(gen, "eos_token_id", None), tok.eos_token_id):
        if isinstance(src, int):
            eos.add(src)
        elif src:
            eos.update(int(x) for x in src)
    # End-of-turn tokens the template writes also end generation (llama.cpp
    # marks the same ones end-of-generation), even where generation_config
    # names only the base model's end-of-text.
    for text in END_OF_TURN:
        tid = tok.convert_tokens_to_ids(text)
        if template and text in template and isinstance(tid, int) and tid in control:
            eos.add(tid)
    return frozenset(eos)


class TokenBytes:
    """The raw bytes each token id contributes to the output, worked out once per id."""

    def __init__(self, tok: Any, n_ids: int) -> None:
        self.tok = tok
        self.kind = decoder_kind(tok)
        self.control = control_ids(tok)
        self._byte_dec = byte_decoder() if self.kind == "bytelevel" else {}
        self._pieces: list[bytes | None] = [None] * n_ids

    def get(self, token_id: int) -> bytes:
        """The bytes of ``token_id`` (b"" for control tokens and padding rows)."""
        piece = self._pieces[token_id] if token_id < len(self._pieces) else None
        if piece is None:
            piece = self._piece(token_id)
            if token_id < len(self._pieces):
                self._pieces[token_id] = piece
        return piece

    def _piece(self, tid: int) -> bytes:
        if tid in self.control:
            return b""
        text = self.tok.convert_ids_to_tokens(tid)
        if text is None:  # padding rows of the output layer beyond the vocabulary
            return b""
        added = self.tok.added_tokens_decoder.get(tid)
        if added is not None:  # added tokens are stored as plain text, not byte-encoded
            return added.content.encode("utf-8")
        if self.kind == "bytelevel":
            try:
                return bytes(self._byte_dec[c] for c in text)
            except KeyError:
                return text.encode("utf-8")
        if self.kind == "spm":
            m = _BYTE_TOKEN.fullmatch(text)
            if m:
                return bytes([int(m.group(1), 16)])
            return text.replace("\u2581", " ").encode("utf-8")
        return self.tok.decode([tid], skip_special_tokens=False, clean_up_tokenization_spaces=False).encode("utf-8")
