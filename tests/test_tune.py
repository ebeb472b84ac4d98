"""Exact / fast profiles, and the one-change-at-a-time tuner (engine/tune.py) on the bundled model."""
from __future__ import annotations

import numpy as np
import pytest

from engine import HearthError
from engine.types import Message, SamplingParams


def _cached_vs_uncached(b) -> float:
    """Largest logit gap between a prompt prefilled at once and its tail decoded
    one token at a time after a snapshot restore (what the prefix cache does)."""
    toks = b.tokenize("The history of the rainbow is long and colourful. " * 12)
    b.truncate(0)
    whole = b.forward(toks, all_logits=True).copy()
    b.truncate(0)
    b.forward(toks[:-6])
    snap = b.snapshot()
    b.forward(b.tokenize(" something else entirely"))
    b.restore(snap)
    step = np.stack([b.forward([t]).copy() for t in toks[-6:]])
    b.truncate(0)
    return float(np.abs(whole[-6:] - step).max())


@pytest.mark.parametrize("profile", ["exact", "fast"])
def test_both_profiles_load_and_generate(bundled_path, profile):
    from engine.engine import Engine

    e = Engine.load(bundled_path, n_ctx=1024, n_threads=2, exactness=profile, cache_budget=0)
    try:
        info = e.backend.describe()
        assert info.exactness == profile
        ident = e.backend.state_identity()
        # the disk prefix store keys on these, so an exact cache never serves a fast run
        assert ident["flash_attn"] == str(profile == "fast") and ident["repack"] == str(profile == "fast")
        evs = list(e.stream([Message("user", "Name a colour.")], SamplingParams(temperature=0, max_tokens=8)))
        assert evs[-1].kind == "final" and evs[-1].stats.generated_tokens > 0
        if profile == "exact":
            assert _cached_vs_uncached(e.backend) == 0.0  # bit-identical, not just close
    finally:
        e.close()


def test_exact_is_the_default(llama_backend):
    assert llama_backend.describe().exactness == "exact"
    assert llama_backend.flash_attn is False and llama_backend.repack is False


def test_unknown_profile_is_a_clear_error(bundled_path):
    from engine.engine import Engine

    with pytest.raises(HearthError, match="exactness"):
        Engine.load(bundled_path, n_ctx=256, exactness="turbo")


def test_apply_tuning_then_roll_back_restores_the_model_settings(tmp_path):
    from app.settings import Settings, SettingsError, SettingsFile

    s = Settings(kv_type="f16", n_threads=2)
    tuned = s.apply_tuning({"kv_type": "q8_0", "exactness": "fast"})
    assert (tuned.kv_type, tuned.exactness, tuned.n_threads) == ("q8_0", "fast", 2)
    again = tuned.apply_tuning({"kv_type": "q4_0", "n_threads": 1})  # a second apply keeps the first "before"
    f = SettingsFile(tmp_path / "settings.json")
    f.save(again)
    loaded, msg = f.load()
    assert msg is None and loaded.tuning == again.tuning
    back = loaded.roll_back_tuning()
    assert (back.kv_type, back.exactness, back.n_threads, back.tuning) == ("f16", "exact", 2, {})
    with pytest.raises(SettingsError, match="nothing to roll back"):
        back.roll_back_tuning()
    with pytest.raises(SettingsError, match="prefix"):
        s.apply_tuning({"prefix_cache": False})
    with pytest.raises(SettingsError, match="exactness"):
        Settings(exactness="turbo").validate()
