"""Moving a sequence's KV into place instead of reading it again (engine/kv/shift.py), on the real
bundled model: the plans are llama-server's, and a prompt whose oldest turns were left out, moved
into place, gives the same greedy reply as llama-server's cache reuse on a plain llama.cpp context
(tests/llama_reference.py). A request that does not shift is never served moved KV.
"""
from __future__ import annotations

import numpy as np
import pytest

from engine.config import EngineConfig
from engine.engine import Engine
from engine.kv.shift import MIN_CHUNK, context_shift, reuse_moves
from engine.prompt.messages import Message
from engine.types import WANT_LAST, WANT_NONE

from llama_reference import PlainContext

SYSTEM = Message("system", "You are a helpful assistant. The secret word is PLUM.")


def chat(turns: int) -> list[Message]:
    out = [SYSTEM]
    for i in range(turns):
        out += [Message("user", f"Turn {i}: tell me a short fact about the number {i * 7}, please."),
                Message("assistant", f"The number {i * 7} is {'even' if i % 2 == 0 else 'odd'} and it follows "
                                     f"{i * 7 - 1}.")]
    return out


@pytest.fixture(scope="module")
def exact(bundled_path):
    e = Engine.open(EngineConfig(bundled_path, n_ctx=512, exactness="exact", cache_budget=0))
    yield e
    e.close()


def greedy(step, pending: list[int], n: int = 24) -> list[int]:
    out = []
    logits = step(pending)
    for _ in range(n):
        out.append(int(np.argmax(logits)))
        logits = step([out[-1]])
    return out


def test_the_plans_are_llama_servers():
    held = list(range(100))
    prompt = list(range(10)) + list(range(40, 100)) + [500, 501]  # turns 10..39 left out, two new tokens
    moves, n = reuse_moves(held, prompt, 10)
    assert moves == [(40, 10, 60)] and n == 70
    assert reuse_moves(held, list(range(10)) + list(range(40, 50)) + [7], 10) == ([], 10)  # 10 < MIN_CHUNK
    # Never the prompt's last token: its logits start the reply.
    assert reuse_moves(held, list(range(10)) + list(range(40, 60)), 10) == ([(40, 10, 19)], 29)
    assert context_shift(255, 14, 256) == (14 + 120, 14, 121) and context_shift(20, 19, 256) is None
    assert MIN_CHUNK == 16


def test_moving_kept_turns_into_place_equals_llama_servers_cache_reuse(exact):
    old, new = chat(6), [SYSTEM, *chat(6)[5:]]  # the first two turns left out
    new.append(Message("user", "And what is the secret word?"))
    a, b = exact.prompt_tokens(old), exact.prompt_tokens(new)

    def ours() -> tuple[int, list[int], int | None]:
        kv, pool = exact.kv, exact.kv.pool
        kv.reset()
        pool.batch([(0, a, WANT_NONE)])
        kv.extend(0, a)
        n = kv.place(0, b, shift=True)
        assert kv.moved[0] > 0 and kv.table.shifted[0] is not None
        shifted = kv.table.shifted[0]
        return n, greedy(lambda toks: pool.batch([(0, toks, WANT_LAST)])[0], b[n:]), shifted

    def reference() -> tuple[int, list[int]]:
        ref = PlainContext(exact.backend)
        try:
            ref.read(a)
            n = ref.cache_reuse(list(a), b, MIN_CHUNK)
            return n, greedy(ref.decode, b[n:])
        finally:
            ref.close()

    n, tokens, shifted = exact.core.call(ours)
    assert (n, tokens) == exact.core.call(reference)
    assert len(b) - n < len(b) // 3  # most of the prompt was moved, not read
    # A request that does not shift is never served the moved KV.
    assert exact.core.call(lambda: exact.kv.place(0, b)) <= shifted
