"""Exact / fast profiles, and the one-change-at-a-time tuner (engine/tune.py) on the bundled model."""
from __future__ import annotations

import numpy as np
import pytest

from engine import HearthError
from engine.prompt.messages import Message
from engine.types import SamplingParams
from engine.config import EngineConfig


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

    e = Engine.open(EngineConfig(bundled_path, n_ctx=1024, n_threads=2, exactness=profile, cache_budget=0))
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
        Engine.open(EngineConfig(bundled_path, n_ctx=256, exactness="turbo"))


def test_an_unknown_exactness_in_the_settings_is_a_clear_error():
    # "Apply best" and "Roll back" (a model's own load settings): tests/test_model_tuning.py
    from app.core.settings import Settings, SettingsError

    with pytest.raises(SettingsError, match="exactness"):
        Settings(exactness="turbo").validate()


# -- bench tune ---------------------------------------------------------------------------

ROW_NAMES = ["baseline", "prefix cache off", "draft n-gram", "draft model", "KV q8_0", "KV q4_0"]
TINY = dict(prompts=1, tokens=4, ppl_tokens=16, n_ctx=512)
# Eleven model loads and replies: minutes on a shared 2-core machine, past the suite's 300 s default.
SLOW = pytest.mark.timeout(1800)


@pytest.fixture(scope="module")
def tune_run(bundled_path):
    from engine.tuning import run_tune

    seen = []
    result = run_tune(bundled_path, threads=2, progress=lambda i, n, name: seen.append((i, n, name)), **TINY)
    return result, seen


@SLOW
def test_bench_tune_produces_every_row_with_the_baseline_repeated_at_the_end(tune_run):
    result, seen = tune_run
    rows = result["rows"]
    names = [r["name"] for r in rows]
    assert names[:6] == ROW_NAMES and names[-1] == "baseline (again)"
    assert {"threads 1", "GPU layers all", "flash attention", "fast kernels"} <= set(names)
    assert [s[2] for s in seen] == names + [""] and seen[-1][:2] == (len(rows), len(rows))
    for r in rows:
        if r["status"] == "absent":
            assert r["absent"]  # the row is there, with the reason it could not run here
            continue
        assert r["ttft_ms"] > 0 and r["tpot_ms"] > 0 and r["tok_s"] > 0 and r["memory_bytes"] > 50 * 2**20
        assert r["perplexity"] > 1 and 0 <= r["agreement"] <= 1
    by = {r["name"]: r for r in rows}
    gpu = by["GPU layers all"]
    assert gpu["status"] == "measured" or "no GPU" in gpu["absent"]
    base = by["baseline"]
    # Exact kernels: these changes leave every greedy token and the perplexity as they were.
    for name in ("prefix cache off", "draft n-gram", "threads 1", "baseline (again)"):
        assert by[name]["agreement"] == 1.0 and by[name]["perplexity"] == base["perplexity"], name
    assert by["prefix cache off"]["cached_tokens"] == 0 < base["cached_tokens"]
    assert by["fast kernels"]["exactness"] == "fast" and base["exactness"] == "exact"
    assert by["KV q8_0"]["memory_bytes"] < base["memory_bytes"]
    assert set(result["noise"]) == {"ttft_ms", "tpot_ms", "tok_s"}
    assert result["best"] is None or by[result["best"]]["settings"]


@SLOW
def test_a_run_is_saved_exported_and_compared(tune_run, tmp_path, monkeypatch):
    import csv
    import io

    from engine.tuning import report

    monkeypatch.setenv("HEARTH_DATA_DIR", str(tmp_path))
    result, _ = tune_run
    first = report.save(result)
    assert first.parent == tmp_path / "tune" and report.load_run(first) == result
    second = report.save(result)
    assert second != first and report.last_run(result["path"], before=second) == first
    assert report.last_run("/elsewhere/other.gguf") is None
    deltas = report.compare_runs(report.load_run(first), result)
    assert [d["name"] for d in deltas] == [r["name"] for r in result["rows"] if r["status"] == "measured"]
    assert all(d["ttft_ms"] == 0 and d["agreement"] == 0 for d in deltas)
    table = list(csv.DictReader(io.StringIO(report.to_csv(result))))
    assert [t["name"] for t in table] == [r["name"] for r in result["rows"]]
    text = report.profile_difference(result["path"])
    assert text.startswith("Measured here") and "tok/s" in text and "greedy tokens" in text
    from app.core.exactness import measured_difference

    assert measured_difference("bundled", "bundled") == text  # what Settings shows beside the choice
    (tmp_path / "junk.json").write_text("{}")
    with pytest.raises(HearthError, match="not a saved"):
        report.load_run(tmp_path / "junk.json")


