"""bench prefix on the real bundled model, a short system prompt and one round: the figures it prints
hang together (its limit is the warm request's own new tokens, read alone; where the time goes is each
reply's own record), and a restart is served from disk. Timings are the benchmark's business."""
from __future__ import annotations

import argparse

import pytest


def test_bench_prefix_prints_its_limit_beside_warm_and_restart(bundled_path, tmp_path):
    from engine.bench.prefix import bench_prefix

    system = tmp_path / "system.txt"
    system.write_text(" ".join(f"Rule {i}: answer briefly and politely." for i in range(40)))
    a = argparse.Namespace(model=str(bundled_path), threads=2, backend="llama_cpp", rounds=1,
                           system_file=str(system))
    r = bench_prefix(a)
    assert r["limit_ttft_ms"] > 0 and r["warm_ttft_ms"] > 0 and r["restart_ttft_ms"] > 0
    # The ratios are of the unrounded times: within the printed times' rounding of them.
    assert r["warm_vs_limit"] == pytest.approx(r["warm_ttft_ms"] / r["limit_ttft_ms"], abs=0.002)
    assert r["restart_vs_limit"] == pytest.approx(r["restart_ttft_ms"] / r["limit_ttft_ms"], abs=0.002)
    warm, restart = r["where"]["warm"], r["where"]["restart"]
    # The warm and the restarted requests read only their question and the template around it.
    assert 0 < warm["prefill_tokens"] < 40 and 0 < restart["prefill_tokens"] < 40
    for part in (warm, restart):
        assert part["ttft"] >= part["prefill"] and part["tokenize"] >= 0 and part["queue_wait"] >= 0
