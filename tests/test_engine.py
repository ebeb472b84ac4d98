"""Integration tests of the decode loop on the real bundled model."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from engine.engine import Engine
from engine.config import EngineConfig
from engine.errors import PromptTooLongError
from engine.prompt.messages import Message
from engine.types import SamplingParams

GREEDY = SamplingParams(temperature=0.0, max_tokens=40)
Q = [Message("user", "Name three colours of the rainbow.")]


def collect(events):
    deltas, final = [], None
    for ev in events:
        if ev.kind == "delta":
            deltas.append(ev.text)
        else:
            final = ev
    return deltas, final


def test_greedy_stream_is_deterministic_and_consistent(engine):
    engine.reset()
    d1, f1 = collect(engine.stream(Q, GREEDY))
    engine.reset()
    d2, f2 = collect(engine.stream(Q, GREEDY))
    assert "".join(d1) == f1.text == f2.text
    assert f1.token_ids == f2.token_ids
    assert f1.text.strip()
    st = f1.stats
    assert st.prompt_tokens == len(engine.prompt_tokens(Q))
    assert st.generated_tokens == len(f1.token_ids) <= GREEDY.max_tokens
    assert st.finish_reason in ("eos", "max_tokens")
    assert 0 < st.ttft_ms <= st.e2e_ms
    assert st.prefill_ms > 0 and st.decode_tok_s > 0
    assert st.tpot_ms == pytest.approx(1000 / st.decode_tok_s)


def test_finishes_on_eos(engine):
    engine.reset()
    _, f = collect(engine.stream([Message("user", "Say hi.")], SamplingParams(temperature=0, max_tokens=200)))
    assert f.finish_reason == "eos"
    assert f.token_ids[-1] in engine.backend.eos_ids
    assert "<|im_end|>" not in f.text


def test_max_tokens(engine):
    _, f = collect(engine.stream(Q, SamplingParams(temperature=0, max_tokens=5, ignore_eos=True)))
    assert f.finish_reason == "max_tokens" and f.stats.generated_tokens == 5


def test_a_reply_has_no_length_cap_by_default(bundled_path):
    # The peers' default (Ollama's num_predict -1, llama-server's n_predict -1): a reply ends when the model
    # ends it or the context is full, never at 512 tokens as Hearth's did.
    e = Engine.open(EngineConfig(bundled_path, n_ctx=640, n_threads=2))
    try:
        params = SamplingParams(temperature=0, ignore_eos=True)
        assert params.max_tokens is None
        n_prompt = len(e.prompt_tokens(Q))
        _, f = collect(e.stream(Q, params))
        # With no max_tokens it ends when the context is full rather than leave its own question out (under the
        # default policy; decode/room.py), one slot short of the end as llama-server's context check leaves it.
        assert f.finish_reason == "context_full"
        assert f.stats.generated_tokens > 512 and n_prompt + f.stats.generated_tokens == e.backend.n_ctx
    finally:
        e.close()


def test_stop_string_truncates_before_it(engine):
    engine.reset()
    _, full = collect(engine.stream(Q, GREEDY))
    words = full.text.split()
    assert len(words) > 4
    stop = words[3]
    expected = full.text[:full.text.index(stop)]
    d, f = collect(engine.stream(Q, SamplingParams(temperature=0, max_tokens=40, stop=(stop,))))
    assert f.finish_reason == "stop_string"
    assert "".join(d) == f.text == expected


def test_cancel_stops_within_one_step_and_engine_is_reusable(engine):
    engine.reset()
    _, ref = collect(engine.stream(Q, GREEDY))
    cancel = threading.Event()
    seen = 0
    texts = []
    events = engine.stream(Q, SamplingParams(temperature=0, max_tokens=200, ignore_eos=True), cancel=cancel)
    final = None
    for ev in events:
        if ev.kind == "delta":
            seen += 1
            texts.append(ev.text)
            if seen == 3:
                cancel.set()
                at_cancel = seen
        else:
            final = ev
    assert final.finish_reason == "cancelled"
    # The engine core steps on its own thread, one step ahead of the reader: a token it had handed on
    # before Stop may still come (never one of the step in flight: the next test), and nothing after it.
    assert seen - at_cancel <= 1
    assert final.text == "".join(texts)
    # Used again at once, and the partial reply left no stale state behind.
    _, again = collect(engine.stream(Q, GREEDY))
    assert again.text == ref.text


@pytest.mark.parametrize("draft", [None, "ngram"])
def test_stop_during_a_step_hands_on_nothing_that_step_computed(bundled_path, draft):
    """Stop pressed while llama.cpp computes a step: the reply ends with what it had before that step.
    Before, the step's token came out after Stop, and with speculation a whole verified draft did."""
    e = Engine.open(EngineConfig(bundled_path, n_ctx=1024, n_threads=2))
    try:
        if draft:  # forced: drafts every round, never switched off for being slower on this machine
            e.set_speculation(draft, k=4, force=True)
        words = "the cat sat on the mat and the dog lay on the rug " * 4
        q = [Message("user", f"Repeat this exactly: {words}")]
        prompt_len = len(e.prompt_tokens(q))
        short = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
        _, ref = collect(e.stream(q, short))
        cancel = threading.Event()
        pool, real = e.kv.pool, e.kv.pool.batch
        before: list[int] = []

        def batch(rows):
            ((seq, tokens, _want),) = rows
            held = pool.seq_len(seq)
            out = real(rows)
            # The first step after the prompt's that feeds several tokens (a draft to verify), or the
            # fourth decode step without speculation: Stop comes while it runs.
            if not cancel.is_set() and held >= prompt_len and (len(tokens) > 1 if draft else held == prompt_len + 3):
                before.append(held - prompt_len + 1)  # tokens the reply had made: the last is fed in this step
                cancel.set()
            return out

        pool.batch = batch
        _, final = collect(e.stream(q, SamplingParams(temperature=0, max_tokens=120, ignore_eos=True), cancel=cancel))
        assert before, "no step of the kind looked for ran"
        assert final.finish_reason == "cancelled"
        assert final.stats.generated_tokens == len(final.token_ids) == before[0]
        assert ref.token_ids[:before[0]] == final.token_ids
        # What the stopped step left in the KV (its token, a draft not verified) misleads no later reply.
        pool.batch = real
        _, again = collect(e.stream(q, short))
        assert again.token_ids == ref.token_ids
    finally:
        e.close()


