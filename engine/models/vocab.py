"""A model's vocabulary as the draft check needs it, and whether a draft can propose for a target."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, frozen=True)
class Vocab:
    """What the draft-compatibility check needs of a model: its tokenizer kind,
    every token's text by id, and its size (a draft must be much smaller)."""
    name: str
    tokenizer_model: str
    tokens: tuple[str, ...] | list[str]
    weight_bytes: int = 0
    path: str = ""


# How many ids a draft's vocabulary may lack against the target's, as in
# llama.cpp (common/speculative.cpp, SPEC_VOCAB_MAX_SIZE_DIFFERENCE): sibling
# models pad their vocabularies to different multiples (GGUF Qwen2.5 0.5B has
# 151,936 tokens, the 7B 152,064), and the missing ids are padding rows the
# target practically never produces (ModelDraft goes plain if it does).
MAX_VOCAB_SHORTFALL = 128


def check_draft_compatible(target: Vocab, draft: Vocab) -> str | None:
    """None if the draft can propose for the target, else a one-line reason.

    Only ids matter (the draft is fed the target's tokens), so every id both
    vocabularies have must name the same token; the draft may lack up to
    ``MAX_VOCAB_SHORTFALL`` of the target's last ids, and may have more.
    """
    if target.tokenizer_model != draft.tokenizer_model:
        return (f"tokenizer types differ ({draft.tokenizer_model or 'unknown'} in the draft, "
                f"{target.tokenizer_model or 'unknown'} in the target)")
    if len(target.tokens) - len(draft.tokens) > MAX_VOCAB_SHORTFALL:
        return f"the draft knows {len(draft.tokens)} tokens but the target can produce {len(target.tokens)}"
    for i, (a, b) in enumerate(zip(target.tokens, draft.tokens)):
        if a != b:
            return f"token {i} is {b!r} in the draft but {a!r} in the target"
    return None
