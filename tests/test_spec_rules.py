"""Speculative decoding on tiny, fully specified models: the accept rules,
exactness (greedy equality, chi-square against the target's distribution),
the draft sources and the draft-compatibility check."""
from __future__ import annotations

import numpy as np
import pytest

from engine.engine import Engine
from engine.config import EngineConfig
from engine.models.gguf import model_info
from engine.decode.generate import drive
from engine.decode.sampling import make_sampler
from engine.speculative.accept import accept_greedy, accept_sampled
from engine.speculative.controller import SpecController, SpecStats
from engine.speculative.drafts import ModelDraft, NgramDraft
from engine.models.vocab import check_draft_compatible
from engine.speculative.step import speculative_step
from engine.types import SamplingParams
from engine.models.vocab import Vocab
from gguf_writer import write_gguf
from tiny_backend import TinyBackend

# -- the pure accept rule ------------------------------------------------------------


def test_accept_greedy():
    assert accept_greedy([5, 6, 7], [5, 6, 7, 8]) == (3, 8)      # all accepted + bonus
    assert accept_greedy([5, 6, 7], [5, 9, 7, 8]) == (1, 9)      # correction at position 1
    assert accept_greedy([5], [4, 0]) == (0, 4)
    assert accept_greedy([], [3]) == (0, 3)


def test_accept_sampled_residual_and_bonus():
    p = [np.array([0.5, 0.5, 0.0]), np.array([0.0, 0.0, 1.0])]
    q = [np.array([0.0, 1.0, 0.0])]
    # u < p/q = 0.5 accepts token 1, then the bonus is drawn from p[1].
    n, t = accept_sampled([1], q, lambda i: p[i], lambda: 0.4, lambda w: int(np.argmax(w)))
    assert (n, t) == (1, 2)
    # u >= 0.5 rejects; the residual max(0, p - q) = [0.5, 0, 0] can only give token 0.
    n, t = accept_sampled([1], q, lambda i: p[i], lambda: 0.6, lambda w: int(np.argmax(w)))
    assert (n, t) == (0, 0)
    # A deterministic draft (q one-hot): rejection removes the drafted token.
    n, t = accept_sampled([0], [None], lambda i: np.array([0.3, 0.7]), lambda: 0.9, lambda w: int(np.argmax(w)))
    assert (n, t) == (0, 1)


def _run_first_tokens(target, draft, sampler, prompt, k, n_out):
    target.truncate(0)
    if isinstance(draft, ModelDraft):
        draft.reset()
        draft.backend.truncate(0)
        drafts = {"model": draft}
        ctl = SpecController(["model"], k_fixed=k)
    else:
        drafts = {"ngram": draft}
        ctl = SpecController(["ngram"], k_fixed=k)
    history = list(prompt)
    gen = drive(target, speculative_step(target, drafts, ctl, list(prompt), sampler, history, SpecStats()))
    out = [next(gen)[0] for _ in range(n_out)]
    gen.close()
    return out


def _assert_exact_first_two(target, draft, prompt, params, n, k=2):
    """The empirical joint distribution of the first two tokens over ``n`` seeds
    equals the target's exact one (chi-square), and no token the target's
    filters removed is ever produced."""
    v = target.n_vocab
    ref = make_sampler(SamplingParams(**params))
    p1 = ref.distribution(prompt, target.logits_after(prompt))
    exact = np.array([p1[a] * ref.distribution(prompt + [a], target.logits_after(prompt + [a]))
                      for a in range(v)])
    counts = np.zeros((v, v))
    for seed in range(n):
        s = make_sampler(SamplingParams(seed=seed, **params))
        a, b = _run_first_tokens(target, draft, s, prompt, k=k, n_out=2)
        counts[a, b] += 1
    expected = exact * n
    mask = expected > 5
    chi2 = float((((counts - expected) ** 2)[mask] / expected[mask]).sum())
    dof = int(mask.sum()) - 1
    # 99.9th percentile of chi-square for dof up to 35 is below 2 * dof + 10.
    assert chi2 < 2 * dof + 10, (chi2, dof)
    assert counts[~mask].sum() <= max(20, 0.01 * n)
    assert counts[exact == 0].sum() == 0


def test_sampling_is_exact_chi_square():
    """Empirical joint distribution of the first two tokens equals the target's
    exact distribution, with a draft whose distributions differ."""
    target = TinyBackend(n_vocab=6, seed=1, sharpness=1.2)
    draft = ModelDraft(TinyBackend(n_vocab=6, seed=2, sharpness=1.2), n_vocab_target=6)
    prompt = [1, 2, 3]
    params = dict(temperature=0.9, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.3, penalty_last_n=8)
    ref = make_sampler(SamplingParams(**params))
    p1 = ref.distribution(prompt, target.logits_after(prompt))
    q1 = ref.distribution(prompt, draft.backend.logits_after(prompt))
    assert np.abs(q1 - p1).max() > 0.1  # the draft really is different
    _assert_exact_first_two(target, draft, prompt, params, n=12000)