def _row(name, ttft, tpot, mem=100, ppl=10.0, agreement=1.0, settings=True):
    return {"name": name, "status": "measured", "ttft_ms": ttft, "tpot_ms": tpot, "tok_s": 1e3 / tpot,
            "memory_bytes": mem, "perplexity": ppl, "agreement": agreement,
            "settings": {"kv_type": "f16"} if settings else None}


def test_a_run_is_found_for_its_model_however_the_path_reaches_the_file(tmp_path, monkeypatch):
    """A model folder behind a symlink (a venv or a models folder linked elsewhere) is the same model: Settings
    finds its last run either way (a test run from a worktree with a linked venv found none)."""
    from engine.tuning import report

    monkeypatch.setenv("HEARTH_DATA_DIR", str(tmp_path))
    real = tmp_path / "models" / "m.gguf"
    real.parent.mkdir()
    real.write_bytes(b"GGUF")
    (tmp_path / "linked").symlink_to(real.parent)
    saved = report.save({"kind": "tune", "path": str(tmp_path / "linked" / "m.gguf"), "rows": []})
    assert report.last_run(str(real)) == saved and report.last_run(str(tmp_path / "linked" / "m.gguf")) == saved
    assert report.last_run(str(tmp_path / "models" / "other.gguf")) is None


def test_worse_means_beyond_the_noise_of_the_repeated_baseline():
    from engine.tuning import report

    rows = [_row("baseline", 100, 10), _row("a little slower", 108, 10), _row("much slower", 150, 10),
            _row("bigger", 100, 10, mem=120), _row("worse text", 90, 9, ppl=10.5),
            _row("faster", 80, 8), _row("faster, no setting", 50, 5, settings=False),
            _row("faster, other tokens", 70, 7, agreement=0.5), _row("baseline (again)", 110, 10)]
    spread = report.judge(rows)
    assert spread["ttft_ms"] == 0.1 and spread["tpot_ms"] == 0.0  # |100 - 110| / 100
    worse = {r["name"]: r.get("worse") for r in rows}
    assert worse["a little slower"] == []  # +8% is inside the 10% the baseline moved by itself
    assert worse["much slower"] == ["ttft_ms +50%"] and worse["bigger"] == ["memory +20%"]
    assert worse["worse text"] == ["perplexity 10.500 vs 10.000"] and worse["faster"] == []
    assert report.best(rows, tokens=16) == "faster"


@SLOW
def test_cli_saves_exports_and_compares_with_an_earlier_run(tune_run, tmp_path, capsys):
    import json

    from engine.cli import main
    from engine.tuning import report

    earlier = report.save(tune_run[0], tmp_path / "earlier.json")
    out, table = tmp_path / "now.json", tmp_path / "now.csv"
    rc = main(["bench", "tune", "--rows", "prefix cache off", "--tokens", "4", "--prompts", "1", "--ppl-tokens",
               "16", "--ctx", "512", "--threads", "2", "--out", str(out), "--csv", str(table),
               "--compare", str(earlier), "--json"])
    assert rc == 0
    printed = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in printed["rows"]] == ["baseline", "prefix cache off", "baseline (again)"]
    assert printed["saved"] == str(out) and report.load_run(out)["rows"] == printed["rows"]
    assert [d["name"] for d in printed["compare"]["rows"]] == ["baseline", "prefix cache off", "baseline (again)"]
    assert table.read_text().splitlines()[0].startswith("name,change,status,ttft_ms")
    assert main(["bench", "tune", "--rows", "warp drive", "--tokens", "4", "--prompts", "1"]) != 0
