"""The value types a request and a reply are made of: sampling parameters in, typed events out.

Every dataclass validates itself in ``__post_init__`` so a bad value fails at
the edge (CLI flag, settings file) with a clear message instead of deep inside
the decode loop.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from .errors import HearthError

if TYPE_CHECKING:
    from .decode.metrics import GenerationStats
    from .prompt.messages import ToolCall, ToolCallDelta

Role = Literal["system", "user", "assistant", "tool"]


GRAMMAR_SCOPES = ("answer", "reply")
# What ``SamplingParams.limit`` says when a reply has no cap: more than any context holds (MAX_CONTEXT
# is 2**20), small enough to stay a plain int wherever a count of tokens goes.
NO_TOKEN_LIMIT = 1 << 30

# What a step's row of tokens wants back: no logits (a prompt chunk), its last token's, or every
# token's (a speculative round's verification).
WANT_NONE, WANT_LAST, WANT_ALL = 0, 1, 2


@dataclass(slots=True, eq=False)
class Compute:
    """What a request's pipeline asks of the engine core: append ``tokens`` to its sequence and send
    back the logits ``want`` names (WANT_*). A pipeline is a generator on the core's thread that yields
    StreamEvents for its reader and Computes for the core, which runs each inside a step's one batch
    beside every other sequence's rows. ``prompt``: prompt tokens, read in chunks under each step's
    token budget by priority, with progress; a decode step's tokens (a sampled token, drafts to
    verify, a thinking budget's closing text) run whole in the next step. ``done``: how many of the
    tokens the core has computed so far. ``spent_s``: this compute's share of the steps that ran it
    (each step's seconds split by its rows), so a pipeline that times its rounds (speculation) pays
    for its own rows, not for the rows other sequences put in the same batch."""
    tokens: list[int]
    want: int = WANT_LAST
    prompt: bool = False
    done: int = 0
    spent_s: float = 0.0


@dataclass(slots=True, frozen=True)
class SamplingParams:
    """How to pick each next token.

    ``temperature == 0`` means greedy (argmax); every other filter is then
    irrelevant except the penalties, which change the logits before argmax.
    Disabled values: ``top_k=0``, ``top_p=1.0``, ``min_p=0.0``,
    ``repeat_penalty=1.0``, ``presence_penalty=0``, ``frequency_penalty=0``.
    """

    temperature: float = 0.7
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    penalty_last_n: int = 64  # how many recent tokens the penalties look at; -1 = all
    seed: int | None = None
    max_tokens: int | None = None  # the longest reply; None: until the model stops or the context is full
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False  # benchmarks only: keep decoding past end-of-turn
    grammar: str | None = None  # GBNF text the reply must follow (the backend compiles it); see grammar_scope
    # "answer": a thinking model's reasoning is free and the grammar shapes what comes after the block
    # (response_format); "reply": every generated token follows it, tags and reasoning included.
    grammar_scope: str = "answer"
    # llama.cpp lazy-grammar trigger patterns: the grammar waits until one matches the answer so far
    # (a tool call's opener, tool_choice auto); empty: it applies from the first token
    grammar_triggers: tuple[str, ...] = ()
    reasoning_budget: int | None = None  # most reasoning tokens per reply, then the block is closed; None: no limit

    def __post_init__(self) -> None:
        if not (self.temperature >= 0.0):
            raise HearthError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise HearthError(f"top_k must be >= 0 (0 disables it), got {self.top_k}")
        if not (0.0 < self.top_p <= 1.0):
            raise HearthError(f"top_p must be in (0, 1], got {self.top_p}")
        if not (0.0 <= self.min_p < 1.0):
            raise HearthError(f"min_p must be in [0, 1), got {self.min_p}")
        if not (self.repeat_penalty > 0.0):
            raise HearthError(f"repeat_penalty must be > 0, got {self.repeat_penalty}")
        if self.penalty_last_n < -1:
            raise HearthError(f"penalty_last_n must be >= -1, got {self.penalty_last_n}")
        if self.max_tokens is not None and (isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int)
                                            or self.max_tokens < 1):
            raise HearthError(f"max_tokens must be a whole number >= 1 or None (no limit), got {self.max_tokens!r}")
        if self.grammar_scope not in GRAMMAR_SCOPES:
            raise HearthError(f"grammar_scope must be one of {', '.join(GRAMMAR_SCOPES)}, got {self.grammar_scope!r}")
        if self.reasoning_budget is not None and (
                isinstance(self.reasoning_budget, bool) or not isinstance(self.reasoning_budget, int)
                or self.reasoning_budget < 0):
            raise HearthError(f"reasoning_budget must be a whole number >= 0 or None, got {self.reasoning_budget!r}")
        if isinstance(self.stop, str) or not all(isinstance(s, str) and s for s in self.stop):
            raise HearthError("stop must be a sequence of non-empty strings")
        object.__setattr__(self, "stop", tuple(self.stop))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def limit(self) -> int:
        """The most tokens the reply may have: ``max_tokens``, or NO_TOKEN_LIMIT when it has none (the
        reply then ends when the model stops or the context is full)."""
        return NO_TOKEN_LIMIT if self.max_tokens is None else self.max_tokens


FinishReason = Literal["eos", "stop_string", "max_tokens", "cancelled", "context_full", "tool_calls"]


EventKind = Literal["delta", "reasoning", "tool_call", "context", "final"]
EVENT_KINDS: tuple[EventKind, ...] = ("delta", "reasoning", "tool_call", "context", "final")
TEXT: EventKind = "delta"
"""The kind of an answer-text event. It kept its first name, "delta", so every consumer
written before reasoning existed still reads the answer and ignores the rest."""


@dataclass(slots=True)
class StreamEvent:
    """One thing the engine tells its caller. A reply is a stream of typed events:

    ``kind == "delta"`` (``TEXT``): ``text`` is new answer text to append; ``stats``, when
    set, is the reply's record so far (``stats.live()``: tokens, tok/s, TTFT).
    ``kind == "reasoning"``: ``text`` is new reasoning text (the thinking block's inside,
    never its tags); ``stats`` as for a delta.
    ``kind == "tool_call"``: ``tool_call`` is a ToolCallDelta (which call, its id and name
    when first seen, the next fragment of its arguments).
    ``kind == "context"``: the conversation is being compacted to fit the context (the
    ``compact`` policy): first with no ``text`` while the summary is written, then with it.
    ``kind == "final"``: ``finish_reason`` and ``stats`` are set; ``text`` is the whole
    answer (every delta joined), ``reasoning`` the whole reasoning (None: the reply had
    none), ``reasoning_open`` whether the reply stopped inside its reasoning block (max
    tokens, Stop), ``tool_calls`` every call, complete, and ``stop_string`` the stop string
    that ended the reply (finish "stop_string"). ``finish_reason`` is one of
    engine.metrics.FINISH_REASONS.
    """

    kind: EventKind
    text: str = ""
    finish_reason: str | None = None
    stats: GenerationStats | None = None  # the final figures on the final event; so far on a delta
    token_ids: list[int] = field(default_factory=list)
    reasoning: str | None = None
    reasoning_open: bool = False
    tool_call: ToolCallDelta | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    stop_string: str | None = None
