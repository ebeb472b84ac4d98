"""``bench serve``'s client side: the official ``openai`` client streaming requests at a server, timed.

Every request is greedy (temperature 0, no penalties) and streamed with ``include_usage``, so the
token count is the server's own. Its TTFT runs from sending the request to the first chunk that
carries text (reasoning included); its TPOT from there to the chunk that ends the reply, over the
tokens after the first (a token with no text of its own still counts, by the usage). A wave keeps
``streams`` requests in flight (each stream sends its next when its last ends), and its
throughput is every generated token over the wave's wall time.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..decode.metrics import percentile

if TYPE_CHECKING:
    import openai

TOPICS = ("a lighthouse", "a mountain village", "a river barge", "a desert market", "a night train",
          "an orchard", "a clock maker", "a fishing boat", "a library", "a glacier", "a bakery", "a comet",
          "a harbour", "a forest fire", "a violin", "a snowstorm")


@dataclass(slots=True)
class StreamedReply:
    """One streamed request, timed on the client (``time.perf_counter``)."""
    start: float
    first: float          # the first chunk with text (the end, if none had any)
    end: float            # the chunk that ended the reply
    tokens: int           # completion tokens (the server's usage)
    prompt_tokens: int
    cached_tokens: int
    text: str
    finish: str | None

    @property
    def ttft_s(self) -> float:
        return self.first - self.start

    @property
    def tpot_s(self) -> float | None:
        """Seconds per output token after the first (None: a reply of one token)."""
        return (self.end - self.first) / (self.tokens - 1) if self.tokens > 1 else None

    @property
    def decode_tok_s(self) -> float | None:
        tpot = self.tpot_s
        return 1.0 / tpot if tpot else None


def make_client(url: str) -> "openai.OpenAI":
    """The official client for ``url`` (a server's /v1): no retries (a failure is the run's), long time-out."""
    try:
        import openai
    except ImportError:
        raise SystemExit("bench serve drives the servers with the official openai client: "
                         "pip install openai (it is in Hearth's dev extra)") from None
    return openai.OpenAI(base_url=url, api_key="bench", max_retries=0, timeout=900)


def sampling_body(ignore_eos: bool) -> dict[str, Any]:
    """What both servers take beyond OpenAI's fields: greedy with every penalty off, and ``ignore_eos``
    (llama-server's and Hearth's name: keep decoding past the end of the reply, to ``max_tokens``)."""
    return {"ignore_eos": ignore_eos, "repeat_penalty": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0}


def stream_one(client: "openai.OpenAI", model: str, messages: list[dict], max_tokens: int, *,
               ignore_eos: bool) -> StreamedReply:
    """One greedy streamed chat request, timed."""
    start = time.perf_counter()
    stream = client.chat.completions.create(
        model=model, messages=messages, max_tokens=max_tokens, temperature=0.0, presence_penalty=0.0,
        frequency_penalty=0.0, stream=True, stream_options={"include_usage": True},
        extra_body=sampling_body(ignore_eos))  # type: ignore[call-overload]
    first: float | None = None
    end = start
    parts: list[str] = []
    usage = None
    finish = None
    for chunk in stream:
        now = time.perf_counter()
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            delta = choice.delta
            text = (delta.content or "") + str((delta.model_extra or {}).get("reasoning_content") or "")
            if text:
                first = now if first is None else first
                parts.append(text)
            if choice.finish_reason is not None:
                finish, end = choice.finish_reason, now
    if usage is None:
        raise RuntimeError(f"{client.base_url} sent no usage (stream_options.include_usage)")
    end = end if finish is not None else time.perf_counter()
    details = usage.prompt_tokens_details
    return StreamedReply(start=start, first=first if first is not None else end, end=end,
                         tokens=usage.completion_tokens, prompt_tokens=usage.prompt_tokens,
                         cached_tokens=(details.cached_tokens or 0) if details else 0, text="".join(parts),
                         finish=finish)


def story(tag: str, i: int) -> list[dict]:
    """A short request whose first words are its own (``tag``), so no server holds its prompt from an
    earlier one beyond the chat template's opening, which both servers may reuse alike."""
    return [{"role": "user", "content": f"Story {tag}-{i}. Write a long story about {TOPICS[i % len(TOPICS)]}."}]


def wave(client: "openai.OpenAI", model: str, prompts: list[list[dict]], streams: int, max_tokens: int, *,
         ignore_eos: bool = True) -> tuple[list[StreamedReply], float]:
    """``prompts`` through ``streams`` concurrent streams (stream k sends prompts k, k+streams, ... one
    after another), started together: the replies in the order of ``prompts``, and the wave's wall time."""
    streams = max(1, min(streams, len(prompts)))
    go = threading.Barrier(streams)
    out: list[StreamedReply | None] = [None] * len(prompts)

    def run(k: int) -> None:
        go.wait()
        for i in range(k, len(prompts), streams):
            out[i] = stream_one(client, model, prompts[i], max_tokens, ignore_eos=ignore_eos)

    with ThreadPoolExecutor(streams) as pool:
        for f in [pool.submit(run, k) for k in range(streams)]:
            f.result()
    replies = [r for r in out if r is not None]
    return replies, max(r.end for r in replies) - min(r.start for r in replies)


def wave_figures(replies: list[StreamedReply], wall_s: float) -> dict[str, Any]:
    """A wave's figures: throughput (generated tokens over its wall time), p50/p99 TTFT and TPOT in ms."""
    ttft = [r.ttft_s * 1e3 for r in replies]
    tpot = [r.tpot_s * 1e3 for r in replies if r.tpot_s is not None]
    tokens = sum(r.tokens for r in replies)
    return {"requests": len(replies), "tokens": tokens, "tok_s": round(tokens / wall_s, 2) if wall_s > 0 else 0.0,
            "ttft_ms_p50": round(percentile(ttft, 50), 1), "ttft_ms_p99": round(percentile(ttft, 99), 1),
            "tpot_ms_p50": round(percentile(tpot, 50), 2), "tpot_ms_p99": round(percentile(tpot, 99), 2),
            "prompt_tokens": sorted(r.prompt_tokens for r in replies)[len(replies) // 2] if replies else 0}