FILTERED = dict(temperature=0.9, top_k=4, top_p=0.8, min_p=0.0)


def test_sampling_is_exact_with_top_k_and_top_p():
    target = TinyBackend(n_vocab=6, seed=1, sharpness=1.2)
    draft = ModelDraft(TinyBackend(n_vocab=6, seed=2, sharpness=1.2), n_vocab_target=6)
    ref = make_sampler(SamplingParams(**FILTERED))
    p1 = ref.distribution([1, 2, 3], target.logits_after([1, 2, 3]))
    q1 = ref.distribution([1, 2, 3], draft.backend.logits_after([1, 2, 3]))
    assert 0 < (p1 > 0).sum() < 4  # top-p cuts inside top-k
    assert ((q1 > 0) & (p1 == 0)).any()  # the draft proposes tokens the target's filters removed
    _assert_exact_first_two(target, draft, [1, 2, 3], FILTERED, n=4000)


@pytest.mark.parametrize("params", [dict(temperature=0.9, top_k=0, top_p=1.0, min_p=0.0), FILTERED],
                         ids=["no-filters", "top-k-top-p"])
def test_ngram_draft_samples_exactly(params):
    # A deterministic draft (q one-hot): rejection sampling must still give p exactly.
    target = TinyBackend(n_vocab=6, seed=1, sharpness=1.2)
    prompt = [1, 2, 3, 4, 1, 2]
    assert NgramDraft().propose(prompt, 2, None)[0] == [3, 4]  # the first round drafts
    p1 = make_sampler(SamplingParams(**params)).distribution(prompt, target.logits_after(prompt))
    assert 0.2 < p1[3] < 0.8  # ... a token the target sometimes takes and sometimes rejects
    _assert_exact_first_two(target, NgramDraft(), prompt, params, n=4000)


def test_a_narrower_draft_samples_exactly():
    # The draft's output layer lacks the target's last id (HF Qwen2.5 0.5B has
    # 151,936 logits, the 7B 152,064): its distribution is padded with zeros,
    # and a round after the target produced that id goes plain.
    target = TinyBackend(n_vocab=6, seed=1, sharpness=1.2)
    draft = ModelDraft(TinyBackend(n_vocab=5, seed=2, sharpness=1.2), n_vocab_target=6)
    params = dict(temperature=0.9, top_k=0, top_p=1.0, min_p=0.0)
    p1 = make_sampler(SamplingParams(**params)).distribution([1, 2, 3], target.logits_after([1, 2, 3]))
    assert p1[5] > 0.05  # the target really produces the id the draft lacks
    _assert_exact_first_two(target, draft, [1, 2, 3], params, n=4000)


def test_model_draft_pads_its_distribution_and_skips_ids_it_lacks():
    draft = ModelDraft(TinyBackend(n_vocab=5, seed=2), n_vocab_target=6)
    s = make_sampler(SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=0))

    def pick(ctx, logits):
        q = s.distribution(ctx, logits)
        return s.sample(q), q

    toks, q = draft.propose([1, 2, 3], 3, pick)
    assert len(toks) == 3 and all(d.shape == (6,) and d[5] == 0.0 and abs(d.sum() - 1) < 1e-9 for d in q)
    calls = draft.backend.forward_calls
    assert draft.propose([1, 2, 3, 5], 3, pick) == ([], [])
    assert draft.backend.forward_calls == calls


def test_greedy_identical_with_a_narrower_draft():
    target = TinyBackend(n_vocab=12, seed=3, n_ctx=80, sharpness=2.0)
    draft = ModelDraft(TinyBackend(n_vocab=10, seed=3, n_ctx=80, sharpness=2.0), n_vocab_target=12)
    prompt = [1, 5, 7, 2]
    greedy = make_sampler(SamplingParams(temperature=0.0))
    plain, h = [], list(prompt)
    target.truncate(0)
    logits = target.forward(prompt)
    while True:
        t = greedy(h, logits)
        plain.append(t)
        h.append(t)
        if target.kv_len >= target.n_ctx:
            break
        logits = target.forward([t])
    assert max(plain) >= 10  # the target does produce ids the draft lacks
    assert _run_first_tokens(target, draft, greedy, prompt, k=3, n_out=len(plain)) == plain


@pytest.mark.parametrize("k", range(1, 9))
def test_greedy_identical_on_tiny_models_until_context_fills(k):
    target = TinyBackend(n_vocab=12, seed=3, n_ctx=80, sharpness=2.0)
    draft = ModelDraft(TinyBackend(n_vocab=12, seed=4, n_ctx=80, sharpness=2.0), n_vocab_target=12)
    prompt = [1, 5, 7, 2]
    greedy = make_sampler(SamplingParams(temperature=0.0))
    plain, h = [], list(prompt)
    target.truncate(0)
    logits = target.forward(prompt)
    while True:
        t = greedy(h, logits)
        plain.append(t)
        h.append(t)
        if target.kv_len >= target.n_ctx:
            break
        logits = target.forward([t])
    spec = _run_first_tokens(target, draft, greedy, prompt, k=k, n_out=len(plain))
    assert spec == plain
    assert target.kv_len <= target.n_ctx


