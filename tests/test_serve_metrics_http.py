"""``GET /metrics`` of a real server (the bundled model through the real scheduler), read by prometheus_client's
own parser: its counts add up to the requests made, and it is guarded exactly like the API's routes (on
loopback the Host check and the key when one is set; beyond loopback TLS and a key, always)."""
from __future__ import annotations


import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine.serve.http.keys import KeyRing
from engine.serve.http.server import LocalServer
from engine.serve.http.tls import own_certificate
from engine.serve.runtime.scheduler import Scheduler

ADDR = "127.0.0.2"  # the loopback range, off 127.0.0.1: served exactly as a LAN address would be
KEY = "the-settings-key"


@pytest.fixture(scope="module")
def scheduler(engine):
    s = Scheduler(engine, parallel=2, queue_limit=8)
    yield s
    s.close()


@pytest.fixture(scope="module")
def server(scheduler):
    srv = LocalServer(port=0, api_key=KEY)
    srv.attach(scheduler)
    srv.start()
    yield srv
    srv.stop()


def scrape(url: str, **kw) -> dict[tuple[str, tuple], float]:
    r = httpx.get(url, timeout=30, **kw)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(r.text) for s in f.samples}


def total(samples: dict, name: str, **labels) -> float:
    return sum(v for (n, lab), v in samples.items() if n == name and all(dict(lab).get(k) == w
                                                                        for k, w in labels.items()))


def counted(server: LocalServer) -> None:
    """A reply read to its end, streamed or whole, is already counted: the server lets go of it before its last byte."""
    assert server.in_flight == 0


def test_metrics_count_the_requests_made(server, scheduler):
    base = f"http://127.0.0.1:{server.port}"
    client = openai.OpenAI(base_url=server.url, api_key=KEY, max_retries=0, timeout=120)
    mid = server.model_id
    one = client.chat.completions.create(model=mid, max_tokens=8, temperature=0,
                                         messages=[{"role": "user", "content": "Name a colour."}])
    chunks = list(client.chat.completions.create(model=mid, max_tokens=12, temperature=0, stream=True,
                                                 stream_options={"include_usage": True},
                                                 messages=[{"role": "user", "content": "Count to five."}]))
    two = chunks[-1].usage
    with pytest.raises(openai.BadRequestError, match="context"):
        client.chat.completions.create(model=mid, max_tokens=4, messages=[{"role": "user", "content": "word " * 20000}])
    counted(server)
    m = scrape(f"{base}/metrics", headers={"Authorization": f"Bearer {KEY}"})

    # Three requests: two answered (stop or length), one refused by the engine (its prompt is too long).
    assert total(m, "hearth:request_success_total") == 3
    assert total(m, "hearth:request_success_total", finished_reason="error") == 1
    assert total(m, "hearth:request_success_total", priority="interactive") == 3
    usages = (one.usage, two)
    assert total(m, "hearth:prompt_tokens_total") == sum(u.prompt_tokens for u in usages)
    assert total(m, "hearth:generation_tokens_total") == sum(u.completion_tokens for u in usages)
    cached = sum((u.prompt_tokens_details.cached_tokens or 0) if u.prompt_tokens_details else 0 for u in usages)
    assert total(m, "hearth:prompt_tokens_cached_total") == total(m, "hearth:prefix_cache_hits_total") == cached
    assert total(m, "hearth:prefix_cache_queries_total") == total(m, "hearth:prompt_tokens_total")
    # Every request has an end-to-end time and a queue wait; TTFT where a token came, TPOT from two tokens.
    for name, n in (("e2e_request_latency_seconds", 3), ("request_queue_time_seconds", 3),
                    ("time_to_first_token_seconds", sum(u.completion_tokens > 0 for u in usages)),
                    ("request_time_per_output_token_seconds", sum(u.completion_tokens > 1 for u in usages))):
        count = total(m, f"hearth:{name}_count")
        assert count == n, name
        assert total(m, f"hearth:{name}_bucket", le="+Inf") == count
        bounds = sorted((float(dict(lab)["le"]), v) for (nm, lab), v in m.items() if nm == f"hearth:{name}_bucket")
        assert [v for _b, v in bounds] == sorted(v for _b, v in bounds)  # cumulative
        assert total(m, f"hearth:{name}_sum") >= 0
    # Idle now; the pool's sequences keep their last prompts' KV for the next to share.
    assert total(m, "hearth:num_requests_running") == 0 and total(m, "hearth:num_requests_waiting") == 0
    cap = total(m, "hearth:kv_cache_capacity_tokens")
    engine = scheduler.engine
    assert cap == engine.n_seq * engine.n_ctx
    assert 0 < total(m, "hearth:kv_cache_tokens") <= cap
    assert total(m, "hearth:kv_cache_usage_perc") == total(m, "hearth:kv_cache_tokens") / cap
    # The settings key is counted as one key; no speculation ran (the engine has none set).
    assert total(m, "hearth:key_requests_total", key="settings key") == 3
    assert total(m, "hearth:spec_decode_num_draft_tokens_total") == 0
    assert server.served == 2


