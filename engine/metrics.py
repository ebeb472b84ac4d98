"""Per-reply metrics, filled in with ``time.perf_counter()`` by the stream loop,
and the table of how a reply can end."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .timeline import Timeline


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
}


def is_complete(reason: str | None) -> bool:
    """Whether a reply that ended for ``reason`` is whole (unknown reasons are not)."""
    finish = FINISH_REASONS.get(reason or "")
    return finish is not None and finish.complete


def openai_finish_reason(reason: str | None) -> str:
    """The OpenAI API's ``finish_reason`` for the engine's ``reason`` ("stop" for one it does not know)."""
    finish = FINISH_REASONS.get(reason or "")
    return finish.openai if finish is not None else "stop"


@dataclass(slots=True)
class GenerationStats:
    prompt_tokens: int = 0
    cached_tokens: int = 0       # prompt tokens whose KV was reused, not recomputed
    prefill_tokens: int = 0      # prompt tokens actually computed
    prefill_ms: float = 0.0
    ttft_ms: float = 0.0         # request start -> first text delta handed to the caller
    generated_tokens: int = 0
    decode_ms: float = 0.0       # first token -> last token
    tpot_ms: float = 0.0         # mean time per output token after the first
    decode_tok_s: float = 0.0
    e2e_ms: float = 0.0
    finish_reason: str = ""
    backend: str = ""
    n_ctx: int = 0               # the context window: prompt + reply must fit in it
    dropped_messages: int = 0    # oldest messages left out so the conversation fits
    spec: dict | None = field(default=None)  # speculative-decoding stats, when used
    timeline: "Timeline | None" = None        # where the time went (engine/timeline.py), when recorded

    def finish(self, *, t_start: float, t_first_text: float | None, t_first_token: float | None,
               t_last_token: float | None, t_end: float) -> None:
        """Derive the timing fields from the timestamps the loop recorded."""
        self.e2e_ms = (t_end - t_start) * 1e3
        # No visible text at all (an immediate stop): TTFT is the whole request.
        self.ttft_ms = self.e2e_ms if t_first_text is None else (t_first_text - t_start) * 1e3
        if t_first_token is not None and t_last_token is not None and self.generated_tokens > 1:
            self.decode_ms = (t_last_token - t_first_token) * 1e3
            self.tpot_ms = self.decode_ms / (self.generated_tokens - 1)
            self.decode_tok_s = 1e3 / self.tpot_ms if self.tpot_ms > 0 else 0.0

    def as_dict(self) -> dict:
        d = asdict(self)
        d["timeline"] = self.timeline.to_dict() if self.timeline is not None else None
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in d.items()}


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile, q in [0, 100]; 0.0 for an empty list."""
    if not values:
        return 0.0
    xs = sorted(values)
    k = (len(xs) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)
