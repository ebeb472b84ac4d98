"""The server's metrics registry (engine/serve/metrics.py) on known requests: exact percentiles, exact
exposition lines, the history's span and each key's use; the text read back by prometheus_client's own parser."""
from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine.decode.metrics import GenerationStats
from engine.serve.exposition import sample_value
from engine.serve.metrics import FinishedRequest, ServerMetrics

# Dyadic times, so that sums and interpolated percentiles are exact in binary.
LAPTOP = dict(key="laptop", key_id="ab12cd34")
R1 = FinishedRequest(submitted=1.0, queue_s=0.0, ttft_s=0.125, tpot_s=0.0625, e2e_s=0.5, prompt_tokens=100,
                     cached_tokens=64, generated_tokens=9, finish_reason="stop", **LAPTOP)
R2 = FinishedRequest(submitted=2.0, queue_s=0.25, ttft_s=0.25, tpot_s=0.125, e2e_s=2.0, prompt_tokens=50,
                     generated_tokens=17, drafted=10, accepted=7, draft_rounds=3, finish_reason="length")
R3 = FinishedRequest(submitted=3.0, queue_s=0.0, ttft_s=0.5, tpot_s=None, e2e_s=0.5, prompt_tokens=20,
                     cached_tokens=16, generated_tokens=1, finish_reason="stop", priority="window")
R4 = FinishedRequest(submitted=4.0, queue_s=0.5, ttft_s=None, tpot_s=None, e2e_s=0.5, finish_reason="error", **LAPTOP)


def registry(gauges=None) -> ServerMetrics:
    m = ServerMetrics(gauges or (lambda: {"running": 2, "waiting": 1, "kv_used_tokens": 2048,
                                          "kv_capacity_tokens": 8192}), clock=lambda: 1000.0)
    for i, r in enumerate((R1, R2, R3, R4)):
        m.record(r, now=900.0 + 10 * i)  # ended at 900, 910, 920 and 930
    return m


def test_exposition_lines_are_exact():
    lines = registry().exposition().splitlines()
    for want in (
        "# TYPE hearth:num_requests_running gauge", "hearth:num_requests_running 2", "hearth:num_requests_waiting 1",
        "hearth:kv_cache_usage_perc 0.25", "hearth:kv_cache_tokens 2048", "hearth:kv_cache_capacity_tokens 8192",
        "# TYPE hearth:request_success_total counter",
        'hearth:request_success_total{finished_reason="error",priority="interactive"} 1',
        'hearth:request_success_total{finished_reason="length",priority="interactive"} 1',
        'hearth:request_success_total{finished_reason="stop",priority="interactive"} 1',
        'hearth:request_success_total{finished_reason="stop",priority="window"} 1',
        'hearth:prompt_tokens_total{priority="interactive"} 150', 'hearth:prompt_tokens_total{priority="window"} 20',
        'hearth:generation_tokens_total{priority="interactive"} 26',
        'hearth:generation_tokens_total{priority="window"} 1',
        "hearth:prompt_tokens_cached_total 80", "hearth:prefix_cache_queries_total 170",
        "hearth:prefix_cache_hits_total 80", "hearth:spec_decode_num_drafts_total 3",
        "hearth:spec_decode_num_draft_tokens_total 10", "hearth:spec_decode_num_accepted_tokens_total 7",
        'hearth:key_requests_total{key="laptop",key_id="ab12cd34"} 2',
        'hearth:key_prompt_tokens_total{key="laptop",key_id="ab12cd34"} 100',
        'hearth:key_generation_tokens_total{key="laptop",key_id="ab12cd34"} 9',
        "# TYPE hearth:time_to_first_token_seconds histogram",
        # 0.125 and 0.25 (on its bound: le means <=) both fall in le=0.25; nothing at or under 0.1
        'hearth:time_to_first_token_seconds_bucket{priority="interactive",le="0.1"} 0',
        'hearth:time_to_first_token_seconds_bucket{priority="interactive",le="0.25"} 2',
        'hearth:time_to_first_token_seconds_bucket{priority="interactive",le="+Inf"} 2',
        'hearth:time_to_first_token_seconds_count{priority="interactive"} 2',
        'hearth:time_to_first_token_seconds_sum{priority="interactive"} 0.375',
        'hearth:time_to_first_token_seconds_bucket{priority="window",le="0.5"} 1',
        # one token: no time per output token; no token: no TTFT; every request has an end-to-end time
        'hearth:request_time_per_output_token_seconds_count{priority="interactive"} 2',
        'hearth:request_time_per_output_token_seconds_sum{priority="interactive"} 0.1875',
        'hearth:request_time_per_output_token_seconds_bucket{priority="interactive",le="0.1"} 1',
        'hearth:e2e_request_latency_seconds_bucket{priority="interactive",le="0.5"} 2',
        'hearth:e2e_request_latency_seconds_bucket{priority="interactive",le="2.0"} 3',
        'hearth:e2e_request_latency_seconds_count{priority="interactive"} 3',
        'hearth:e2e_request_latency_seconds_sum{priority="interactive"} 3',
        'hearth:request_queue_time_seconds_sum{priority="interactive"} 0.75',
    ):
        assert want in lines, want
    # No TPOT was observed for the window's one-token reply, so it has no series there.
    assert not any(ln.startswith('hearth:request_time_per_output_token_seconds_count{priority="window"}')
                   for ln in lines)
    # Window first, then the API's classes: the order requests are served in.
    ttft = [ln for ln in lines if ln.startswith("hearth:time_to_first_token_seconds_count")]
    assert ttft == ['hearth:time_to_first_token_seconds_count{priority="window"} 1',
                    'hearth:time_to_first_token_seconds_count{priority="interactive"} 2']


