"""Per-reply metrics, filled in with ``time.perf_counter()`` by the stream loop:
one record per reply (its timeline included), and the table of how a reply can end."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Mapping


@dataclass(frozen=True, slots=True)
class Finish:
    """What one way of ending a reply means to its readers."""
    complete: bool  # the model ended it where it meant to; any other ending leaves the reply cut short
    openai: str     # the OpenAI API's ``finish_reason`` for it


# The one table of how a reply can end (``StreamEvent.finish_reason``): the window,
# the store and every API protocol read it here. "cancelled" (Stop in the window,
# a client that left, a server shutting down) is never complete, and the API says
# "cancelled" rather than pass a cut-short reply off as a natural "stop".
FINISH_REASONS: dict[str, Finish] = {
    "eos": Finish(complete=True, openai="stop"),
    "stop_string": Finish(complete=True, openai="stop"),
    "max_tokens": Finish(complete=False, openai="length"),
    "context_full": Finish(complete=False, openai="length"),
    "cancelled": Finish(complete=False, openai="cancelled"),
    "tool_calls": Finish(complete=True, openai="tool_calls"),  # the reply ended with its tool calls
}


def is_complete(reason: str | None) -> bool:
    """Whether a reply that ended for ``reason`` is whole (unknown reasons are not)."""
    finish = FINISH_REASONS.get(reason or "")
    return finish is not None and finish.complete


def openai_finish_reason(reason: str | None) -> str:
    """The OpenAI API's ``finish_reason`` for the engine's ``reason`` ("stop" for one it does not know)."""
    finish = FINISH_REASONS.get(reason or "")
    return finish.openai if finish is not None else "stop"


# The non-overlapping segments of a reply, in request order (a stacked bar): each
# part's name and the field that holds it. With ``other_ms`` they add up to ``e2e_ms``.
PARTS = {"template": "template_ms", "tokenize": "tokenize_ms", "queue_wait": "queue_wait_ms",
         "prefill": "prefill_ms", "decode": "forward_ms", "sampling": "sampling_ms",
         "detokenize": "detokenize_ms"}

SERVER_BACKEND = "remote"  # the ``backend`` of a reply a server wrote (the remote engine's stats)


def from_server(m: Mapping[str, Any]) -> bool:
    """A reply's metrics (``GenerationStats.as_dict``, as the store keeps them) came from a server, which
    gives its prompt and prefill figures only where it says them."""
    return m.get("backend") == SERVER_BACKEND


@dataclass(slots=True)
class GenerationStats:
    """One reply's figures, each held once, in ms; stored with the message (``as_dict``).

    The stream loop fills in the counts and the request's timing; while the reply
    streams, every delta event carries this record as it stands (``live()``). When
    the engine records the timeline (``timed``), the breakdown below says where the
    time went. ``prefill_ms`` has one meaning: reading the prompt, from its tokens
    being ready to the first token's logits (KV reuse, the prefill chunks and the
    first forward), without the template, the tokenizer or a queue; on a timed reply
    choosing that first token counts under ``sampling_ms`` instead. (Records stored
    before the timeline joined this one, and kept without a timeline, measured it from
    the request's start.)
    ``ttft_ms`` and ``e2e_ms`` include ``queue_wait_ms``: the user waited it too.
    """

    prompt_tokens: int = 0
    cached_tokens: int = 0       # prompt tokens whose KV was reused, not recomputed
    prefill_tokens: int = 0      # prompt tokens actually computed
    prefill_ms: float = 0.0      # see the docstring
    ttft_ms: float = 0.0         # request (queue included) -> first text (answer or reasoning) handed to the caller
    generated_tokens: int = 0
    decode_ms: float = 0.0       # first token -> last token
    tpot_ms: float = 0.0         # mean time per output token after the first
    decode_tok_s: float = 0.0
    e2e_ms: float = 0.0          # request (queue included) -> final event
    finish_reason: str = ""
    backend: str = ""
    profile: str = ""            # llama.cpp's exactness profile that wrote the reply ("exact", "fast")
    n_ctx: int = 0               # the context window: prompt + reply must fit in it
    dropped_messages: int = 0    # oldest messages left out so the conversation fits
    # -- fitting the context (engine/prompt/view.py): what acted, and what it cost --
    context_policy: str = ""     # "drop_oldest", "shift" or "compact" when it acted for this reply ("": nothing did)
    view_start: int = 0          # the caller's index of the first message after the cut (0: nothing left out)
    summarized_messages: int = 0  # messages compaction summarized for this reply
    summary: str = ""            # compaction's summary, written for this reply ("": none)
    shifted_tokens: int = 0      # tokens of KV moved into place instead of read again (shift)
    reread_tokens: int = 0       # tokens read again because the view moved mid-reply
    context_ms: float = 0.0      # compaction's summary (its prefill and decode), or making room mid-reply
    spec: dict | None = field(default=None)  # speculative-decoding stats, when used
    # -- reasoning (a thinking model's block, engine/formats): 0 where the reply had none --
    reasoning_tokens: int = 0    # tokens inside the reasoning block, its tags included
    answer_tokens: int = 0       # every other generated token
    ttft_answer_ms: float = 0.0  # request (queue included) -> first answer text; ttft_ms is text of any kind
    reasoning_at_ms: float = 0.0  # the thinking span's start on the request's clock (queue included)
    reasoning_ms: float = 0.0    # the thinking span: first reasoning text -> the block's end (or the last token)
    reasoning_tok_s: float = 0.0
    answer_tok_s: float = 0.0
    notes: list[str] = field(default_factory=list)  # sentences for the user (a thinking budget's close)
    tool_resamples: int = 0      # tool-call sections sampled again after a call failed its schema
    # -- the timeline: where the time went (engine/timeline.py records it) --
    timed: bool = False          # the fields below were recorded for this reply
    template_ms: float = 0.0     # rendering the chat template
    tokenize_ms: float = 0.0     # turning the rendered text into token ids
    queue_wait_ms: float = 0.0   # waiting for a scheduler's turn (0 when not scheduled)
    forward_ms: float = 0.0      # the decode steps less their sampling and detokenizing: forward passes
    sampling_ms: float = 0.0     # choosing tokens (and judging drafts), all tokens
    detokenize_ms: float = 0.0   # token ids -> text, stop strings
    step_ms: list[float] = field(default_factory=list)  # token i's arrival -> token i+1's
    kv_used: int = 0             # tokens in the KV at the end of the reply
    cache_hits: int = 0          # prefix-cache snapshots served during this reply
    cache_inserts: int = 0       # snapshots stored during this reply
    cache_evictions: int = 0     # snapshots evicted to make room during this reply

    def finish(self, *, t_start: float, t_first_text: float | None, t_first_token: float | None,
               t_last_token: float | None, t_end: float) -> None:
        """Derive the timing fields from the timestamps the loop recorded."""
        self.e2e_ms = (t_end - t_start) * 1e3 + self.queue_wait_ms
        # No visible text at all (an immediate stop): TTFT is the whole request.
        self.ttft_ms = self.e2e_ms if t_first_text is None else (t_first_text - t_start) * 1e3 + self.queue_wait_ms
        if t_first_token is not None and t_last_token is not None and self.generated_tokens > 1:
            self.decode_ms = (t_last_token - t_first_token) * 1e3
            self.tpot_ms = self.decode_ms / (self.generated_tokens - 1)
            self.decode_tok_s = 1e3 / self.tpot_ms if self.tpot_ms > 0 else 0.0

    def live(self) -> dict[str, float]:
        """The figures so far while the reply streams: tokens, decode tok/s and TTFT
        (the loop keeps ``generated_tokens``, ``decode_ms`` and ``ttft_ms`` current)."""
        n = self.generated_tokens
        rate = (n - 1) * 1e3 / self.decode_ms if n > 1 and self.decode_ms > 0 else 0.0
        return {"tokens": n, "tok_s": rate, "ttft_ms": self.ttft_ms}

    def record_queue_wait(self, ms: float) -> None:
        """A scheduler's way to add the time this request waited before the engine
        started it: the user waited it too, so TTFT and end-to-end grow by it."""
        if ms < 0:
            raise ValueError(f"queue wait cannot be negative: {ms}")
        self.queue_wait_ms += ms
        self.ttft_ms += ms
        self.e2e_ms += ms
        if self.ttft_answer_ms:
            self.ttft_answer_ms += ms

    # -- figures derived from the ones above -------------------------------------

    def parts(self) -> dict[str, float]:
        """The non-overlapping segments of the reply, in order, in ms (a stacked bar)."""
        return {name: getattr(self, f) for name, f in PARTS.items()}

    @property
    def other_ms(self) -> float:
        """What ``parts()`` leaves out of ``e2e_ms``: glue between the parts."""
        return self.e2e_ms - sum(getattr(self, f) for f in PARTS.values())

    @property
    def prefill_tok_s(self) -> float:
        return self.prefill_tokens * 1e3 / self.prefill_ms if self.prefill_ms > 0 else 0.0

    @property
    def thinking_span_ms(self) -> tuple[float, float] | None:
        """Where the reply thought, on the request's clock (ms from its start, queue
        included, like ``e2e_ms``): the timeline's thinking span; None without reasoning."""
        if not self.reasoning_tokens or not (self.reasoning_at_ms or self.reasoning_ms):
            return None
        return self.reasoning_at_ms, self.reasoning_at_ms + self.reasoning_ms

    @property
    def sampling_ms_per_token(self) -> float:
        return self.sampling_ms / self.generated_tokens if self.generated_tokens else 0.0

    @property
    def tpot_p50_ms(self) -> float:
        return percentile(self.step_ms, 50)

    @property
    def tpot_p90_ms(self) -> float:
        return percentile(self.step_ms, 90)

    @property
    def tpot_p99_ms(self) -> float:
        return percentile(self.step_ms, 99)

    @property
    def slowest_step(self) -> int:
        """Index into ``step_ms`` of the slowest step, -1 without steps."""
        return max(range(len(self.step_ms)), key=self.step_ms.__getitem__) if self.step_ms else -1

    @property
    def slowest_step_ms(self) -> float:
        return max(self.step_ms) if self.step_ms else 0.0

    @property
    def spec_acceptance(self) -> list[float]:
        """The draft's acceptance rate per draft position ([] without speculation)."""
        return list((self.spec or {}).get("acceptance_per_position", []))

    # -- the stored form ------------------------------------------------------------

    def as_dict(self) -> dict:
        """JSON-able, times rounded to the microsecond (what the store keeps)."""
        d = asdict(self)
        d["step_ms"] = [round(x, 3) for x in self.step_ms]
        d["notes"] = list(self.notes)
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in d.items()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "GenerationStats":
        """The inverse of ``as_dict``, which also reads what older versions stored:
        the breakdown nested under ``"timeline"`` (its ``decode_ms`` meant the forward
        passes; its prefill, TTFT and end-to-end are this record's meanings). Keys it
        does not know (a newer version's, or figures now derived) are ignored."""
        flat = dict(d)
        old = flat.pop("timeline", None)
        if isinstance(old, Mapping):
            flat.update((k, v) for k, v in old.items() if k != "decode_ms")
            flat["forward_ms"] = old.get("decode_ms", 0.0)
            flat["timed"] = True
        known = {f.name for f in fields(cls)}
        kept: dict[str, Any] = {k: (list(v) if isinstance(v, list) else v) for k, v in flat.items() if k in known}
        return cls(**kept)


def has_timeline(metrics: Mapping[str, Any] | None) -> bool:
    """Whether a stored reply's metrics say where its time went (either stored form)."""
    m = metrics or {}
    return bool(m.get("timed")) or isinstance(m.get("timeline"), Mapping)


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile, q in [0, 100]; 0.0 for an empty list."""
    if not values:
        return 0.0
    xs = sorted(values)
    k = (len(xs) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)