def test_ngram_draft_proposes_earlier_continuation():
    d = NgramDraft(max_n=3, min_n=2)
    hist = [1, 2, 3, 4, 5, 9, 9, 2, 3]
    toks, q = d.propose(hist, 3, None)
    assert toks == [4, 5, 9] and q == [None] * 3
    assert d.propose([7, 8, 9], 3, None) == ([], [])


def test_ngram_draft_copies_from_the_longest_match_not_the_latest_coincidence():
    # The reply copies a passage (11 12 13 ... 19 then 20 21); the pair (4, 5) it
    # now ends with also occurs later, by chance, followed by 99. The 2-gram alone
    # would copy 99; the 9-token match finds the passage and its continuation.
    passage = [11, 12, 13, 14, 15, 16, 17, 4, 5]
    hist = passage + [20, 21, 22] + [7, 4, 5, 99, 98] + passage
    d = NgramDraft()
    toks, _ = d.propose(hist, 3, None)
    assert toks == [20, 21, 22] and d.matched == 8  # the longest indexed size (9 tokens match)
    toks, _ = NgramDraft(max_n=2).propose(hist, 3, None)
    assert toks == [99, 98, 11]  # the latest occurrence of the pair
    # The index follows a history that grows, and starts over for a new one.
    assert d.propose(hist + [20], 2, None)[0] == [21, 22] and d.matched >= 8
    assert d.propose([1, 2, 3, 1, 2], 2, None)[0] == [3, 1] and d.matched == 2
    # Indexing a new reply's history is a one-off catch-up, reported apart from the rounds
    long = list(range(3000)) + [5, 6]
    d = NgramDraft()
    assert d.propose(long, 2, None)[0] == [7, 8] and d.catchup_s > 0
    assert d.propose(long + [7], 2, None)[0] == [8, 9] and d.catchup_s == 0.0


def test_compatibility_is_checked_on_vocabularies(tmp_path, bundled_path):
    def header(name, tokens):
        return model_info(write_gguf(tmp_path / name, {"general.architecture": "llama",
                                                       "tokenizer.ggml.model": "gpt2",
                                                       "tokenizer.ggml.tokens": tokens})).vocab()

    a = header("a.gguf", ["x", "y", "z"])
    b = header("b.gguf", ["x", "Y", "z", "w"])
    c = header("c.gguf", ["x", "y", "z", "extra"])
    assert check_draft_compatible(a, b) == "token 1 is 'Y' in the draft but 'y' in the target"
    assert check_draft_compatible(a, c) is None
    assert check_draft_compatible(c, a) is None  # one id short: allowed, see below
    # A real mismatch through the engine: a clear message, not a crash.
    e = Engine.open(EngineConfig(bundled_path, n_ctx=256, n_threads=2))
    try:
        with pytest.raises(Exception, match="cannot draft for .*token 0"):
            e.set_speculation(str(write_gguf(tmp_path / "d.gguf", {
                "general.architecture": "llama", "tokenizer.ggml.model": "gpt2",
                "tokenizer.ggml.tokens": ["nope"] * 49152})))
    finally:
        e.close()


def test_a_draft_may_lack_up_to_128_of_the_target_ids_as_in_llama_cpp():
    # Sibling models pad their vocabularies differently: GGUF Qwen2.5 0.5B has
    # 151,936 tokens, the 7B 152,064. llama.cpp accepts such pairs when every
    # shared id matches and the sizes differ by at most 128.
    def vocab(n, name="m", **changed):
        toks = [f"t{i}" for i in range(n)]
        for i, t in changed.items():
            toks[int(i[1:])] = t
        return Vocab(name=name, tokenizer_model="gpt2", tokens=toks)

    target = vocab(1000, "target")
    assert check_draft_compatible(target, vocab(900)) is None
    assert check_draft_compatible(target, vocab(872)) is None    # exactly 128 short
    assert check_draft_compatible(target, vocab(1100)) is None   # a bigger draft is cut to the target's ids
    assert check_draft_compatible(target, vocab(871)) == "the draft knows 871 tokens but the target can produce 1000"
    assert check_draft_compatible(target, vocab(900, i5="five")) == \
        "token 5 is 'five' in the draft but 't5' in the target"
    assert check_draft_compatible(target, vocab(1100, i999="x")) == \
        "token 999 is 'x' in the draft but 't999' in the target"
    other = Vocab(name="d", tokenizer_model="llama", tokens=target.tokens)
    assert check_draft_compatible(target, other) == "tokenizer types differ (llama in the draft, gpt2 in the target)"