def test_prometheus_clients_parser_reads_every_family_and_value():
    families = {f.name: f for f in text_string_to_metric_families(registry().exposition())}
    assert families["hearth:prompt_tokens"].type == "counter"
    assert families["hearth:time_to_first_token_seconds"].type == "histogram"
    assert families["hearth:num_requests_running"].type == "gauge"
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples}
    assert got[("hearth:prompt_tokens_total", (("priority", "interactive"),))] == 150
    assert got[("hearth:time_to_first_token_seconds_bucket", (("le", "0.25"), ("priority", "interactive")))] == 2
    assert got[("hearth:kv_cache_usage_perc", ())] == 0.25
    assert got[("hearth:key_requests_total", (("key", "laptop"), ("key_id", "ab12cd34")))] == 2


def test_an_empty_registry_says_zero_and_leaves_unknown_kv_out():
    text = ServerMetrics(lambda: {"running": 0}).exposition()
    lines = text.splitlines()
    assert "hearth:num_requests_running 0" in lines and "hearth:num_requests_waiting 0" in lines
    assert "hearth:prompt_tokens_cached_total 0" in lines and "hearth:spec_decode_num_draft_tokens_total 0" in lines
    assert not any("kv_cache" in ln for ln in lines)  # capacity 0: not known, not "empty"
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["hearth:e2e_request_latency_seconds"].samples == []


def test_label_values_are_escaped_and_read_back_whole():
    name = 'my "big"\\laptop\nsecond line'
    m = ServerMetrics()
    m.record(FinishedRequest(submitted=0.0, queue_s=0.0, ttft_s=0.5, tpot_s=None, e2e_s=1.0, key=name, key_id="x"),
             now=0.0)
    text = m.exposition()
    assert 'hearth:key_requests_total{key="my \\"big\\"\\\\laptop\\nsecond line",key_id="x"} 1' in text.splitlines()
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "hearth:key_requests_total"]
    assert [s.labels["key"] for s in samples] == [name]


def test_numbers_are_written_as_the_format_wants():
    assert [sample_value(x) for x in (3, 3.0, 0.25, float("inf"), float("-inf"))] == ["3", "3", "0.25", "+Inf", "-Inf"]
    assert sample_value(float("nan")) == "NaN"


