"""Sampling: exact values on hand-written vectors, plus the invariants the decode
loop and speculative decoding rely on."""
from __future__ import annotations

import math

import numpy as np
import pytest

from engine.decode.sampling import (SamplingError, apply_penalties, apply_temperature, make_sampler, min_p_mask,
    recent_window, softmax, top_k_indices, top_k_mask, top_p_mask)
from engine.types import SamplingParams

NEG = -np.inf
OFF = dict(top_k=0, top_p=1.0, min_p=0.0)  # every filter disabled


def params(**kw) -> SamplingParams:
    base = dict(temperature=1.0, seed=0, **OFF)
    base.update(kw)
    return SamplingParams(**base)


def readonly(values, dtype=np.float32) -> np.ndarray:
    a = np.array(values, dtype=dtype)
    a.setflags(write=False)
    return a


def logp(*probs) -> np.ndarray:
    return np.log(np.array(probs, dtype=np.float64))


# ----------------------------------------------------------------------------- penalties


def test_repeat_penalty_divides_positive_and_multiplies_negative():
    x = np.array([2.0, -2.0, 0.0, 1.0], dtype=np.float32)
    out = apply_penalties(x, [0, 1, 2, 0, 1], repeat_penalty=2.0)
    np.testing.assert_array_equal(out, [1.0, -4.0, 0.0, 1.0])  # applied once per distinct token
    assert out.dtype == np.float32


def test_presence_penalty_subtracts_once_per_distinct_token():
    out = apply_penalties(np.zeros(4), [1, 1, 1, 3], presence=0.5)
    np.testing.assert_array_equal(out, [0.0, -0.5, 0.0, -0.5])


def test_frequency_penalty_scales_with_count():
    out = apply_penalties(np.zeros(4), [1, 1, 1, 3], frequency=0.25)
    np.testing.assert_array_equal(out, [0.0, -0.75, 0.0, -0.25])


def test_penalties_combine_in_llama_cpp_order():
    # repeat first, then count * frequency + presence
    out = apply_penalties(np.array([3.0, -1.0, 5.0]), [0, 0, 1], repeat_penalty=1.5, presence=0.5, frequency=0.25)
    np.testing.assert_allclose(out, [3.0 / 1.5 - 0.5 - 0.5, -1.5 - 0.25 - 0.5, 5.0])


