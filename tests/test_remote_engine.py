"""The remote engine against a real Hearth server: the same reply as the local engine, Stop, and every fault.

A real LocalServer serves the bundled model on 127.0.0.1; the faults come from
tests/fault_proxy.py in front of it (a cut, a stall, garbled events) or from the
server itself (a wrong key, a model it does not serve, its rate limit). Token
counts are the local engine's on Hearth (its count route) and on llama.cpp's own
llama-server (built from the vendored source, as scripts/test.sh does at set-up),
and an estimate, said so, on a server that cannot count.
"""
from __future__ import annotations

import dataclasses

import threading
import time

import pytest

from engine import HearthError, Message, SamplingParams
from engine.remote.client import Client
from engine.remote.connect import open_remote
from engine.remote.engine import RemoteEngine, wire_message
from engine.remote.pins import MemoryPins
from engine.prompt.messages import ToolCall
from engine.remote.think import ThinkSplitter
from engine.remote.errors import RemoteError
from engine.remote.token_count import EstimatedCount, HearthCount, LlamaServerCount, anthropic_body
from engine.remote.transport import Endpoint
from engine.serve.runtime.scheduler import Scheduler
from engine.serve.http.server import LocalServer
from tests.fault_proxy import FaultProxy
from tests.serving import local_server
from test_serve_reasoning import thinking_engine  # noqa: F401 (a fixture: the bundled model under Qwen3's template)

GREEDY = SamplingParams(temperature=0.0, max_tokens=24)
ASK = [Message("system", "You are brief."), Message("user", "Name three colours.")]
TALK = [*ASK, Message("assistant", "Red, green and blue."), Message("user", "And two more?")]
TOOLS = [Message("system", "You add."), Message("user", "What is 2 + 3?"),
         Message("assistant", reasoning="Add them.", tool_calls=(ToolCall("call_1", "add", '{"a": 2, "b": 3}'),)),
         Message("tool", "5", tool_call_id="call_1"), Message("assistant", "It is 5."), Message("user", "And 4 + 4?")]


@pytest.fixture(scope="module")
def server(engine):
    with local_server(engine) as srv:
        yield srv


def remote(url: str, **kw) -> RemoteEngine:
    return open_remote(url, kw.pop("key", None), pins=MemoryPins(), **kw)


def events_of(eng, messages=ASK, params=GREEDY, **kw):
    return list(eng.stream(messages, params, **kw))


def test_a_remote_reply_is_the_local_engines_reply_with_the_servers_counts(engine, server):
    local = events_of(engine)
    eng = remote(server.url)
    assert eng.describe().backend == "remote" and eng.describe().n_ctx == engine.n_ctx  # the server's context_length
    first = events_of(eng)
    again = events_of(eng)
    assert first[-1].kind == "final" and first[-1].text == local[-1].text != ""
    assert "".join(e.text for e in first if e.kind == "delta") == first[-1].text
    st = first[-1].stats
    assert st.backend == "remote" and st.prompt_tokens == local[-1].stats.prompt_tokens
    assert st.generated_tokens == local[-1].stats.generated_tokens and st.ttft_ms > 0
    assert first[-1].finish_reason == local[-1].finish_reason
    assert again[-1].text == first[-1].text and again[-1].stats.cached_tokens > 0  # the server's prefix cache
    live = [e.stats.live() for e in first if e.kind == "delta"]
    assert live[-1]["tokens"] >= 1


def test_stop_ends_a_remote_reply_within_300_ms_and_keeps_the_partial_reply(server):
    eng = remote(server.url)
    cancel = threading.Event()
    seen: list[str] = []
    stopped_at = None
    for ev in eng.stream(ASK, SamplingParams(temperature=0.0, max_tokens=400, ignore_eos=False), cancel=cancel):
        if ev.kind == "delta":
            seen.append(ev.text)
            if len(seen) == 3:
                cancel.set()
                stopped_at = time.perf_counter()
        elif ev.kind == "final":
            final = ev
    assert stopped_at is not None and time.perf_counter() - stopped_at < 0.3
    assert final.finish_reason == "cancelled" and final.text == "".join(seen)[:len(final.text)]
    assert final.text.startswith("".join(seen[:3]))


