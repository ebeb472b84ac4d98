"""The quality report: exact metric values on hand-made inputs, perplexity checked
against transformers' own loss, and the report end to end on both backends."""
from __future__ import annotations

import argparse
import math

import pytest

from engine.bench import quality as bq
from engine.tuning.quality import kl_divergence, perplexity


def test_agreement_counts_positions_and_treats_a_shared_end_as_agreement():
    ref = [[1, 2, 3, 4], [5, 6, 7, 2]]
    got = [[1, 2, 9, 4], [5, 6, 7, 2]]          # the second reply ends at EOS (2) in both
    r = bq.agreement(ref, got, n=8)
    # reply 1: positions 0,1,3 agree (3/8) + both padded after 4 tokens (4/8) = 7/8; reply 2: 8/8
    assert r == {"agreement": round((7 / 8 + 1) / 2, 4), "prefix_tokens": (2 + 8) / 2, "min_prefix_tokens": 2}
    assert bq.agreement([[1] * 70], [[1] * 64 + [3] * 6])["agreement"] == 1.0   # only the first 64 count
    assert bq.agreement([[1, 2]], [[1, 2, 3]], n=4)["agreement"] == 0.75        # one ended, one went on
    with pytest.raises(ValueError):
        bq.agreement([[1]], [[1], [2]])


def test_fixed_inputs_ship_with_the_package(llama_backend):
    text, prompts = bq.quality_text(), bq.quality_prompts()
    assert len(prompts) == 8 and all(isinstance(p, str) and p for p in prompts)
    n = len(llama_backend.tokenize(text, special=False))
    assert 900 < n < llama_backend.n_ctx   # fits one window of the report's 2048-token context


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    pytest.importorskip("torch")
    from tiny_hf import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("q") / "tiny")


def test_perplexity_matches_transformers_loss(tiny_dir):
    import torch

    from engine.backends import hf

    b = hf.load(tiny_dir, device="cpu")
    text = "The sea was grey and the wind was cold. He found a bottle."
    ppl, n = perplexity(b, text)
    ids = b.tokenize(text, special=False)
    assert n == len(ids) - 1
    with torch.inference_mode():
        loss = b.model(input_ids=torch.tensor([ids]), labels=torch.tensor([ids])).loss
    assert ppl == pytest.approx(math.exp(float(loss)), rel=1e-4)
    assert b.kv_len == 0
    b.close()


def _args(model, backend, quant=()):
    return argparse.Namespace(model=str(model), backend=backend, quant=list(quant), threads=None,
                              json=True, rounds=1, tokens=8)


def test_report_on_the_transformers_backend(tiny_dir, monkeypatch):
    monkeypatch.setattr(bq, "quality_prompts", lambda: ["the sea", "a bottle"])
    rep = bq.bench_quality(_args(tiny_dir, "hf", ["none", "int8", "int4"]))
    assert rep["backend"] == "hf" and rep["gen_tokens"] == 64 and rep["prompts"] == 2
    rows = {r["quant"]: r for r in rep["rows"]}
    assert list(rows) == ["none", "int8", "int4"]
    assert rows["none"]["agreement"] == 1.0 and rows["none"]["prefix_tokens"] == 64
    for r in rows.values():
        assert 1.0 < r["perplexity"] < 1e6 and r["text_tokens"] > 200 and 0.0 <= r["agreement"] <= 1.0
    assert rows["int4"]["weight_bytes"] < rows["int8"]["weight_bytes"] < rows["none"]["weight_bytes"]


def test_report_for_a_gguf_file_compares_it_with_its_dequantized_weights(bundled_path, monkeypatch):
    """llama.cpp on the Q4_1 file against transformers on the same weights in float32.
    Short inputs keep it quick; the full report is `python -m engine bench quality`."""
    monkeypatch.setattr(bq, "quality_prompts", lambda: ["Name three colours of the rainbow."])
    monkeypatch.setattr(bq, "quality_text", _text_head)
    monkeypatch.setattr(bq, "GEN_TOKENS", 16)
    rep = bq.bench_quality(_args(bundled_path, "llama_cpp"))
    ref, exact, fast = rep["rows"]
    assert ref["quant"].startswith("reference: dequantized float32") and ref["backend"] == "hf"
    assert exact["quant"] == "gguf Q4_1 (llama_cpp, exact)" and exact["backend"] == "llama_cpp"
    assert fast["quant"] == "gguf Q4_1 (llama_cpp, fast)"
    # The same weights, two numeric paths: close perplexities, identical greedy start.
    for gguf in (exact, fast):
        assert gguf["perplexity"] == pytest.approx(ref["perplexity"], rel=0.05)
    assert exact["prefix_tokens"] >= 8 and rep["gen_tokens"] == 16
    # What the fast kernels change against the exact ones, measured: on this file flash attention
    # moves the next-token distributions a little (the top token at ~6% of the text's positions).
    drift = rep["profiles"]
    assert drift["positions"] == exact["text_tokens"] + 1
    assert 0.0 < drift["kl_mean"] <= drift["kl_p99"] <= drift["kl_max"] < 0.1
    assert 0.0 <= drift["top1_changed"] < 0.15
    assert drift["perplexity_ratio"] == pytest.approx(fast["perplexity"] / exact["perplexity"], rel=1e-4)


def test_kl_divergence_of_next_token_distributions():
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.normal(size=(300, 50)).astype(np.float32)
    same = kl_divergence(a, a.copy())
    assert same["kl_max"] == 0.0 and same["top1_changed"] == 0.0 and same["positions"] == 300
    # Two rows by hand: p = (1/2, 1/2), q = (1/4, 3/4): KL = 1/2 ln 2 + 1/2 ln(2/3).
    p = np.log(np.array([[0.5, 0.5], [0.5, 0.5]], dtype=np.float32))
    q = np.log(np.array([[0.25, 0.75], [0.5, 0.5]], dtype=np.float32))
    got = kl_divergence(p, q)
    assert got["kl_max"] == pytest.approx(0.5 * math.log(2) + 0.5 * math.log(2 / 3), rel=1e-6)
    assert got["kl_mean"] == pytest.approx(got["kl_max"] / 2, rel=1e-6) and got["top1_changed"] == 0.5
    with pytest.raises(ValueError):
        kl_divergence(a, a[:10])


def _text_head() -> str:
    from importlib.resources import files

    return files("engine").joinpath("data/quality_text.txt").read_text(encoding="utf-8")[:1200]