def test_penalties_never_mutate_and_accept_readonly_input():
    x = readonly([1.0, 2.0, 3.0])
    out = apply_penalties(x, [0, 2], repeat_penalty=2.0, presence=1.0)
    np.testing.assert_array_equal(x, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(out, [-0.5, 2.0, 0.5])
    assert apply_penalties(x, []) is not x


def test_penalties_skip_ids_outside_the_vocab():
    out = apply_penalties(np.ones(3), [-1, 3, 99, 1], presence=1.0)
    np.testing.assert_array_equal(out, [1.0, 0.0, 1.0])


def test_recent_window():
    h = [5, 6, 7, 8]
    assert recent_window(h, 2).tolist() == [7, 8]
    assert recent_window(h, -1).tolist() == [5, 6, 7, 8]
    assert recent_window(h, 0).tolist() == []
    assert recent_window(h, 10).tolist() == [5, 6, 7, 8]
    assert recent_window([], 3).tolist() == []


@pytest.mark.parametrize("last_n, expected", [(0, 0), (1, 0), (3, 1), (-1, 1)])
def test_penalty_window_in_the_sampler(last_n, expected):
    # token 0 leads; it was last seen three tokens ago
    logits = np.array([2.0, 1.5, 0.0], dtype=np.float32)
    s = make_sampler(params(temperature=0.0, repeat_penalty=2.0, penalty_last_n=last_n))
    assert s([0, 2, 2], logits) == expected


# ----------------------------------------------------------------------------- top_k


def test_top_k_mask_exact():
    out = top_k_mask(np.array([1.0, 4.0, 3.0, 2.0, 5.0]), 2)
    np.testing.assert_array_equal(out, [NEG, 4.0, NEG, NEG, 5.0])


def test_top_k_disabled_or_larger_than_vocab():
    x = np.array([1.0, 2.0])
    np.testing.assert_array_equal(top_k_mask(x, 0), x)
    np.testing.assert_array_equal(top_k_mask(x, 5), x)


def test_top_k_ties_at_the_boundary_go_to_lower_ids():
    x = np.array([1.0, 3.0, 2.0, 3.0, 2.0, 2.0, 2.0])
    assert top_k_indices(x, 3).tolist() == [1, 2, 3]
    assert top_k_indices(x, 4).tolist() == [1, 2, 3, 4]
    # every value tied: the first k ids
    assert top_k_indices(np.zeros(1000), 5).tolist() == [0, 1, 2, 3, 4]
    # ties well away from the boundary do not matter
    assert top_k_indices(np.array([9.0, 9.0, 1.0, 0.0]), 2).tolist() == [0, 1]


def test_top_k_indices_match_a_stable_full_sort():
    rng = np.random.default_rng(1)
    for _ in range(50):
        x = np.round(rng.standard_normal(300) * 2) / 2  # coarse: many ties
        k = int(rng.integers(1, 300))
        ref = np.sort(np.argsort(-x, kind="stable")[:k])
        assert top_k_indices(x, k).tolist() == ref.tolist()


def test_top_k_prefilter_on_big_vocab_matches_a_stable_full_sort():
    # vocab >= 16384 and small k take the sampled-threshold pre-filter path
    rng = np.random.default_rng(2)
    n = 20000
    vectors = [
        np.round(rng.standard_normal(n) * 4) / 2,  # ties
        np.arange(n, dtype=np.float64),  # sorted ascending: the top is all in the tail
        -np.arange(n, dtype=np.float64),  # sorted descending
        np.zeros(n),  # everything tied
        np.where(rng.random(n) < 0.001, 50.0, rng.standard_normal(n)),  # a few outliers, LM-like
        np.where(rng.random(n) < 0.3, np.nan, rng.standard_normal(n)),  # NaN ranks as -inf
        np.where(rng.random(n) < 0.999, -np.inf, rng.standard_normal(n)),  # fewer than k finite
    ]
    for x in vectors:
        for dtype in (np.float64, np.float32):
            xd = x.astype(dtype)
            clean = np.where(np.isnan(xd), -np.inf, xd)
            for k in (1, 40, 100, 256):
                ref = np.sort(np.argsort(-clean, kind="stable")[:k])
                assert top_k_indices(xd, k).tolist() == ref.tolist()


# ----------------------------------------------------------------------------- top_p


def test_top_p_keeps_smallest_set_reaching_p_inclusive():
    x = logp(0.2, 0.5, 0.3)
    # 0.5 + 0.3 == 0.8 exactly reaches p: the boundary token set stops there
    np.testing.assert_array_equal(np.isfinite(top_p_mask(x, 0.8)), [False, True, True])
    np.testing.assert_array_equal(np.isfinite(top_p_mask(x, 0.81)), [True, True, True])
    np.testing.assert_array_equal(np.isfinite(top_p_mask(x, 0.5)), [False, True, False])
    np.testing.assert_array_equal(np.isfinite(top_p_mask(x, 0.51)), [False, True, True])


def test_top_p_always_keeps_one_and_p_one_disables():
    x = logp(0.2, 0.5, 0.3)
    np.testing.assert_array_equal(np.isfinite(top_p_mask(x, 1e-6)), [False, True, False])
    np.testing.assert_array_equal(top_p_mask(x, 1.0), x)


def test_top_p_keeps_logit_values():
    x = np.array([0.0, 2.0, 1.0])
    out = top_p_mask(x, 0.5)
    np.testing.assert_array_equal(out, [NEG, 2.0, NEG])


# ----------------------------------------------------------------------------- min_p


def test_min_p_exact_boundary():
    x = logp(1.0, 0.5, 0.25, 0.5)  # relative to p_max = 1
    np.testing.assert_array_equal(np.isfinite(min_p_mask(x, 0.5)), [True, True, False, True])
    np.testing.assert_array_equal(np.isfinite(min_p_mask(x, 0.51)), [True, False, False, False])
    np.testing.assert_array_equal(np.isfinite(min_p_mask(x, 0.25)), [True, True, True, True])
    np.testing.assert_array_equal(min_p_mask(x, 0.0), x)


def test_min_p_is_relative_to_the_max_not_absolute():
    x = np.array([10.0, 10.0 + math.log(0.2), 10.0 + math.log(0.05)])
    np.testing.assert_array_equal(np.isfinite(min_p_mask(x, 0.1)), [True, True, False])


# ----------------------------------------------------------------------------- temperature / softmax


def test_temperature_scales_logits():
    np.testing.assert_array_equal(apply_temperature(np.array([1.0, -2.0, NEG]), 0.5), [2.0, -4.0, NEG])
    with pytest.raises(ValueError):
        apply_temperature(np.array([1.0]), 0.0)


def test_softmax_exact_and_edge_cases():
    np.testing.assert_allclose(softmax(logp(0.2, 0.5, 0.3)), [0.2, 0.5, 0.3], rtol=1e-15)
    np.testing.assert_array_equal(softmax(np.array([0.0, NEG, 0.0])), [0.5, 0.0, 0.5])
    np.testing.assert_array_equal(softmax(np.array([1.0, np.inf, 3.0, np.inf])), [0.0, 0.5, 0.0, 0.5])
    np.testing.assert_array_equal(softmax(np.array([np.nan, 0.0])), [0.0, 1.0])
    with pytest.raises(SamplingError):
        softmax(np.array([NEG, np.nan]))


def test_temperature_in_the_sampler():
    x = logp(0.5, 0.25, 0.25)
    d = make_sampler(params(temperature=0.5)).distribution([], x)
    # p ** (1/T), renormalised: [0.25, 0.0625, 0.0625] / 0.375
    np.testing.assert_allclose(d, [2 / 3, 1 / 6, 1 / 6], rtol=1e-12)
    d = make_sampler(params(temperature=2.0)).distribution([], x)
    r = np.sqrt([0.5, 0.25, 0.25])
    np.testing.assert_allclose(d, r / r.sum(), rtol=1e-12)


# ----------------------------------------------------------------------------- order of the chain


def test_top_k_runs_before_top_p():
    x = logp(0.4, 0.3, 0.2, 0.1)
    # top_k=2 renormalises to [4/7, 3/7]; 4/7 >= 0.5 so top_p keeps one token.
    d = make_sampler(params(top_k=2, top_p=0.5)).distribution([], x)
    np.testing.assert_array_equal(d, [1.0, 0.0, 0.0, 0.0])
    # without top_k, top_p=0.5 needs two tokens (0.4 < 0.5)
    d = make_sampler(params(top_p=0.5)).distribution([], x)
    np.testing.assert_allclose(d, [4 / 7, 3 / 7, 0.0, 0.0], rtol=1e-12)


def test_top_p_runs_before_min_p():
    x = logp(0.5, 0.3, 0.2)
    # top_p=0.6 keeps {0.5, 0.3}; min_p=0.5 vs p_max=0.5 cuts at 0.25, keeping both
    d = make_sampler(params(top_p=0.6, min_p=0.5)).distribution([], x)
    np.testing.assert_allclose(d, [0.625, 0.375, 0.0], rtol=1e-12)


def test_min_p_runs_before_temperature():
    x = logp(1.0, 0.5, 0.25)
    # min_p=0.3 on the untempered probs keeps 0.5 (it would drop it after T=0.5 squared it to 0.25)
    d = make_sampler(params(min_p=0.3, temperature=0.5)).distribution([], x)
    np.testing.assert_allclose(d, [0.8, 0.2, 0.0], rtol=1e-12)


def test_penalties_run_before_the_filters():
    x = np.array([3.0, 2.9, 0.0, -5.0])
    # presence pushes token 0 below token 1, so top_k=1 keeps token 1
    d = make_sampler(params(top_k=1, presence_penalty=1.0)).distribution([0], x)
    np.testing.assert_array_equal(d, [0.0, 1.0, 0.0, 0.0])


def test_full_chain_hand_computed():
    x = np.array([1.0, 5.0, 4.0, 3.0, 4.5, -1.0], dtype=np.float32)
    p = params(temperature=0.5, top_k=4, top_p=0.9, min_p=0.2, repeat_penalty=2.0, penalty_last_n=2)
    s = make_sampler(p)
    # window [1, 5]: token 1 5.0 -> 2.5, token 5 -1.0 -> -2.0. top_k=4: {2:4, 4:4.5, 3:3, 1:2.5}.
    # Their softmax, descending: 4.5, 4, 3, 2.5 -> cum reaches 0.9 after three tokens.
    w = np.exp(np.array([4.5, 4.0, 3.0, 2.5]) - 4.5)
    cum = np.cumsum(w / w.sum())
    assert cum[1] < 0.9 <= cum[2]
    # min_p=0.2: exp(3 - 4.5) = 0.223 >= 0.2, kept. T=0.5 doubles the logits.
    t = np.exp(2 * (np.array([4.0, 3.0, 4.5]) - 4.5))
    expected = np.zeros(6)
    expected[[2, 3, 4]] = t / t.sum()
    d = s.distribution([3, 1, 5], x)
    np.testing.assert_allclose(d, expected, rtol=1e-12)
    assert d.dtype == np.float64 and d.shape == (6,)
    assert abs(d.sum() - 1.0) < 1e-12


# ----------------------------------------------------------------------------- greedy


def test_greedy_is_argmax_with_lowest_id_on_ties():
    s = make_sampler(params(temperature=0.0))
    assert s([], readonly([0.1, 3.0, -1.0, 3.0])) == 1
    np.testing.assert_array_equal(s.distribution([], readonly([0.1, 3.0, -1.0, 3.0])), [0, 1, 0, 0])


def test_greedy_ignores_filters_but_not_penalties():
    x = np.array([2.0, 1.9, 0.0])
    assert make_sampler(params(temperature=0.0, top_k=1, top_p=0.1, min_p=0.9))([], x) == 0
    s = make_sampler(params(temperature=0.0, presence_penalty=0.5))
    assert s([0], x) == 1
    np.testing.assert_array_equal(s.distribution([0], x), [0.0, 1.0, 0.0])


def test_greedy_skips_nan_and_rejects_all_masked():
    s = make_sampler(params(temperature=0.0))
    assert s([], np.array([np.nan, 1.0, 2.0])) == 2
    for bad in ([NEG, NEG], [np.nan, np.nan], [np.nan, NEG]):
        with pytest.raises(ValueError, match="no token left"):
            s([], np.array(bad, dtype=np.float32))


# ----------------------------------------------------------------------------- distribution / draw


@pytest.mark.parametrize(
    "kw",
    [dict(), dict(top_k=5), dict(top_p=0.7), dict(min_p=0.1), dict(top_k=40, top_p=0.95, min_p=0.05, temperature=0.7),
     dict(top_k=3, repeat_penalty=1.3, frequency_penalty=0.2)],
)
def test_call_is_exactly_a_draw_from_distribution(kw):
    rng = np.random.default_rng(7)
    a, b = make_sampler(params(seed=123, **kw)), make_sampler(params(seed=123, **kw))
    hist = [1, 2, 3]
    for _ in range(200):
        x = (rng.standard_normal(50) * 2).astype(np.float32)
        d = b.distribution(hist, x)
        assert d.dtype == np.float64 and abs(d.sum() - 1.0) < 1e-12
        tok = a(hist, x)
        assert tok == b.sample(d)
        assert d[tok] > 0
        hist.append(tok)


def test_empirical_frequencies_match_distribution():
    s = make_sampler(params(seed=2024, temperature=0.8, top_k=4))
    x = np.array([1.0, 0.2, 2.0, -1.0, 1.5, -3.0], dtype=np.float32)
    d = s.distribution([], x)
    n = 20000
    counts = np.bincount([s([], x) for _ in range(n)], minlength=x.size)
    assert counts[d == 0].sum() == 0
    support = d > 0
    expected = n * d[support]
    chi2 = ((counts[support] - expected) ** 2 / expected).sum()
    assert chi2 < 16.27  # df=3, p=0.001; deterministic under the fixed seed


def test_same_seed_same_tokens_different_seeds_differ():
    x = np.zeros(100, dtype=np.float32)

    def run(seed):
        s = make_sampler(params(seed=seed))
        return [s([], x) for _ in range(200)]

    assert run(5) == run(5)
    assert run(5) != run(6)


def test_seed_none_uses_fresh_entropy():
    x = np.zeros(1000, dtype=np.float32)
    a, b = make_sampler(params(seed=None)), make_sampler(params(seed=None))
    assert [a([], x) for _ in range(50)] != [b([], x) for _ in range(50)]


def test_sample_accepts_unnormalised_weights_and_rejects_bad_ones():
    s = make_sampler(params(seed=1))
    assert s.sample(np.array([0.0, 0.0, 3.0, 0.0])) == 2
    for bad in ([0.0, 0.0], [1.0, -0.5], [np.nan, 1.0], []):
        with pytest.raises(ValueError):
            s.sample(np.array(bad))


def test_sparse_distribution_matches_dense():
    s = make_sampler(params(top_k=3, temperature=0.7))
    x = np.array([0.0, 1.0, 5.0, 2.0, 4.0])
    ids, probs = s.sparse_distribution([], x)
    assert ids.tolist() == [2, 3, 4]
    dense = s.distribution([], x)
    np.testing.assert_array_equal(dense[ids], probs)
    assert dense.sum() == pytest.approx(1.0, abs=1e-15)


# ----------------------------------------------------------------------------- fast paths equal the pure chain


def reference(x, p: SamplingParams, hist):
    """The chain written out on the full vocabulary with the pure functions."""
    x = apply_penalties(x, recent_window(hist, p.penalty_last_n), p.repeat_penalty, p.presence_penalty,
                        p.frequency_penalty)
    x = top_k_mask(x, p.top_k)
    x = top_p_mask(x, p.top_p)
    x = min_p_mask(x, p.min_p)
    return softmax(apply_temperature(x, p.temperature))


@pytest.mark.parametrize(
    "kw",
    [dict(top_k=40, top_p=0.95, min_p=0.05, temperature=0.7), dict(top_p=0.9), dict(top_p=0.999, temperature=1.3),
     dict(min_p=0.02), dict(), dict(top_k=7, repeat_penalty=1.1, presence_penalty=0.3, frequency_penalty=0.1)],
)
def test_sampler_equals_pure_chain(kw):
    rng = np.random.default_rng(3)
    p = params(**kw)
    s = make_sampler(p)
    for vocab in (64, 5000, 20000):
        for _ in range(3):
            x = np.round(rng.standard_normal(vocab) * 8) / 4  # coarse values: ties everywhere
            x = x.astype(np.float32)
            hist = rng.integers(0, vocab, 30).tolist()
            got, ref = s.distribution(hist, x), reference(x, p, hist)
            np.testing.assert_array_equal(got > 0, ref > 0)
            np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-300)


