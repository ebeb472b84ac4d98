"""OpenAI image_url parts on the local server, driven by the real openai client: data: URLs are
read (through the engine, one at a time beside the batch), network URLs and bad images are a 400."""
from __future__ import annotations

import base64

import openai
import pytest

from serving import local_server
from test_images import png

URL = "data:image/png;base64,"


@pytest.fixture(scope="module")
def vision_engine(tiny_vlm):
    from engine.engine import Engine
    from engine.config import EngineConfig

    model, mmproj = tiny_vlm
    e = Engine.open(EngineConfig(model, n_ctx=2048, n_threads=2, mmproj=mmproj))
    yield e
    e.close()


@pytest.fixture(scope="module")
def client(vision_engine):
    with local_server(vision_engine, parallel=2) as srv:
        yield openai.OpenAI(base_url=srv.url, api_key="x", max_retries=0, timeout=120)


def image_message(data: bytes, text: str = "What is in this picture?") -> list[dict]:
    return [{"role": "user", "content": [
        {"type": "text", "text": text},
        {"type": "image_url", "image_url": {"url": URL + base64.b64encode(data).decode()}}]}]


def test_an_image_is_read_and_a_second_question_reads_it_from_the_cache(client, vision_engine):
    model = client.models.list().data[0].id
    msgs = image_message(png(20))
    first = client.chat.completions.create(model=model, messages=msgs, max_tokens=8, temperature=0)
    assert first.choices[0].message.content
    encodes = vision_engine.backend._projector.encodes
    again = client.chat.completions.create(model=model, messages=msgs, max_tokens=8, temperature=0)
    assert again.choices[0].message.content == first.choices[0].message.content
    assert again.usage.prompt_tokens_details.cached_tokens >= again.usage.prompt_tokens - 1
    assert vision_engine.backend._projector.encodes == encodes
    chunks = list(client.chat.completions.create(model=model, messages=msgs, max_tokens=8, temperature=0,
                                                 stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == first.choices[0].message.content
    # text-only requests beside it still go through the batch
    plain = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=4)
    assert plain.choices[0].message.content is not None


@pytest.mark.parametrize("url, match", [
    ("https://example.com/cat.png", "fetches nothing from the network"),
    ("file:///etc/passwd", "fetches nothing"),
    ("data:image/png;base64,@@@@", "not valid base64"),
    (URL + base64.b64encode(png(21)[:300]).decode(), "corrupt|truncated"),
    (URL + base64.b64encode(b"BM" + b"\0" * 100).decode(), "PNG, JPEG, WebP or GIF"),
    ("data:text/plain,hello", "base64 data: URL of an image"),
])
def test_unreadable_or_remote_images_are_a_clear_400(client, url, match):
    model = client.models.list().data[0].id
    msgs = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}]
    with pytest.raises(openai.BadRequestError, match=match) as e:
        client.chat.completions.create(model=model, messages=msgs, max_tokens=4)
    assert e.value.body["param"].startswith("messages[0].content")


def test_an_image_sent_to_a_text_only_model_is_a_400(engine):
    with local_server(engine) as srv:
        c = openai.OpenAI(base_url=srv.url, api_key="x", max_retries=0, timeout=60)
        with pytest.raises(openai.BadRequestError, match="cannot see images"):
            c.chat.completions.create(model=c.models.list().data[0].id, messages=image_message(png(22)),
                                      max_tokens=4)


def test_the_anthropic_and_responses_endpoints_read_base64_images_too(client, vision_engine):
    import anthropic

    base = str(client.base_url).rstrip("/").removesuffix("/v1")
    model = client.models.list().data[0].id
    data = base64.b64encode(png(23)).decode()
    a = anthropic.Anthropic(base_url=base, api_key="x", max_retries=0, timeout=120)
    block = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}
    first = a.messages.create(model=model, max_tokens=6, messages=[{"role": "user", "content": [
        block, {"type": "text", "text": "What is it?"}]}], extra_body={"temperature": 0})
    # Anthropic counts the prompt as computed + read from the cache (earlier tests left a prefix there).
    prompt = first.usage.input_tokens + first.usage.cache_read_input_tokens
    assert first.content and first.usage.input_tokens > 20  # the image's positions were computed
    encodes = vision_engine.backend._projector.encodes
    r = client.responses.create(model=model, max_output_tokens=6, temperature=0, input=[{"role": "user", "content": [
        {"type": "input_image", "image_url": URL + data}, {"type": "input_text", "text": "What is it?"}]}])
    # The same prompt through the other protocol: the same tokens, the image read from the cache.
    assert r.output_text is not None and r.usage.input_tokens == prompt
    assert r.usage.input_tokens_details.cached_tokens >= prompt - 1
    assert vision_engine.backend._projector.encodes == encodes
