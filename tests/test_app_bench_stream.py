"""``python -m app --bench-stream``: the same greedy reply through the real window and through
Engine.stream, on the bundled model. Correctness only: speeds are the benchmark's to report."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.__main__ import main

ROOT = Path(__file__).resolve().parent.parent


def test_both_sides_write_the_same_16_tokens_and_the_figures_come_out(tmp_path):
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    env.pop("HEARTH_DATA_DIR", None)  # it must pick its own scratch folder
    env["HOME"] = str(tmp_path)  # and never touch the real user folders
    env["XDG_DATA_HOME"] = str(tmp_path / "data")
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    p = subprocess.run([sys.executable, "-m", "app", "--bench-stream", "--tokens", "16", "--rounds", "1"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    lines = [ln for ln in p.stdout.splitlines() if ln.strip()]
    assert p.returncode == 0, p.stdout + p.stderr
    assert len(lines) == 1, p.stdout
    r = json.loads(lines[0])
    assert r["ok"] is True and r["problems"] == []
    for key in ("window_tok_s", "engine_tok_s", "ratio", "gui_cpu_fraction", "worst_gap_ms"):
        assert isinstance(r[key], float) and r[key] >= 0, key
    assert r["window_tok_s"] > 0 and r["engine_tok_s"] > 0
    # The ratio comes from the unrounded speeds; each printed speed is rounded to 0.01 (the ratio to 0.001).
    w, e = r["window_tok_s"], r["engine_tok_s"]
    assert (w - 0.005) / (e + 0.005) - 5e-4 <= r["ratio"] <= (w + 0.005) / max(e - 0.005, 1e-9) + 5e-4
    assert 0 < r["gui_cpu_fraction"] <= 1.5  # thread CPU over wall time (a little over 1 is clock granularity)
    assert r["model"] == "SmolLM2-135M-Instruct (Q4_1, bundled)" and r["draft"] == "none"
    assert r["tokens"] == 16 and r["rounds"] == 1
    assert isinstance(r["threads"], int) and r["threads"] >= 1 and isinstance(r["n_ctx"], int)
    for side in ("window", "engine"):
        s = r[side]
        assert s["generated_tokens"] == [16] and s["finish_reason"] == ["max_tokens"], side
        assert len(s["decode_tok_s"]) == 1 and s["decode_tok_s"][0] > 0, side
    assert r["window"]["decode_tok_s"] == [r["window_tok_s"]] and r["engine"]["decode_tok_s"] == [r["engine_tok_s"]]
    assert r["window"]["gui_cpu_fraction"] == [r["gui_cpu_fraction"]]
    assert r["window"]["worst_gap_ms"] == [r["worst_gap_ms"]]
    assert r["same_text"] is True and r["window_text"] == r["engine_text"] and r["window_text"].strip()
    assert r["profile"] == "exact"  # the suite's pinned profile (conftest)
    assert not (tmp_path / "data").exists() and not (tmp_path / "config").exists()


@pytest.mark.parametrize("argv, why", [
    (["--tokens", "0"], "--tokens: must be at least 1, got 0"),
    (["--rounds", "two"], "--rounds: must be a whole number, got 'two'"),
    (["--threads-poll", "101"], "--threads-poll: expected a whole number from 0 to 100, got 101"),
])
def test_a_bad_number_is_refused_with_the_reason(capsys, argv, why):
    with pytest.raises(SystemExit) as e:
        main(["--bench-stream", *argv])
    assert e.value.code == 2 and why in capsys.readouterr().err


def test_the_window_can_run_on_hearths_own_thread_pool(tmp_path):
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "HOME": str(tmp_path)}
    env.pop("HEARTH_DATA_DIR", None)
    p = subprocess.run([sys.executable, "-m", "app", "--bench-stream", "--tokens", "8", "--rounds", "1",
                        "--threads", "1", "--threads-poll", "0"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    r = json.loads(p.stdout.strip().splitlines()[-1])
    # The loaded model says what it runs on: one thread, on the pool at poll 0; the same text both ways.
    assert r["ok"] is True and r["threads"] == 1 and r["threads_poll"] == 0 and r["same_text"] is True


def test_a_missing_model_file_is_refused_before_anything_loads(capsys, tmp_path):
    assert main(["--bench-stream", "--model", str(tmp_path / "nope.gguf")]) == 2
    assert f"--model {tmp_path / 'nope.gguf'}: no such file or folder" in capsys.readouterr().err