def test_top_p_fast_path_grows_past_first_guess():
    # flat distribution: top_p=0.9 needs ~90% of 20k tokens, far past the first guess
    x = np.zeros(20000, dtype=np.float32)
    x[:10] = 1.0
    p = params(top_p=0.9)
    ids, probs = make_sampler(p).sparse_distribution([], x)
    ref = reference(x, p, [])
    assert ids.tolist() == np.flatnonzero(ref).tolist()
    np.testing.assert_allclose(probs, ref[ids], rtol=1e-12)


# ----------------------------------------------------------------------------- robustness


@pytest.mark.parametrize(
    "kw", [dict(temperature=0.0), dict(temperature=0.0, repeat_penalty=1.2), dict(), dict(top_k=2),
           dict(top_p=0.5), dict(min_p=0.5), dict(top_k=2, top_p=0.5, min_p=0.2, presence_penalty=1.0)]
)
def test_input_is_never_mutated(kw):
    x = readonly([0.5, 2.0, -1.0, 1.5, np.nan, NEG])
    before = x.copy()
    s = make_sampler(params(**kw))
    s([1, 2, 2], x)
    s.distribution([1, 2, 2], x)
    np.testing.assert_array_equal(x, before)


@pytest.mark.parametrize("kw", [dict(), dict(top_k=3), dict(top_p=0.5), dict(min_p=0.1), dict(temperature=0.0)])
def test_all_masked_logits_raise(kw):
    s = make_sampler(params(**kw))
    for bad in ([NEG] * 5, [np.nan] * 5, [np.nan, NEG, np.nan, NEG, NEG]):
        x = np.array(bad, dtype=np.float32)
        with pytest.raises(SamplingError, match="no token left"):
            s([], x)
        with pytest.raises(ValueError):
            s.distribution([], x)