def test_abandoned_generator_leaves_engine_consistent(engine):
    engine.reset()
    _, ref = collect(engine.stream(Q, GREEDY))
    it = engine.stream(Q, SamplingParams(temperature=0, max_tokens=100))
    next(it)
    it.close()  # e.g. the consumer raised
    _, again = collect(engine.stream(Q, GREEDY))
    assert again.text == ref.text


def test_second_turn_reuses_kv_and_matches_fresh(engine):
    engine.reset()
    _, t1 = collect(engine.stream(Q, GREEDY))
    turn2 = Q + [Message("assistant", t1.text), Message("user", "And two more?")]
    _, warm = collect(engine.stream(turn2, GREEDY))
    assert warm.stats.cached_tokens >= len(engine.prompt_tokens(Q))
    assert warm.stats.prefill_tokens == warm.stats.prompt_tokens - warm.stats.cached_tokens
    engine.reset()
    _, cold = collect(engine.stream(turn2, GREEDY))
    assert cold.stats.cached_tokens == 0
    assert warm.token_ids == cold.token_ids


def test_seeded_sampling_is_reproducible(engine):
    p = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=1234, max_tokens=24, ignore_eos=True)
    _, a = collect(engine.stream(Q, p))
    _, b = collect(engine.stream(Q, p))
    assert a.token_ids == b.token_ids
    others = {tuple(collect(engine.stream(Q, SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0,
                                                             seed=s, max_tokens=24, ignore_eos=True)))[1].token_ids)
              for s in (1, 2, 3)}
    assert len(others | {tuple(a.token_ids)}) > 1


def test_context_full_is_a_finish_reason_not_a_crash(bundled_path):
    e = Engine.open(EngineConfig(bundled_path, n_ctx=256, n_threads=2))
    try:
        assert e.backend.n_ctx == 256
        n_prompt = len(e.prompt_tokens(Q))
        # "stop": a reply that fills the context ends there (the other policies go on: test_context_shift.py).
        _, f = collect(e.stream(Q, SamplingParams(temperature=0, max_tokens=500, ignore_eos=True),
                                context_policy="stop"))
        assert f.finish_reason == "context_full"
        # Every slot used: the last sampled token is the one that no longer fits.
        assert n_prompt + f.stats.generated_tokens - 1 == 256
        _, again = collect(e.stream([Message("user", "Hi")], SamplingParams(temperature=0, max_tokens=4)))
        assert again.stats.generated_tokens >= 1
    finally:
        e.close()


def test_prompt_longer_than_context(bundled_path):
    e = Engine.open(EngineConfig(bundled_path, n_ctx=256, n_threads=2))
    try:
        with pytest.raises(PromptTooLongError, match="context holds 256"):
            list(e.stream([Message("user", "word " * 300)], GREEDY))
        _, f = collect(e.stream([Message("user", "Hi")], SamplingParams(temperature=0, max_tokens=3)))
        assert f.stats.generated_tokens >= 1
    finally:
        e.close()


# -- backend invariants --------------------------------------------------------

def test_truncate_then_forward_equals_fresh_run(llama_backend):
    b = llama_backend
    a = b.tokenize("The quick brown fox jumps over the lazy dog.")
    x = b.tokenize(" A second sentence here.")
    y = b.tokenize(" Something different entirely.")
    b.truncate(0)
    b.forward(a + x)
    b.truncate(len(a))
    assert b.kv_len == len(a)
    got = b.forward(y).copy()
    b.truncate(0)
    want = b.forward(a + y).copy()
    assert np.array_equal(got, want)


