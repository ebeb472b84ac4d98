"""Any library model on request: the local server loads the model a request names through the
window's planned load, once, keeps what fits, unloads the least recently used model the API
loaded, answers 503 when a model cannot fit beside the server's own, and unloads idle models.

All real: the bundled model serves as the server's own, and two more GGUF files in a library's
models folder (hard links of the bundled file, so real weights under other names) are loaded
by real requests through the official openai client. The memory cases run on the planner's
simulated machine (a small RAM), as ``engine plan --ram`` does."""
from __future__ import annotations

import gc
import os
import threading

import httpx
import openai
import pytest

import engine.sizing.load_machine as planning
from engine.sizing.load_plan import plan_spec
from engine.sizing.load_spec import LoadSpec
from engine.library.local import Library
from engine.serve.runtime.library_pool import library_pool
from engine.serve.runtime.pool import keep_alive
from engine.serve.protocols.openai import ApiError
from engine.sizing.hardware import simulated
from serving import local_server

Q = [{"role": "user", "content": "Name a colour."}]


@pytest.fixture
def library(tmp_path, bundled_path):
    models = tmp_path / "models"
    models.mkdir()
    for name in ("alpha.gguf", "beta.gguf"):
        os.link(bundled_path, models / name)  # the same weights under another name: another model
    return Library(tmp_path / "library.json", models_folder=models, hf_cache=tmp_path / "hf")


def served(engine, library, tmp_path, **kw):
    pool = library_pool(tmp_path / "data", parallel=2, queue_limit=8, n_ctx=1024, n_threads=2,
                        library=library, **kw)
    return local_server(engine, pool=pool, parallel=2, queue_limit=8)


def ask(srv, model: str, **extra) -> httpx.Response:
    return httpx.post(f"http://127.0.0.1:{srv.port}/v1/chat/completions", timeout=300,
                      json={"model": model, "messages": Q, "max_tokens": 6, "temperature": 0, **extra})


