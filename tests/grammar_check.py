"""Whether a GBNF grammar accepts a text, asked of llama.cpp's own grammar sampler (the one the engine
constrains replies with), over a real model's vocabulary: each token of the text must survive the
mask, and at the end the grammar must allow the end of generation."""
from __future__ import annotations

from engine.reply_formats.json_grammar import BASE, Grammar


def accepts(backend, gbnf: str, text: str) -> bool:
    g = backend.grammar(gbnf)
    try:
        for t in backend.tokenize(text, special=False):
            if not g.takes(t):
                return False
            g.accept(t)
        return g.takes(min(backend.eos_ids))
    finally:
        g.close()


def value_grammar(schema) -> tuple[str, Grammar]:
    """A grammar whose root is one JSON value of ``schema`` (and the Grammar, for its notes)."""
    g = Grammar()
    root = g.value(schema, "v")
    return g.text(root), g


__all__ = ["BASE", "accepts", "value_grammar"]
