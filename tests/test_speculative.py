"""Speculative decoding: the accept rule, exactness, rollback and stops."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from engine.engine import Engine
from engine.models.gguf import model_info
from engine.sampling import make_sampler
from engine.spec.accept import accept_greedy, accept_sampled
from engine.spec.controller import SpecController, SpecStats, model_draft_ceiling
from engine.spec.drafts import ModelDraft, NgramDraft, check_draft_compatible
from engine.spec.step import speculative_step
from engine.types import Message, SamplingParams, Vocab
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
    gen = speculative_step(target, drafts, ctl, list(prompt), sampler, history, SpecStats())
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
    e = Engine.load(bundled_path, n_ctx=256, n_threads=2)
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


# -- the real bundled model ----------------------------------------------------------

Q = [Message("user", "List the days of the week, then list them again in reverse order.")]


def collect(engine, params, messages=Q, cancel=None, on_delta=None):
    deltas = []
    for ev in engine.stream(messages, params, cancel=cancel):
        if ev.kind == "delta":
            deltas.append(ev.text)
            if on_delta:
                on_delta(len(deltas))
        else:
            return deltas, ev


@pytest.fixture(scope="module")
def pair(bundled_path):
    """The bundled model drafting for itself (every draft accepted) in a small
    context that fills up, plus a plain reference engine."""
    plain = Engine.load(bundled_path, n_ctx=256, n_threads=2, cache_budget=0)
    spec = Engine.load(bundled_path, n_ctx=256, n_threads=2, cache_budget=0)
    spec.set_speculation(str(bundled_path), force=True)
    yield plain, spec
    spec.close()
    plain.close()


FILL = SamplingParams(temperature=0.0, max_tokens=400, ignore_eos=True)


@pytest.fixture(scope="module")
def plain_fill(pair):
    plain, _ = pair
    plain.reset()
    return collect(plain, FILL)[1]


@pytest.mark.parametrize("kind,k", [("model", 1), ("model", 4), ("model", 8), ("ngram", 1), ("ngram", 2),
                                    ("ngram", 3), ("ngram", 5), ("ngram", 6), ("ngram", 7), ("ngram", 8)])
def test_greedy_identical_on_bundled_model_until_context_full(pair, plain_fill, kind, k):
    _, spec = pair
    spec.set_speculation(kind, k=k, force=True)
    spec.reset()
    _, ev = collect(spec, FILL)
    assert plain_fill.finish_reason == ev.finish_reason == "context_full"
    assert ev.token_ids == plain_fill.token_ids
    assert ev.stats.spec["drafted"] > 0
    if kind == "model":  # a model drafting for itself is always right
        assert ev.stats.spec["acceptance_rate"] == 1.0
        assert ev.stats.spec["target_passes_per_token"] < 1 / k + 0.1


@pytest.mark.parametrize("kind,k", [("model", 3), ("ngram", 4)])
def test_greedy_identical_on_a_kquant_model(kquant_path, kind, k):
    """Q4_K_M weights (the kind most downloaded GGUFs use): verification batches
    give the same tokens as plain decoding, as on the bundled Q4_1 model."""
    plain = Engine.load(kquant_path, n_ctx=256, n_threads=2, cache_budget=0)
    spec = Engine.load(kquant_path, n_ctx=256, n_threads=2, cache_budget=0)
    try:
        spec.set_speculation(str(kquant_path) if kind == "model" else kind, k=k, force=True)
        _, ref = collect(plain, FILL)
        _, ev = collect(spec, FILL)
        assert ev.token_ids == ref.token_ids and ev.finish_reason == "context_full"
        assert ev.stats.spec["accepted"] > 0
    finally:
        spec.close()
        plain.close()


def test_stops_inside_an_accepted_run_truncate_exactly(pair):
    plain, spec = pair
    spec.set_speculation("model", k=8, force=True)
    g = SamplingParams(temperature=0.0, max_tokens=60)
    plain.reset()
    _, ref = collect(plain, g)
    # max_tokens lands in the middle of the first 9-token run.
    spec.reset()
    _, ev = collect(spec, SamplingParams(temperature=0.0, max_tokens=5))
    assert ev.token_ids == ref.token_ids[:5] and ev.finish_reason == "max_tokens"
    # A stop string inside a run: nothing past it is shown.
    words = ref.text.split()
    stop = words[len(words) // 2]
    spec.reset()
    d, ev = collect(spec, SamplingParams(temperature=0.0, max_tokens=60, stop=(stop,)))
    assert ev.finish_reason == "stop_string" and "".join(d) == ref.text[:ref.text.index(stop)]
    # EOS inside a run ends the reply where plain decoding ends it.
    spec.reset()
    _, ev = collect(spec, g)
    assert ev.token_ids == ref.token_ids and ev.finish_reason == ref.finish_reason
    # The KV never keeps tokens past what was emitted: the next reply equals a fresh one.
    _, again = collect(spec, g)
    assert again.token_ids == ref.token_ids


def test_cancel_in_the_middle_of_a_run(pair):
    plain, spec = pair
    spec.set_speculation("model", k=8, force=True)
    spec.reset()
    cancel = threading.Event()
    d, ev = collect(spec, SamplingParams(temperature=0.0, max_tokens=100, ignore_eos=True), cancel=cancel,
                    on_delta=lambda n: cancel.set() if n == 3 else None)
    assert ev.finish_reason == "cancelled" and len(d) == 3
    assert spec.backend.kv_len <= ev.stats.prompt_tokens + ev.stats.generated_tokens


def test_auto_switches_itself_off_when_slower_and_says_so(bundled_path):
    # The n-gram draft rarely matches free prose, and verification costs extra:
    # the controller must notice and fall back to plain decoding.
    e = Engine.load(bundled_path, n_ctx=1024, n_threads=2, cache_budget=0)
    try:
        e.set_speculation("auto")
        ctl = e.spec_ctl
        ctl.rate["ngram"] = 1.0        # pretend n-gram measured much slower than plain
        ctl.rate["plain"] = 100.0
        ctl.rounds["ngram"] = ctl.explore_rounds  # ... over its whole first visit
        ctl.current = ctl.choose()
        assert ctl.current == "plain"
        _, ev = collect(e, SamplingParams(temperature=0.0, max_tokens=ctl.probe_every + 40, ignore_eos=True))
        st = ev.stats.spec
        assert st["tokens_by_mode"].get("plain", 0) > 0
        assert st["tokens_by_mode"].get("ngram", 0) > 0  # probed again later
    finally:
        e.close()


def test_controller_picks_k_from_measured_cost_and_acceptance():
    st = SpecStats()
    # CPU-like costs: each verified draft costs 0.7 of a step; acceptance ~0.9 per position.
    cpu = SpecController(["ngram"], k_max=8)
    gpu = SpecController(["ngram"], k_max=8)
    for r in range(40):
        k = 1 + r % 8
        acc = k if r % 10 else k - 1
        cpu.record("ngram", k, acc, acc + 1, 0.043 + 0.030 * k, st)
        gpu.record("ngram", k, acc, acc + 1, 0.043 + 0.001 * k, st)
    # Near-free verification (GPU) makes long drafts pay; CPU-like costs keep them short.
    assert gpu.k["ngram"] == 8
    assert cpu.k["ngram"] < gpu.k["ngram"]


def test_probe_interval_backs_off_while_a_mode_stays_slower():
    st = SpecStats()
    c = SpecController(["ngram", "plain"], probe_every=10, explore_rounds=1)
    c.record("ngram", 3, 0, 1, 1.0, st)       # ngram: 1 tok/s
    c.record("plain", 0, 0, 1, 0.05, st)      # plain: 20 tok/s
    assert c.current == "plain"
    intervals = []
    for _ in range(400):
        mode = c.current
        if mode == "ngram":
            intervals.append(c.probe_interval["ngram"])
            c.record("ngram", 3, 0, 1, 1.0, st)
        else:
            c.record("plain", 0, 0, 1, 0.05, st)
    assert len(intervals) >= 2 and intervals == sorted(intervals) and intervals[-1] > intervals[0]
    assert st.switched_off >= 1


def _feed(ctl, st, costs, plain_s, rounds=60, accept=1.0):
    """Drive a controller with synthetic rounds: ``costs[mode](k)`` seconds per round."""
    for _ in range(rounds):
        mode = ctl.current
        if mode == "plain":
            ctl.record("plain", 0, 0, 1, plain_s, st)
        else:
            k = ctl.k[mode]
            acc = int(k * accept)
            ctl.record(mode, k, acc, acc + 1, costs[mode](k), st)


def test_a_draft_that_cannot_win_even_accepting_everything_is_retired():
    # This CPU: plain step 53 ms; a model-draft round 53 + 66k ms (0.5B draft
    # steps plus the 1.5B verifying k more tokens), n-gram rounds 53 + 40k ms.
    st = SpecStats()
    ctl = SpecController(["model", "ngram", "plain"])
    _feed(ctl, st, {"model": lambda k: 0.053 + 0.066 * k, "ngram": lambda k: 0.053 + 0.040 * k}, 0.053)
    assert "model" in ctl.retired and "ngram" not in ctl.retired
    assert ctl.ceiling("model") < ctl.rate["plain"] < ctl.ceiling("ngram")
    assert ctl.rounds["model"] == ctl.explore_rounds  # never probed again after its first visit
    assert any("model draft off for this session" in n for n in st.notes)
    before = ctl.rounds["model"]
    _feed(ctl, st, {"model": lambda k: 0.053 + 0.066 * k, "ngram": lambda k: 0.053 + 0.040 * k}, 0.053,
          rounds=2000)
    assert ctl.rounds["model"] == before


def test_a_draft_that_could_win_is_kept_even_when_this_text_rejects_it():
    # GPU-like costs: verifying more tokens is nearly free. Low acceptance makes
    # the model slower on this text, but it is probed again, never retired.
    st = SpecStats()
    ctl = SpecController(["model", "plain"], probe_every=16)
    _feed(ctl, st, {"model": lambda k: 0.010 + 0.002 * k}, 0.008, rounds=400, accept=0.0)
    assert not ctl.retired and ctl.rounds["model"] > ctl.explore_rounds


def test_a_cost_model_replaces_the_measured_fit_for_choosing_k():
    # Measured: steep (CPU). Cost model: the GPU one, 1 pass + 0.1 per draft step.
    st = SpecStats()
    measured = SpecController(["model"], k_max=8)
    modelled = SpecController(["model"], k_max=8, round_cost=lambda k: 1 + 0.1 * k)
    for ctl in (measured, modelled):
        for r in range(40):
            k = ctl.k["model"]
            acc = k if r % 10 else k - 1  # ~0.9 per position
            ctl.record("model", k, acc, acc + 1, 0.043 + 0.066 * k, st)
    assert measured.k["model"] == 1
    assert modelled.k["model"] >= 3


def test_model_draft_ceiling_from_measured_costs():
    # This CPU (measured on the Qwen pair): a verified token 0.63 of a step, a draft step 0.45.
    assert model_draft_ceiling(1.0, 0.63, 0.45) < 1.0
    # A GPU: verifying is nearly free, the draft step is the weight ratio (0.44) or less.
    assert model_draft_ceiling(1.0, 0.02, 0.3) > 2.0
    # Free drafts and free verification: k_max + 1 tokens per step.
    assert model_draft_ceiling(1.0, 0.0, 0.0, k_max=8) == 9.0


def test_auto_leaves_out_a_model_draft_that_cannot_pay_without_touching_the_conversation(bundled_path):
    # The bundled model drafting for itself: a draft step costs a whole target
    # step, so auto must not run it; measuring that must not disturb the KV.
    Q2 = Q + [Message("assistant", "Paris."), Message("user", "And of Spain?")]
    g = SamplingParams(temperature=0.0, max_tokens=24)
    plain = Engine.load(bundled_path, n_ctx=512, n_threads=2)
    e = Engine.load(bundled_path, n_ctx=512, n_threads=2, draft=str(bundled_path))
    try:
        refs = [collect(plain, g, m)[1] for m in (Q, Q2)]
        e.set_speculation("none")
        first = collect(e, g, Q)[1]
        kv = e.backend.kv_len
        e.set_speculation("auto")  # measures here, mid-conversation
        assert e.backend.kv_len == kv and e._draft_costs is not None
        assert "model" not in e.spec_ctl.modes and "ngram" in e.spec_ctl.modes
        second = collect(e, g, Q2)[1]
        assert [first.token_ids, second.token_ids] == [r.token_ids for r in refs]
        assert any("model draft not used here" in n for n in second.stats.spec["notes"])
        assert second.stats.spec["tokens_by_mode"].get("model", 0) == 0
    finally:
        e.close()
        plain.close()


def test_draft_length_grows_past_the_positions_tried_so_far():
    # Every draft accepted, the bench pair's GPU cost model (a draft step 0.437
    # of a pass): k must climb past the first positions tried (it stopped at 3
    # when untried positions were assumed to be accepted half the time).
    st = SpecStats()
    ctl = SpecController(["model"], k_max=8, round_cost=lambda k: 1 + 0.437 * k)
    for _ in range(60):
        k = ctl.k["model"]
        ctl.record("model", k, k, k + 1, 0.01, st)
    assert ctl.k["model"] >= 5
