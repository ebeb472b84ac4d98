"""One request as it ended: the record the server's figures (metrics.py) and the Server panel's
window over them (metrics_window.py) are both made of."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..decode.metrics import GenerationStats


@dataclass(frozen=True, slots=True)
class FinishedRequest:
    """One request as it ended: what the server's figures are made of. Times in seconds."""
    submitted: float              # the wall clock (time.time()) when it was submitted
    queue_s: float                # submitted -> its serving started
    ttft_s: float | None          # submitted -> first token handed out (queue included); None: no token came
    tpot_s: float | None          # mean time per output token after the first; None below two tokens
    e2e_s: float                  # submitted -> ended (queue included)
    prompt_tokens: int = 0
    cached_tokens: int = 0        # prompt tokens whose KV was reused (the prefix cache, a slot's last prompt)
    generated_tokens: int = 0
    drafted: int = 0              # speculative draft tokens proposed
    accepted: int = 0             # of them, kept
    draft_rounds: int = 0         # verification steps
    finish_reason: str = "stop"   # OpenAI's vocabulary (stop, length, tool_calls, cancelled), or "error"
    priority: str = "interactive"  # one of PRIORITIES
    key: str | None = None        # the device key's name; None: the window, or a request that needed no key
    key_id: str | None = None     # that key's id (names may repeat)

    @classmethod
    def from_stats(cls, stats: "GenerationStats", finish_reason: str, *, submitted: float, priority: str,
                   key: str | None = None, key_id: str | None = None) -> "FinishedRequest":
        """A request that reached its final event, from that event's stats (which hold the queue wait)."""
        spec = stats.spec or {}
        n = stats.generated_tokens
        return cls(submitted=submitted, queue_s=stats.queue_wait_ms / 1e3,
                   ttft_s=stats.ttft_ms / 1e3 if n else None, tpot_s=stats.tpot_ms / 1e3 if n > 1 else None,
                   e2e_s=stats.e2e_ms / 1e3, prompt_tokens=stats.prompt_tokens, cached_tokens=stats.cached_tokens,
                   generated_tokens=n, drafted=int(spec.get("drafted", 0)), accepted=int(spec.get("accepted", 0)),
                   draft_rounds=int(spec.get("rounds", 0)), finish_reason=finish_reason, priority=priority,
                   key=key, key_id=key_id)