def test_stop_works_while_the_server_sends_nothing(server):
    with FaultProxy(("127.0.0.1", server.port), "stall", after=0) as proxy:
        eng = remote(server.url)
        eng.client.endpoint = Endpoint.parse(proxy.url)
        cancel = threading.Event()
        threading.Timer(0.5, cancel.set).start()
        t0 = time.perf_counter()
        final = events_of(eng, cancel=cancel)[-1]
        assert final.finish_reason == "cancelled" and time.perf_counter() - t0 < 0.5 + 0.3


def test_a_server_that_never_answers_times_out_with_one_line(server):
    with FaultProxy(("127.0.0.1", server.port), "silent") as proxy:
        client = Client(Endpoint.parse(proxy.url), pins=MemoryPins(), idle_timeout=0.6)
        with pytest.raises(RemoteError) as e:
            client.models()
        assert e.value.kind == "timeout" and "timed out" in str(e.value) and "\n" not in str(e.value)


def test_a_server_that_goes_away_mid_reply_keeps_the_partial_reply(server):
    with FaultProxy(("127.0.0.1", server.port), "cut", after=1200) as proxy:
        eng = remote(server.url)
        eng.client.endpoint = Endpoint.parse(proxy.url)
        got: list[str] = []
        with pytest.raises(RemoteError) as e:
            for ev in eng.stream(ASK, SamplingParams(temperature=0.0, max_tokens=200)):
                got.append(ev.text)
        assert e.value.kind == "lost" and "partial reply is kept" in str(e.value)
        assert "".join(got)  # what arrived before the cut was handed on


@pytest.mark.parametrize("mode", ["corrupt", "garbage_json"])
def test_a_garbled_stream_is_a_clear_error(server, mode):
    with FaultProxy(("127.0.0.1", server.port), mode) as proxy:
        eng = remote(server.url)
        eng.client.endpoint = Endpoint.parse(proxy.url)
        with pytest.raises(RemoteError) as e:
            events_of(eng)
        assert e.value.kind == "malformed" and ("not server-sent events" in str(e.value) or "not JSON" in str(e.value))


@pytest.mark.parametrize("status,kind,wait,said", [(503, "unavailable", 7, "is unavailable (503); it asks to wait 7 s"),
                                                   (429, "rate_limited", 3, "too many requests (429)"),
                                                   (401, "auth", None, "refused the API key (401)"),
                                                   (500, "http", None, "500")])
def test_error_statuses_say_what_happened(server, status, kind, wait, said):
    body = b'{"error": {"message": "busy loading"}}'
    retry = b"" if wait is None else b"Retry-After: %d\r\n" % wait
    with FaultProxy(("127.0.0.1", server.port), "status") as proxy:
        proxy.response = (b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n%s"
                          % (status, retry, len(body), body))
        with pytest.raises(RemoteError) as e:
            remote(proxy.url)
    assert e.value.kind == kind and e.value.status == status and e.value.retry_after == wait
    assert "busy loading" in str(e.value) and said in str(e.value)  # the words the window shows


