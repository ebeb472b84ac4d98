"""bench images on the test VLM: the follow-up, the new conversation and the restart never encode the
image again."""
from __future__ import annotations

import argparse


def test_bench_images_counts_no_encode_after_the_first(tiny_vlm):
    from engine.bench import run_benchmark

    out = run_benchmark("images", argparse.Namespace(model=str(tiny_vlm[0]), mmproj=str(tiny_vlm[1]), ctx=2048,
                                                     threads=2, rounds=2))
    assert out["projector"].endswith(tiny_vlm[1].name)
    assert all(e["cold"] >= 1 and e["follow_up_and_new_conversation"] == 0 and e["after_restart"] == 0
               for e in out["encodes"])
    assert set(out["speedup_vs_cold"]) == {"follow_up", "new_conversation", "after_restart"}
    assert out["ttft_ms"]["cold_encode_part"] > 0