def test_a_request_names_a_library_model_and_it_is_loaded_once(engine, library, tmp_path):
    gc.unfreeze()
    with served(engine, library, tmp_path) as srv:
        client = openai.OpenAI(base_url=srv.url, api_key="unused", max_retries=0, timeout=300)
        listed = {m.id: m.model_extra["loaded"] for m in client.models.list().data}
        assert listed == {srv.model_id: True, "alpha": False, "beta": False}  # the bundled file is listed once
        own = client.chat.completions.create(model=srv.model_id, messages=Q, max_tokens=6, temperature=0)
        # Streamed: no bytes until the model is loaded, then the load time in a header.
        with httpx.stream("POST", f"{srv.url}/chat/completions", timeout=300,
                          json={"model": "alpha", "messages": Q, "max_tokens": 6, "temperature": 0,
                                "stream": True}) as r:
            assert r.status_code == 200 and int(r.headers["x-hearth-load-ms"]) > 0
            assert "[DONE]" in r.read().decode()
        raw = client.chat.completions.with_raw_response.create(model="alpha", messages=Q, max_tokens=6,
                                                               temperature=0)
        assert "x-hearth-load-ms" not in raw.headers  # held: no load
        # The load left what it made out of the cyclic GC's reach (serve/runtime/quiet_gc.py).
        assert gc.get_freeze_count() > 0
        gc.unfreeze()
        got = raw.parse()
        assert got.model == "alpha"
        assert got.choices[0].message.content == own.choices[0].message.content  # the same weights, greedy
        assert {m.id: m.model_extra["loaded"] for m in client.models.list().data}["alpha"] is True
        assert client.models.retrieve("alpha").model_extra["loaded"] is True
        # Eight requests at once for a model not loaded: one load, all answered, the load time on each.
        out: list[httpx.Response] = []
        threads = [threading.Thread(target=lambda: out.append(ask(srv, "beta"))) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [r.status_code for r in out] == [200] * 8, [r.text for r in out]
        assert all("x-hearth-load-ms" in r.headers for r in out)
        assert srv.pool.loads == 2  # alpha, then beta once
        with pytest.raises(openai.NotFoundError, match="not in this server's library"):
            client.chat.completions.create(model="gamma", messages=Q, max_tokens=2)
    assert srv.pool.held() == [] or all(h.pinned for h in srv.pool.held())  # stopping unloads the API's


def least_ram(path) -> int:
    """The least RAM the planner gives a model as the pool loads it (on a machine too small for it)."""
    plan = plan_spec(LoadSpec(model=str(path), context=1024, server_parallel=2), simulated("none", "64MiB"))
    assert plan is not None and not plan.fits
    return plan.breakdown.ram.total


def test_the_least_recently_used_model_goes_when_the_next_does_not_fit(engine, library, tmp_path, monkeypatch):
    with served(engine, library, tmp_path) as srv:
        assert ask(srv, "alpha").status_code == 200
        held = {h.model_id: h for h in srv.pool.held()}
        own, alpha = held[srv.model_id].memory, held["alpha"].memory
        need = least_ram(library.models_folder / "beta.gguf")
        # A machine with room for the server's own model and one more, not two.
        monkeypatch.setattr(planning, "machine", lambda *a, **k: simulated("none", own + need + alpha // 2))
        r = ask(srv, "beta")
        assert r.status_code == 200, r.text
        assert "x-hearth-load-ms" in r.headers
        assert [h.model_id for h in srv.pool.held()] == [srv.model_id, "beta"]
        assert srv.pool.unloads[-1] == ("alpha", "unloaded to make room for beta (least recently used)")
        # The server's own model is never unloaded: with no room beside it, a clear 503.
        monkeypatch.setattr(planning, "machine", lambda *a, **k: simulated("none", own + need // 2))
        r = ask(srv, "alpha")
        assert r.status_code == 503, r.text
        err = r.json()["error"]
        assert err["code"] == "model_does_not_fit"
        assert err["message"].startswith(f"alpha cannot be loaded: it does not fit in memory beside {srv.model_id}")
        assert [h.model_id for h in srv.pool.held()] == [srv.model_id, "beta"]  # nothing unloaded in vain
        assert ask(srv, srv.model_id).status_code == 200  # and the server's own still answers


def test_both_stay_when_the_plan_says_both_fit(engine, library, tmp_path, monkeypatch):
    monkeypatch.setattr(planning, "machine", lambda *a, **k: simulated("none", "16GiB"))
    with served(engine, library, tmp_path) as srv:
        assert ask(srv, "alpha").status_code == 200 and ask(srv, "beta").status_code == 200
        assert {h.model_id for h in srv.pool.held()} == {srv.model_id, "alpha", "beta"}
        assert srv.pool.unloads == []


def test_idle_models_are_unloaded_and_keep_alive_sets_their_time(engine, library, tmp_path):
    with served(engine, library, tmp_path, default_ttl=600) as srv:
        assert ask(srv, "alpha").status_code == 200
        assert ask(srv, "beta", keep_alive="5m").status_code == 200
        held = {h.model_id: h for h in srv.pool.held()}
        assert held["alpha"].ttl == 600 and held["beta"].ttl == 300
        assert srv.pool.reap() == []
        held["alpha"].last_used -= 601  # ten minutes without a request
        held["beta"].last_used -= 601
        held[srv.model_id].last_used -= 10 ** 6  # the server's own stays, however long idle
        assert sorted(srv.pool.reap()) == ["alpha", "beta"]
        assert [h.model_id for h in srv.pool.held()] == [srv.model_id]
        # keep_alive 0: unloaded as soon as its request ends; negative: kept however long idle.
        assert ask(srv, "alpha", keep_alive=0).status_code == 200
        assert [h.model_id for h in srv.pool.held()] == [srv.model_id]
        assert ask(srv, "beta", ttl=-1).status_code == 200
        beta = {h.model_id: h for h in srv.pool.held()}["beta"]
        beta.last_used -= 10 ** 7
        assert srv.pool.reap() == []
        bad = ask(srv, "beta", keep_alive="soon")
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "keep_alive"


def test_a_model_goes_after_a_short_ttl_and_its_memory_comes_back(engine, library, tmp_path, monkeypatch):
    import time

    import psutil

    import engine.serve.http.server as server_module

    monkeypatch.setattr(server_module, "REAP_EVERY_S", 0.2)  # the server's own idle check, run often
    me = psutil.Process()
    with served(engine, library, tmp_path, default_ttl=1.0) as srv:
        assert ask(srv, srv.model_id).status_code == 200
        before = me.memory_info().rss
        assert ask(srv, "alpha").status_code == 200
        loaded = me.memory_info().rss
        alpha = {h.model_id: h for h in srv.pool.held()}["alpha"]
        seen_at_close: list = []
        real_close = alpha.scheduler.close
        alpha.scheduler.close = lambda: (seen_at_close.append(list(srv.pool.unloads)), real_close())
        deadline = time.monotonic() + 30
        # it leaves the list before it is closed; the unload is recorded once the close is done
        while not srv.pool.unloads and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [h.model_id for h in srv.pool.held()] == [srv.model_id]  # unloaded by the server's own check
        assert srv.pool.unloads[-1] == ("alpha", "idle for 1 s")
        assert seen_at_close == [[]]  # not reported unloaded while its close was still running
        after = me.memory_info().rss
        assert loaded - before > 20 << 20, (before, loaded)  # the model really took memory
        assert after <= before * 1.10, (before, loaded, after)  # and gave it back
        assert after - before < (loaded - before) / 2, (before, loaded, after)


def test_keep_alive_takes_ollamas_forms():
    assert [keep_alive({"keep_alive": v}) for v in ("5m", "1h", "30s", "250ms", 90, 0, -1, "-1")] == [
        300, 3600, 30, 0.25, 90, 0, float("inf"), float("inf")]
    assert keep_alive({"ttl": 120}) == 120 and keep_alive({}) is None and keep_alive([]) is None
    for bad in ("five minutes", True, [], "5d"):
        with pytest.raises(ApiError):
            keep_alive({"keep_alive": bad})


def test_without_a_pool_another_model_is_a_404(engine):
    with local_server(engine, parallel=1) as srv:
        r = ask(srv, "alpha")
        assert r.status_code == 404 and "this server runs" in r.json()["error"]["message"]
        assert [m["id"] for m in httpx.get(f"{srv.url}/models").json()["data"]] == [srv.model_id]
