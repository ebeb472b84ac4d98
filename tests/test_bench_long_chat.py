"""``bench long-chat`` measures what it says, on the bundled model in a small context: the figures
hang together (turns, tokens read and served, re-reads, the goals' verdicts, drift, compaction's
cost, the facts asked at the end); the timings themselves are for docs/benchmarks.md, not asserted."""
from __future__ import annotations

import argparse
import statistics

import pytest

from engine.bench import run_benchmark
from engine.bench.long_chat import GOAL, POLICIES

pytestmark = pytest.mark.timeout(1500)  # about 35 short replies on the bundled model, on a busy shared machine


@pytest.fixture(scope="module")
def out(bundled_path):
    a = argparse.Namespace(quick=True, n_ctx_chat=256, grow=1.25, threads=None, models=None)
    return run_benchmark("long-chat", a)


def test_every_policy_goes_on_from_the_same_overflow(out):
    [row] = out["models"]
    assert row["model"] == "bundled" and row["n_ctx"] == 256 and out["grow"] == 1.25
    assert row["turns_before"] >= 3 and set(row["policies"]) == {"stop", *POLICIES}
    assert row["ttft_before_median_ms"] == round(statistics.median(t["ttft_ms"] for t in row["per_turn_before"]), 1)
    stop = row["policies"]["stop"]
    assert stop["refused_at_turn"] > row["turns_before"] and "the context holds 256" in stop["message"]
    for policy in POLICIES:
        p = row["policies"][policy]
        turns = p["per_turn"]
        assert turns and turns[0]["turn"] == row["turns_before"] + 1  # each from the same place
        assert [t["turn"] for t in turns] == list(range(turns[0]["turn"], turns[0]["turn"] + len(turns)))
        assert p["turns_after"] == len(turns) and p["ttft_after_max_ms"] == max(t["ttft_ms"] for t in turns)
        assert p["max_ratio"] == round(p["ttft_after_max_ms"] / row["ttft_before_median_ms"], 2)
        assert set(p["facts"]) == {"system", "pinned", "dropped"}
        assert p["tokens_read"] == sum(t["read_tokens"] for t in turns)
        assert p["tokens_cached"] == sum(t["cached_tokens"] for t in turns)
        for t in turns:  # a turn reads what its prompt did not find in the KV, and what it read again
            assert 0 <= t["cached_tokens"] <= t["prompt_tokens"] and t["read_tokens"] >= t["prompt_tokens"] - t[
                "cached_tokens"]
            assert t["finish_reason"] in ("max_tokens", "stop") and t["generated_tokens"] == len(t["reply_tokens"])
    drop, shift = row["policies"]["drop_oldest"], row["policies"]["shift"]
    base = statistics.median(t["read_tokens"] for t in row["per_turn_before"])
    assert drop["rereads"] == sum(t["read_tokens"] > 2 * base for t in drop["per_turn"])  # the steps, counted
    assert drop["reread_turns"] == [t["turn"] for t in drop["per_turn"] if t["read_tokens"] > 2 * base]
    assert drop["per_turn"][0]["dropped"] > 0 and drop["tokens_shifted"] == 0
    assert shift["tokens_shifted"] > 0 and {t["context_policy"] for t in shift["per_turn"]} <= {"shift", ""}
    # at the overflow drop reads again all it keeps past the system prompt and the pinned turn; shift moves it
    assert shift["per_turn"][0]["shifted_tokens"] > 0
    assert shift["per_turn"][0]["cached_tokens"] > drop["per_turn"][0]["cached_tokens"]
    assert shift["goal_met"] == (shift["max_ratio"] <= GOAL) and drop["goal_met"] == (drop["median_ratio"] <= GOAL)


def test_compaction_and_shift_drift_are_measured(out):
    row = out["models"][0]
    compact = row["policies"]["compact"]
    assert compact["compactions"] and all(c["summary_tokens"] > 0 and c["summary_ms"] > 0
                                          for c in compact["compactions"])
    summarized = [t for t in compact["per_turn"] if t["summarized"]]
    assert [c["turn"] for c in compact["compactions"]] == [t["turn"] for t in summarized]
    d = row["shift_drift"]
    assert d["measured"] == 1 and 0.0 <= d["agreement"] <= 1.0 and d["kl_mean"] >= 0.0
    assert 0.0 <= d["top1_changed"] <= 1.0 and d["turns"][0]["turn"] in [t["turn"] for t in row["policies"]["shift"][
        "per_turn"]]


def test_the_table_names_each_policy_with_its_goal(out):
    rows = {r["policy"]: r for r in out["table"]}
    assert set(rows) == {"stop", *POLICIES}
    p = out["models"][0]["policies"]
    assert rows["shift"]["goal_met"] == p["shift"]["goal_met"] and "max_ratio" in rows["shift"]["goal"]
    drop = rows["drop_oldest"]
    assert drop["rereads"] == p["drop_oldest"]["rereads"] and "median_ratio" in drop["goal"]
    assert rows["compact"]["compactions"] == len(p["compact"]["compactions"])
    assert rows["compact"]["facts_goal"] == "system,pinned,dropped"
    for policy in POLICIES:
        kept = {k for k, v in p[policy]["facts"].items() if v["ok"]}
        assert set(rows[policy]["facts_kept"].split(",")) == (kept or {"none"})
    assert rows["shift"]["drift_agreement"] == out["models"][0]["shift_drift"]["agreement"]
