"""The engine interface: what the window and the server ask of an engine, wherever it runs.

Messages and options go in, typed events come out (engine/types.py's StreamEvent:
answer text, reasoning, tool-call deltas, then one final event with the stats).
Besides a reply, an engine says what it is (``describe``: a :class:`LoadedModel`),
which Think control its template offers, how it takes tools, how many tokens a
prompt or an image takes, and it closes. The window's engine thread and the
local server's scheduler reach an engine only through this interface.

The local engine (engine/engine.py, opened from an EngineConfig) is one
implementation. Every engine takes any number of concurrent ``stream`` calls,
from any threads: the local one runs them in its engine core by ``priority``
(engine/core), several at once where its backend holds several sequences
(``capacity``, grown by ``set_parallel``); a remote one sends each to its server,
which schedules its own.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Protocol, Sequence, runtime_checkable

from .kv.reuse import ProgressFn
from .prompt.messages import Message
from .reply_formats import ThinkControl
from .reply_formats.tools import Tool, ToolPlan
from .types import SamplingParams, StreamEvent


RUNS = ("here", "workers", "server")


@dataclass(slots=True, frozen=True)
class Capabilities:
    """What an engine can do, for callers that would otherwise guess it from the backend's name.

    ``exact_tokens``: ``count_tokens`` counts with the model's own tokenizer (False: an estimate);
    ``images``: a message may carry images (a server's model: they are sent, its server decides);
    ``think``: a Think control this side can set; ``batching``: several requests run at once in one
    batch, as many as ``set_parallel`` makes room for; ``tunable``: its settings are this machine's
    to measure and change (threads, layers, KV); ``runs``: "here" (this process), "workers" (a child
    process of this one, with layers on other machines) or "server" (a server's model)."""
    exact_tokens: bool = True
    images: bool = False
    think: bool = False
    batching: bool = False
    tunable: bool = True
    runs: str = "here"

    def __post_init__(self) -> None:
        if self.runs not in RUNS:
            raise ValueError(f"runs: one of {', '.join(RUNS)}, got {self.runs!r}")

    @property
    def on_server(self) -> bool:
        """A server's model: no file here, no memory of this machine's, its server's settings."""
        return self.runs == "server"


@dataclass(slots=True, frozen=True)
class LoadedModel:
    """What a loaded model is and where it runs: plain data, safe to send across threads.

    ``memory_total`` counts weights + KV cache + compute buffers as allocated, the
    same parts as the plan's predicted total (``plan``, which also carries the
    per-part relative error). ``notes``: sentences for the user (what the plan
    gave up, a plan that did not fit, a retry)."""
    label: str
    path: str
    bundled: bool
    backend: str
    quant: str
    n_ctx: int
    n_threads: int | None
    runtime: str
    device: str
    n_gpu_layers: int
    kv_type: str
    exactness: str
    draft: str                       # the speculation mode: "none", "ngram", "model", "auto"
    draft_model: str | None          # the draft model's file name, when one is loaded
    draft_memory: int                # its buffers, in bytes
    memory: dict[str, int]           # the backend's memory_report()
    memory_total: int
    prefix_budget: int
    devices: dict[str, int] = field(default_factory=dict)   # device_free:<name>, device_total:<name>
    plan: dict[str, Any] | None = None                      # plan_view(): the plan and its check
    notes: tuple[str, ...] = ()
    load_ms: float = 0.0
    threads_poll: int | None = None  # the poll level of Hearth's own llama.cpp thread pool; None: none
    projector: str | None = None     # the vision projector's file name, where one is loaded here
    capabilities: Capabilities = field(default_factory=Capabilities)

    @property
    def sees_images(self) -> bool:
        return self.capabilities.images

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LoadedModel:
        """A LoadedModel from ``dataclasses.asdict`` of one (a child process's JSON line)."""
        return cls(**{**d, "notes": tuple(d.get("notes") or ()),
                      "capabilities": Capabilities(**(d.get("capabilities") or {}))})


@runtime_checkable
class ChatEngine(Protocol):
    """An engine as the window and the server use it (the local Engine is one)."""

    @property
    def think(self) -> ThinkControl | None:
        """The Think control the model's template offers (None: it has none)."""

    @property
    def n_ctx(self) -> int:
        """The context length, in tokens."""

    def describe(self) -> LoadedModel:
        """What is loaded and where it runs."""

    def plan_tools(self, tools: Sequence[Tool], choice: str = "auto", parallel: bool = True) -> ToolPlan:
        """``tools`` as this model calls them; ToolsUnsupported says why a model cannot take them."""

    def count_tokens(self, messages: Sequence[Message | Mapping[str, Any]],
                     template_kwargs: Mapping[str, object] | None = None) -> int:
        """How many tokens the prompt for ``messages`` takes, whole. Safe beside a reply."""

    def count_image_tokens(self, data: bytes) -> int:
        """The positions an image takes in a prompt. Safe beside a reply."""

    def stream(self, messages: Sequence[Message | Mapping[str, Any]], params: SamplingParams | None = None, *,
               cancel: threading.Event | None = None, progress: ProgressFn | None = None,
               context_policy: str = "drop_oldest", template_kwargs: Mapping[str, object] | None = None,
               tools: ToolPlan | None = None, priority: int = 0, max_wait_s: float | None = None,
               label: str = "") -> Iterator[StreamEvent]:
        """A chat reply: text, reasoning and tool-call events, then one final event. ``priority``: the
        engine core's class (core.job.Priority; 0 is the window's)."""

    def complete(self, text: str, params: SamplingParams | None = None, *,
                 cancel: threading.Event | None = None, priority: int = 0, max_wait_s: float | None = None,
                 label: str = "") -> Iterator[StreamEvent]:
        """A continuation of raw ``text`` (no chat template), with the same events."""

    def capacity(self) -> int:
        """How many requests other than the window's it runs at once (more wait their turn)."""

    def load(self) -> dict[str, Any]:
        """Its figures now, where it keeps them (``running``, ``waiting``...); empty where its server does."""

    def set_parallel(self, parallel: int, *, window: bool = True) -> None:
        """Make room to run ``parallel`` requests at once, besides the window's own where ``window``."""

    def close(self) -> None:
        """Unload: free the model and everything it holds."""