def test_a_refused_connection_and_a_wrong_model_say_why():
    s = __import__("socket").create_server(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(RemoteError) as e:
        remote(f"http://127.0.0.1:{port}")
    assert e.value.kind == "refused" and "refused the connection" in str(e.value)


def test_a_model_the_server_does_not_serve_is_named(server):
    with pytest.raises(RemoteError) as e:
        remote(server.url, model="no-such-model")
    assert e.value.kind == "not_found" and server.model_id in str(e.value)
    eng = remote(server.url)
    eng.model = type(eng.model)("no-such-model")  # the server unloaded it since
    with pytest.raises(RemoteError) as e:
        events_of(eng)
    assert e.value.kind == "not_found" and e.value.status == 404


def test_the_key_is_sent_and_a_wrong_one_is_refused_and_the_rate_limit_says_when(engine):
    sched = Scheduler(engine)
    srv = LocalServer(port=0, api_key="sekrit", rate_limit=2)
    srv.attach(sched)
    srv.start()
    try:
        with pytest.raises(RemoteError) as e:
            remote(srv.url, key="wrong")
        assert e.value.kind == "auth" and e.value.status == 401
        eng = remote(srv.url, key="sekrit")  # request 1 of 2
        assert events_of(eng, params=SamplingParams(temperature=0.0, max_tokens=2))[-1].text  # request 2
        with pytest.raises(RemoteError) as e:
            events_of(eng)
        assert e.value.kind == "rate_limited" and e.value.retry_after and e.value.retry_after >= 1
    finally:
        srv.stop()
        sched.close()


def test_messages_go_out_in_openais_shape():
    from engine.prompt.messages import ImagePart, ToolCall

    img = ImagePart("a" * 64, "image/png", b"\x89PNG")
    m = wire_message(Message.of("user", "what is this?", img))
    assert m["content"][1] == {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw=="}}
    call = wire_message(Message("assistant", tool_calls=(ToolCall("c1", "f", '{"a": 1}'),)))
    assert call["tool_calls"][0]["function"] == {"name": "f", "arguments": '{"a": 1}'} and call["content"] is None
    assert wire_message({"role": "tool", "content": "42", "tool_call_id": "c1"})["tool_call_id"] == "c1"
    with pytest.raises(HearthError):
        wire_message(Message.of("user", ImagePart("b" * 64, "image/png")))  # no bytes at hand


def test_think_tags_split_on_this_side_even_when_cut_across_chunks():
    s = ThinkSplitter()
    out = []
    for c in ["  <th", "ink>\nlet me", " see</th", "ink>\n\nBlue", "."]:
        out += s.feed(c)
    out += s.close()
    assert "".join(t for k, t in out if k == "reasoning") == "let me see"
    assert "".join(t for k, t in out if k == "delta") == "Blue."
    plain = ThinkSplitter()
    assert plain.feed("Hello <think>") == [("delta", "Hello <think>")] and plain.close() == []


@pytest.mark.parametrize("url,expect", [("192.168.1.2:8765", "http://192.168.1.2:8765/v1"),
                                        ("https://gpu.lan/v1/", "https://gpu.lan:443/v1"),
                                        ("http://[::1]:9/api/v1", "http://[::1]:9/api/v1")])
def test_a_server_url_as_people_type_it(url, expect):
    assert Endpoint.parse(url).url == expect


@pytest.mark.parametrize("url", ["", "ftp://x", "http://host:99999", "http://u:p@host"])
def test_a_bad_server_url_is_refused_in_one_line(url):
    with pytest.raises(HearthError):
        Endpoint.parse(url)


def test_llama_servers_timings_give_the_cached_and_computed_prompt_tokens():
    from openai_script import ScriptServer

    script = ScriptServer([], ["Hi", "!"], usage=None,
                          timings={"cache_n": 40, "prompt_n": 8, "prompt_ms": 12.5, "predicted_n": 2})
    try:
        final = events_of(remote(script.url))[-1]
    finally:
        script.close()
    st = final.stats
    assert (st.cached_tokens, st.prefill_tokens, st.prompt_tokens, st.prefill_ms) == (40, 8, 48, 12.5)
    assert final.text == "Hi!" and st.generated_tokens == 2 and final.finish_reason == "eos"


def test_required_with_one_tool_is_sent_as_that_tool_and_what_is_not_sent_is_noted(server):
    from engine.reply_formats.tools import Tool

    eng = remote(server.url)
    one, two = Tool("add"), Tool("mul")
    body, _ = eng.payload(ASK, GREEDY, eng.plan_tools([one], "required"))
    assert body["tool_choice"] == {"type": "function", "function": {"name": "add"}}  # llama_cpp.server: no "required"
    body, _ = eng.payload(ASK, GREEDY, eng.plan_tools([one, two], "required"))
    assert body["tool_choice"] == "required" and [t["function"]["name"] for t in body["tools"]] == ["add", "mul"]
    # A thinking budget goes to a Hearth (its models are owned_by hearth), and is noted as not sent elsewhere.
    body, notes = eng.payload(ASK, SamplingParams(reasoning_budget=5), None)
    assert eng.model.owned_by == "hearth" and body["reasoning_budget_tokens"] == 5 and notes == []
    eng.model = dataclasses.replace(eng.model, owned_by="llamacpp")
    body, notes = eng.payload(ASK, SamplingParams(reasoning_budget=5), None)
    assert "reasoning_budget_tokens" not in body and any("thinking budget" in n for n in notes)
    eng.extras = False  # a server that takes OpenAI's fields only
    body, notes = eng.payload(ASK, SamplingParams(temperature=0.5, top_k=20, grammar="root ::= \"x\""), None)
    assert "top_k" not in body and "grammar" not in body and body["temperature"] == 0.5
    assert any("top_k" in n for n in notes) and any("grammar" in n for n in notes)


def test_a_hearth_server_counts_tokens_exactly_with_its_models_template(engine, server):
    eng = remote(server.url)
    assert isinstance(eng.counter, HearthCount) and eng.describe().capabilities.exact_tokens
    for msgs in (ASK, TALK, TOOLS, [Message("user", "Hi")]):
        assert eng.count_tokens(msgs) == engine.count_tokens(msgs) > 0, msgs
    # what a reply's prompt takes there is what was counted
    assert events_of(eng, TALK, SamplingParams(temperature=0.0, max_tokens=2))[-1].stats.prompt_tokens == \
        eng.count_tokens(TALK)
    # the template's variables go with the count (a Think choice), checked by the server as a reply's are
    with pytest.raises(RemoteError) as e:
        eng.count_tokens(ASK, {"messages": []})
    assert e.value.status == 400 and "set by the server" in str(e.value)


def test_the_messages_cross_in_anthropics_shape_and_read_back_the_same():
    from engine.serve.protocols.anthropic import parse_anthropic

    body = anthropic_body("m", TOOLS)
    assert body["system"] == "You add." and [t["role"] for t in body["messages"]] == ["user", "assistant", "user",
                                                                                        "assistant", "user"]
    back = parse_anthropic({**body, "max_tokens": 1}).messages
    assert back == TOOLS  # Hearth's server reads them into the messages the local engine counts


def test_a_hearth_servers_think_control_is_offered_counted_and_sent(thinking_engine):  # noqa: F811
    ask, off = [Message("user", "Say hi.")], {"enable_thinking": False}
    with local_server(thinking_engine) as srv:
        eng = remote(srv.url)
        assert eng.describe().think == thinking_engine.think and eng.capabilities().think  # the model list's
        assert eng.count_tokens(ask) == thinking_engine.count_tokens(ask)
        assert eng.count_tokens(ask, off) == thinking_engine.count_tokens(ask, off) > eng.count_tokens(ask)
        final = list(eng.stream(ask, SamplingParams(temperature=0.0, max_tokens=2), template_kwargs=off))[-1]
        assert srv.finished[-1].request.template_kwargs == off  # sent as chat_template_kwargs
        assert final.stats.prompt_tokens == thinking_engine.count_tokens(ask, off)
        # A thinking budget goes to a Hearth as reasoning_budget_tokens, which its engine closes the block at.
        budgeted = SamplingParams(temperature=0.0, max_tokens=24, reasoning_budget=3)
        final = list(eng.stream(ask, budgeted))[-1]
        assert srv.finished[-1].request.params.reasoning_budget == 3
        assert not any("budget" in n for n in final.stats.notes), final.stats.notes


@pytest.fixture(scope="module")
def llama_cpp_server(bundled_path, tmp_path_factory):
    """llama.cpp's llama-server serving the bundled model on 127.0.0.1 (built once, as bench serve builds it)."""
    import subprocess
    import urllib.request

    from engine.bench import llama_tools
    from engine.bench.serve_sides import free_port, llama_server_command, llama_server_env

    binary = llama_tools.ensure_tools(targets=(llama_tools.SERVER,)) / llama_tools.SERVER
    port = free_port()
    log = tmp_path_factory.mktemp("llama-server") / "stderr.txt"
    with open(log, "w") as err:
        proc = subprocess.Popen(llama_server_command(binary, bundled_path, parallel=1, n_ctx_seq=2048, threads=1,
                                                     port=port, exactness="fast"),
                                stdout=subprocess.DEVNULL, stderr=err, env=llama_server_env("fast"))
    deadline = time.monotonic() + 120
    while True:  # /health answers 200 once the model is loaded (503 until then)
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"llama-server did not start: {log.read_text()[-2000:]}")
        time.sleep(0.2)
    yield f"http://127.0.0.1:{port}/v1"
    proc.terminate()
    proc.wait(30)


@pytest.mark.timeout(1800)  # the first run on a machine builds llama-server (scripts/test.sh does it at set-up)
def test_llama_server_counts_tokens_exactly_with_its_template_and_tokenizer(engine, llama_cpp_server):
    eng = remote(llama_cpp_server)
    assert isinstance(eng.counter, LlamaServerCount) and eng.describe().capabilities.exact_tokens
    for msgs in (ASK, TALK, [Message("user", "Hi")]):
        assert eng.count_tokens(msgs) == engine.count_tokens(msgs) > 0, msgs
    final = events_of(eng, TALK, SamplingParams(temperature=0.0, max_tokens=2))[-1]
    assert final.stats.prompt_tokens == eng.count_tokens(TALK)  # the server's own count of the reply's prompt


def test_a_server_that_cannot_count_is_marked_as_estimating_and_asked_once():
    from openai_script import ScriptServer

    script = ScriptServer([], ["Hi"])
    try:
        eng = remote(script.url)
        assert isinstance(eng.counter, EstimatedCount)
        assert not eng.describe().capabilities.exact_tokens and not eng.capabilities().exact_tokens
        assert eng.count_tokens(ASK) == -(-sum(len(m.content) + 16 for m in ASK) // 4)  # about 4 characters a token
        eng.count_tokens(TALK)
        assert script.other == ["/apply-template"] and script.requests == []  # one try, at open; no reply asked
    finally:
        script.close()


def test_background_work_reaches_a_hearth_server_as_background_and_the_window_keeps_the_keys_default(server):
    """The class a caller gives (a title, a batch job: background) crosses to a Hearth server, whose core then
    queues it behind the people it serves; interactive work and the window's send none (the key's default)."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    from engine.core.job import Priority

    def finished(priority: str) -> float:
        text = httpx.get(server.url.removesuffix("/v1") + "/metrics", timeout=30).text
        return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
                   if s.name == "hearth:request_success_total" and s.labels.get("priority") == priority)

    eng = remote(server.url)
    short = SamplingParams(temperature=0.0, max_tokens=2)
    before = {p: finished(p) for p in ("background", "interactive")}
    events_of(eng, ASK, short, priority=Priority.BACKGROUND)
    assert finished("background") == before["background"] + 1
    events_of(eng, ASK, short, priority=Priority.INTERACTIVE)
    events_of(eng, ASK, short)  # the window's (0)
    assert finished("background") == before["background"] + 1
    assert finished("interactive") == before["interactive"] + 2
