"""A local server for tests: a scheduler over an engine, served on an ephemeral 127.0.0.1 port."""
from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from engine.backends.llama.backend import LlamaCppBackend
from engine.engine import Engine
from engine.models.gguf import model_info
from engine.serve.runtime.scheduler import Scheduler
from engine.serve.http.server import LocalServer


@contextmanager
def local_server(engine, *, pool=None, **scheduler_kw) -> Iterator[LocalServer]:
    """A started LocalServer serving ``engine`` through a new Scheduler(**scheduler_kw) (and with
    ``pool``, the library's models); stopped, and the scheduler closed, on exit (the engine stays open)."""
    sched = Scheduler(engine, **scheduler_kw)
    srv = LocalServer(port=0, pool=pool)
    srv.attach(sched)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()
        sched.close()


def hold_one(sched: Scheduler):
    """A request through ``sched`` that runs until cancelled, started for sure (its first token is out):
    with ``parallel=1`` it holds the one sequence API requests may use. Returns the ticket and its events."""
    from engine.prompt.messages import Message
    from engine.serve import ServeRequest
    from engine.types import SamplingParams

    t = sched.submit(ServeRequest(messages=[Message("user", "Count to a million.")],
                                  params=SamplingParams(temperature=0, max_tokens=100_000, ignore_eos=True)))
    it = t.events()
    assert next(it).kind == "delta"
    return t, it


QWEN = (Path(__file__).parent / "fixtures" / "templates" / "Qwen-Qwen2.5-7B-Instruct.jinja").read_text()


@contextmanager
def qwen_tool_engine(bundled_path, n_ctx: int = 4096) -> Iterator[Engine]:
    """The bundled model wearing Qwen 2.5's real chat template (Hermes ``<tool_call>`` syntax),
    as if its GGUF carried it: a model that takes tools."""
    info = dataclasses.replace(model_info(bundled_path), chat_template=QWEN)
    e = Engine(LlamaCppBackend(bundled_path, n_ctx=n_ctx, n_threads=2, info=info))
    try:
        yield e
    finally:
        e.close()


def assert_other_protocols(base: str, key: str, model: str) -> None:
    """The official anthropic client and the openai client's ``responses`` API, streamed and not."""
    import anthropic
    import openai

    a = anthropic.Anthropic(base_url=base, api_key=key, max_retries=0, timeout=120)
    system, msgs = "You answer in a few words.", [{"role": "user", "content": "Name a colour of the sky."}]
    first = a.messages.create(model=model, max_tokens=4, system=system, messages=msgs, extra_body={"temperature": 0})
    second = a.messages.create(model=model, max_tokens=4, system=system, messages=msgs, extra_body={"temperature": 0})
    assert first.content[0].text and second.content[0].text == first.content[0].text
    assert second.usage.cache_read_input_tokens > 0  # the system prompt and the question, read from the cache
    with a.messages.stream(model=model, max_tokens=4, system=system, messages=msgs,
                           extra_body={"temperature": 0}) as st:
        streamed = "".join(st.text_stream)
        final = st.get_final_message()
    assert streamed == first.content[0].text and final.usage.cache_read_input_tokens > 0
    o = openai.OpenAI(base_url=base + "/v1", api_key=key, max_retries=0, timeout=120)
    r1 = o.responses.create(model=model, instructions=system, input="Name a colour of the sky.",
                            max_output_tokens=4, temperature=0)
    assert r1.output_text and r1.usage.input_tokens > 0
    events = list(o.responses.create(model=model, instructions=system, input="Name a colour of the sky.",
                                     max_output_tokens=4, temperature=0, stream=True))
    # max_output_tokens reached: the Responses API's "incomplete" ending, as the whole reply's status says
    assert events[-1].type == f"response.{r1.status}" and events[-1].response.output_text == r1.output_text
    assert events[-1].response.usage.input_tokens_details.cached_tokens > 0


@contextmanager
def hearth_process(folder: Path, *extra: str) -> Iterator[tuple[str, int]]:
    """Another Hearth: ``python -m engine serve --port 0 --no-library --ctx 2048 --threads 1 EXTRA...``
    in its own process and data folder (a second machine, as far as a client can tell): (url, port)."""
    import os

    from engine.bench.remote import serve_process

    proc, url = serve_process(["--ctx", "2048", "--threads", "1", *extra], folder / "stderr.txt",
                             env={**os.environ, "HEARTH_DATA_DIR": str(folder)})
    try:
        yield url, int(url.rsplit(":", 1)[1].split("/")[0])
    finally:
        proc.terminate()
        proc.wait(30)