def test_snapshot_restore_equals_fresh_run(llama_backend):
    b = llama_backend
    a = b.tokenize("System: you are helpful.")
    x = b.tokenize(" User: hello there")
    b.truncate(0)
    b.forward(a)
    snap = b.snapshot()
    assert b.nbytes(snap) > 0
    b.forward(b.tokenize(" unrelated tokens that pollute the cache"))
    b.restore(snap)
    assert b.kv_len == len(a)
    got = b.forward(x).copy()
    b.truncate(0)
    want = b.forward(a + x).copy()
    assert np.array_equal(got, want)


def test_all_logits_rows_match_stepwise(llama_backend):
    b = llama_backend
    toks = b.tokenize("One two three four five")
    b.truncate(0)
    rows = b.forward(toks, all_logits=True)
    assert rows.shape == (len(toks), b.n_vocab)
    b.truncate(0)
    step = np.stack([b.forward([t]).copy() for t in toks])
    # Bit-identical, not just close: the prefix cache and speculative decoding
    # promise the same tokens as plain decoding, which needs batch invariance
    # (flash attention and tinyBLAS off on the CPU in the exact profile; see scripts/runtimes.py).
    assert np.array_equal(rows, step)


def test_kquant_batches_are_bit_identical_to_single_steps(kquant_path):
    """Q4_K/Q6_K weights: the repacked CPU kernels made a token's logits depend on
    its place in a batch (0.9 logit here); Hearth loads without them by default."""
    from engine.backends.llama.backend import LlamaCppBackend
    from engine.models.gguf import model_info

    assert {"Q4_K", "Q6_K"} <= set(model_info(kquant_path).tensor_types)
    b = LlamaCppBackend(kquant_path, n_ctx=256, n_threads=2)
    try:
        assert b.repack is False and b.state_identity()["repack"] == "False"
        assert b.state_identity()["tiled_mm"] == "0"  # the exact profile: the tiled matmul held off (ExactKernels)
        toks = b.tokenize("def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1)"
                          " + fibonacci(n - 2)\n\nprint([fibonacci(i) for i in range(10)])", add_bos=True)
        assert len(toks) > 24
        whole = b.forward(toks, all_logits=True).copy()  # one batch of 8+ rows (ggml's tiled size)
        b.truncate(0)
        b.forward(toks[:-6])
        batch = b.forward(toks[-6:], all_logits=True).copy()  # a verification-sized batch
        b.truncate(len(toks) - 6)
        step = np.stack([b.forward([t]).copy() for t in toks[-6:]])  # plain decoding
        assert np.array_equal(batch, step)
        assert np.array_equal(whole[-6:], step)
    finally:
        b.close()


def test_chunked_prefill_is_bit_identical(llama_backend):
    b = llama_backend
    toks = b.tokenize("The history of the rainbow is long and colourful. " * 12)
    b.truncate(0)
    whole = b.forward(toks, all_logits=True)
    b.truncate(0)
    parts = np.concatenate([b.forward(toks[:7], all_logits=True), b.forward(toks[7:50], all_logits=True),
                            b.forward(toks[50:], all_logits=True)])
    assert np.array_equal(whole, parts)


def test_memory_report_has_real_buffers(llama_backend):
    rep = llama_backend.memory_report()
    assert rep["weights"] > 50 * 2**20
    assert rep["kv"] > 0 and rep["compute"] > 0


def test_gguf_path_never_imports_torch_or_transformers(bundled_path):
    import subprocess
    import sys

    code = ("import sys\nfrom engine import Engine, EngineConfig, Message, SamplingParams\n"
            "e = Engine.open(EngineConfig(n_ctx=256))\n"
            "list(e.stream([Message('user', 'Hi')], SamplingParams(temperature=0, max_tokens=2)))\n"
            "bad = [m for m in ('torch', 'transformers', 'accelerate', 'bitsandbytes') if m in sys.modules]\n"
            "print('HEAVY', bad)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "HEAVY []" in r.stdout


def test_installed_llama_cpp_survives_the_multi_token_probe(bundled_path):
    # The same probe set-up runs: a native AMX build segfaults here.
    import subprocess
    import sys
    from pathlib import Path

    probe = Path(__file__).parent.parent / "scripts" / "probe_llama.py"
    r = subprocess.run([sys.executable, str(probe), str(bundled_path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "AMX" not in r.stdout
    assert "LLAMAFILE = 1" in r.stdout  # tinyBLAS compiled in, behind the exact profile's switch (test_tinyblas)


def test_missing_transformers_backend_is_a_clear_error(bundled_path):
    import subprocess
    import sys

    # Simulate the GGUF-only install: make `import torch` fail in a child process.
    code = ("import sys\nsys.modules['torch'] = None\n"
            "from engine import Engine, EngineConfig, HearthError\n"
            "try:\n    Engine.open(EngineConfig(backend='hf'))\nexcept HearthError as e:\n    print('ERR', e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "ERR the transformers backend is not installed" in r.stdout and "setup.py --hf" in r.stdout
    # Inside a (lite) PyInstaller bundle there is no setup.py to run: say which bundle to get.
    r = subprocess.run([sys.executable, "-c", "import sys\nsys.frozen = True\n" + code], capture_output=True,
                       text=True, timeout=120)
    assert "lite flavour" in r.stdout and "setup.py" not in r.stdout