@pytest.mark.parametrize("kw", [dict(), dict(top_k=2), dict(top_p=0.5), dict(min_p=0.1)])
def test_nan_logits_are_excluded(kw):
    s = make_sampler(params(**kw))
    x = np.array([np.nan, 1.0, np.nan, NEG, np.nan], dtype=np.float32)
    np.testing.assert_array_equal(s.distribution([], x), [0, 1, 0, 0, 0])
    assert s([], x) == 1


def test_positive_infinity_takes_all_the_mass():
    s = make_sampler(params(top_k=3))
    d = s.distribution([], np.array([1.0, np.inf, 2.0, np.inf]))
    np.testing.assert_array_equal(d, [0.0, 0.5, 0.0, 0.5])


def test_rejects_non_vector_logits():
    for kw in (dict(), dict(temperature=0.0)):
        with pytest.raises(ValueError):
            make_sampler(params(**kw))([], np.zeros((2, 3)))


# ----------------------------------------------------------------------------- reply length


def test_a_reply_length_is_none_by_default_and_its_limit_is_past_any_context():
    from engine.types import NO_TOKEN_LIMIT

    assert SamplingParams().max_tokens is None and SamplingParams().limit == NO_TOKEN_LIMIT > 1 << 20
    assert SamplingParams(max_tokens=7).limit == 7


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "512"])
def test_a_reply_length_is_a_whole_number_of_at_least_one_or_none(bad):
    from engine.errors import HearthError

    with pytest.raises(HearthError, match="max_tokens must be a whole number >= 1 or None"):
        SamplingParams(max_tokens=bad)