def test_on_loopback_it_is_guarded_like_every_route(server):
    url = f"http://127.0.0.1:{server.port}/metrics"
    assert httpx.get(url).status_code == 401  # a key is set: it is needed here too
    assert httpx.get(url, headers={"Authorization": "Bearer nope"}).status_code == 401
    r = httpx.get(url, headers={"Authorization": f"Bearer {KEY}", "Host": "evil.example"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "host_not_allowed"  # DNS rebinding
    r = httpx.get(url, headers={"Authorization": f"Bearer {KEY}", "Origin": "https://evil.example"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "origin_not_allowed"
    assert httpx.post(url, headers={"Authorization": f"Bearer {KEY}"}).status_code == 405


def test_beyond_loopback_only_a_key_over_tls_reads_it_and_each_keys_use_is_counted(engine, tmp_path):
    ring = KeyRing(tmp_path / "keys.json")
    entry, key = ring.create("laptop")
    tls = own_certificate(tmp_path / "tls", ADDR)
    sched = Scheduler(engine, parallel=1)
    srv = LocalServer(port=0, host=ADDR, listen=True, tls=tls, keys=ring)
    srv.attach(sched)
    srv.start()
    try:
        url = f"https://{ADDR}:{srv.port}/metrics"
        r = httpx.get(url, verify=False, timeout=30)  # the certificate's pinning is test_remote_tls's
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key" and "hearth:" not in r.text
        assert httpx.get(url, verify=False, headers={"Authorization": "Bearer hearth-not-a-key"}).status_code == 401
        with pytest.raises(httpx.HTTPError):  # plain HTTP gets no answer at all
            httpx.get(f"http://{ADDR}:{srv.port}/metrics", headers={"Authorization": f"Bearer {key}"}, timeout=10)
        r = httpx.post(f"https://{ADDR}:{srv.port}/v1/chat/completions", verify=False, timeout=120,
                       headers={"Authorization": f"Bearer {key}"},
                       json={"model": srv.model_id, "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]})
        assert r.status_code == 200, r.text
        counted(srv)
        m = scrape(url, verify=False, headers={"x-api-key": key})  # Anthropic's header works as well
        assert total(m, "hearth:key_requests_total", key="laptop", key_id=entry.id) == 1
        assert total(m, "hearth:key_generation_tokens_total", key="laptop") == r.json()["usage"]["completion_tokens"]
    finally:
        srv.stop()
        sched.close()


def test_an_unknown_route_lists_metrics_among_the_routes(server):
    r = httpx.get(f"http://127.0.0.1:{server.port}/nope", headers={"Authorization": f"Bearer {KEY}"})
    assert r.status_code == 404 and "GET /metrics" in r.json()["error"]["message"]