def test_the_window_has_exact_percentiles_counts_and_key_use():
    v = registry().window(120.0, now=1000.0)  # 880..1000: all four
    assert v.requests == 4
    assert v.finish_reasons == {"stop": 2, "length": 1, "error": 1}
    assert v.priorities == {"interactive": 3, "window": 1}
    # TTFT over 0.125, 0.25, 0.5: p50 the middle one, p99 98% of the way from 0.25 to 0.5
    assert v.ttft_p50_s == 0.25 and v.ttft_p99_s == pytest.approx(0.25 + 0.98 * 0.25, abs=1e-12)
    assert v.tpot_p50_s == pytest.approx(0.09375, abs=1e-12) and v.tpot_p99_s == pytest.approx(0.124375, abs=1e-12)
    assert v.e2e_p50_s == 0.5 and v.queue_p50_s == 0.125
    assert (v.prompt_tokens, v.cached_tokens, v.generated_tokens) == (170, 80, 27)
    assert v.prefix_hit_rate == 80 / 170 and v.spec_acceptance == 0.7
    [laptop] = v.keys
    assert (laptop.name, laptop.key_id, laptop.requests, laptop.prompt_tokens, laptop.generated_tokens) == \
        ("laptop", "ab12cd34", 2, 100, 9)
    assert laptop.last_ago_s == 70.0  # its last request ended at 930


def test_the_window_keeps_only_its_span_and_cuts_it_into_buckets():
    m = registry()
    v = m.window(90.0, now=1000.0, buckets=3)  # 910..1000: R2, R3, R4; slices 910-940, 940-970, 970-1000
    assert v.requests == 3 and v.finish_reasons == {"length": 1, "stop": 1, "error": 1}
    assert [b.requests for b in v.buckets] == [3, 0, 0]
    assert [(b.start_ago_s, b.end_ago_s) for b in v.buckets] == [(90.0, 60.0), (60.0, 30.0), (30.0, 0.0)]
    first = v.buckets[0]
    assert (first.ttft_p50_s, first.tpot_p50_s, v.buckets[1].ttft_p50_s) == (0.375, 0.125, None)
    empty = m.window(60.0, now=1000.0)
    assert empty.requests == 0 and empty.ttft_p50_s is None and empty.prefix_hit_rate is None and empty.keys == ()


def test_gauge_samples_make_the_queue_and_kv_history_and_old_ones_go():
    state = {"running": 1, "waiting": 0, "kv_used_tokens": 100, "kv_capacity_tokens": 400}
    m = ServerMetrics(lambda: state, history_s=60.0)
    for t in range(0, 121, 30):  # 0, 30, 60, 90, 120
        state["waiting"] = t // 30
        m.sample(now=float(t))
    v = m.window(600.0, now=120.0)  # asks beyond the history: cut to 60 s
    assert v.span_s == 60.0
    assert [(s.at, s.waiting) for s in v.samples] == [(60.0, 2), (90.0, 3), (120.0, 4)]
    assert v.latest is not None and v.latest.kv_fraction == 0.25
    assert v.waiting_p99 == pytest.approx(3.98, abs=1e-12)


def test_a_final_events_stats_become_a_finished_request():
    st = GenerationStats(prompt_tokens=40, cached_tokens=32, generated_tokens=5, ttft_ms=250.0, tpot_ms=12.5,
                         e2e_ms=300.0, queue_wait_ms=50.0,
                         spec={"drafted": 8, "accepted": 6, "rounds": 2, "acceptance_rate": 0.75})
    r = FinishedRequest.from_stats(st, "stop", submitted=5.0, priority="interactive", key="phone", key_id="p1")
    assert (r.queue_s, r.ttft_s, r.tpot_s, r.e2e_s) == (0.05, 0.25, 0.0125, 0.3)
    assert (r.prompt_tokens, r.cached_tokens, r.generated_tokens) == (40, 32, 5)
    assert (r.drafted, r.accepted, r.draft_rounds, r.key, r.key_id) == (8, 6, 2, "phone", "p1")
    one = FinishedRequest.from_stats(GenerationStats(generated_tokens=1, ttft_ms=10.0, e2e_ms=10.0), "length",
                                     submitted=0.0, priority="window")
    assert one.ttft_s == 0.01 and one.tpot_s is None and one.drafted == 0
    none = FinishedRequest.from_stats(GenerationStats(e2e_ms=10.0, ttft_ms=10.0), "stop", submitted=0.0,
                                      priority="window")
    assert none.ttft_s is None  # no token came: no time to first token to count
