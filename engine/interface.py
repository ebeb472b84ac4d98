"""The engine interface: what the window and the server ask of an engine, wherever it runs.

:class:`ChatEngine` is narrow: a reply (``stream``: messages and options in, typed events
out, engine/types.py's StreamEvent), a prompt's size (``count_tokens``), what is loaded
(``describe``: a :class:`ModelInfo`), what it can do (``capabilities``) and ``close``.
Everything else an engine may offer is a small Protocol of its own, claimed by a field of
:class:`Capabilities` and reached through the functions below (never by asking which class
or backend an engine is):

- :class:`Scheduling` (``capacity``, ``load``, ``set_parallel``; ``schedules``): it queues
  requests itself and makes room for several at once;
- :class:`Completion` (``complete``; ``completion``): a continuation of raw text, no template;
- :class:`ToolPlanner` (``plan_tools``; ``tools``): tools as this model calls them;
- :class:`ImageCounter` (``count_image_tokens``; ``image_tokens``): an image's positions,
  counted here by the model's own projector.

The local engine (engine/engine.py, opened from an EngineConfig) implements all of them.
Every engine takes any number of concurrent ``stream`` calls, from any threads: the local
one runs them in its engine core by ``priority`` (engine/core); a remote one sends each to
its server, which schedules its own.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Protocol, Sequence, cast, runtime_checkable

from .errors import ToolsUnsupported
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
    process of this one, with layers on other machines) or "server" (a server's model).

    The optional protocols it offers (module docstring): ``schedules`` (:class:`Scheduling`: its own
    queue, however many sequences), ``completion`` (:class:`Completion`), ``tools``
    (:class:`ToolPlanner`: it plans tool calls; its plan may still say why this model cannot take
    them) and ``image_tokens`` (:class:`ImageCounter`)."""
    exact_tokens: bool = True
    images: bool = False
    think: bool = False
    batching: bool = False
    tunable: bool = True
    runs: str = "here"
    schedules: bool = False
    completion: bool = False
    tools: bool = False
    image_tokens: bool = False

    def __post_init__(self) -> None:
        if self.runs not in RUNS:
            raise ValueError(f"runs: one of {', '.join(RUNS)}, got {self.runs!r}")

    @property
    def on_server(self) -> bool:
        """A server's model: no file here, no memory of this machine's, its server's settings."""
        return self.runs == "server"


@dataclass(slots=True, frozen=True)
class LocalDetails:
    """What only an engine whose backend runs on this machine knows (llama.cpp's or transformers' own
    figures; a split model's child fills them for its process): for the performance panel, the memory
    details and the benchmarks. ``memory_total`` counts weights + KV cache + compute buffers as
    allocated, the same parts as the plan's predicted total (``plan``, which also carries the
    per-part relative error)."""
    n_threads: int | None
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
    load_ms: float = 0.0
    threads_poll: int | None = None  # the poll level of Hearth's own llama.cpp thread pool; None: none
    projector: str | None = None     # the vision projector's file name, where one is loaded


@dataclass(slots=True, frozen=True)
class ModelInfo:
    """What a loaded model is and where it runs, as every engine knows it: plain data, safe to send across
    threads and (``dataclasses.asdict``, :meth:`from_dict`) as one JSON line.

    ``path``: its file or folder (a server's model: ``url#id``); ``backend``, ``runtime`` and
    ``device`` name what runs it, for people (callers ask ``capabilities``, never the name);
    ``quant``: its quantization ("" where its server does not say); ``think``: the Think control
    its template offers (None: none this side can set); ``notes``: sentences for the user (what
    the plan gave up, a plan that did not fit, a retry); ``local``: the backend's own figures,
    None where the model runs on a server."""
    label: str
    path: str
    bundled: bool
    backend: str
    quant: str
    n_ctx: int
    runtime: str
    device: str
    think: ThinkControl | None = None
    capabilities: Capabilities = field(default_factory=Capabilities)
    notes: tuple[str, ...] = ()
    local: LocalDetails | None = None

    @property
    def sees_images(self) -> bool:
        return self.capabilities.images

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ModelInfo:
        """A ModelInfo from ``dataclasses.asdict`` of one (a child process's JSON line)."""
        think, local = d.get("think"), d.get("local")
        return cls(**{**d, "notes": tuple(d.get("notes") or ()),
                      "capabilities": Capabilities(**(d.get("capabilities") or {})),
                      "think": ThinkControl(**{**think, "choices": tuple(think["choices"])}) if think else None,
                      "local": LocalDetails(**local) if local else None})


@runtime_checkable
class ChatEngine(Protocol):
    """An engine as the window and the server use it (the local Engine, the remote and the split engine)."""

    def stream(self, messages: Sequence[Message | Mapping[str, Any]], params: SamplingParams | None = None, *,
               cancel: threading.Event | None = None, progress: ProgressFn | None = None,
               context_policy: str = "drop_oldest", template_kwargs: Mapping[str, object] | None = None,
               tools: ToolPlan | None = None, priority: int = 0, max_wait_s: float | None = None,
               label: str = "") -> Iterator[StreamEvent]:
        """A chat reply: text, reasoning and tool-call events, then one final event. ``priority``: the
        engine core's class (core.job.Priority; 0 is the window's)."""

    def count_tokens(self, messages: Sequence[Message | Mapping[str, Any]],
                     template_kwargs: Mapping[str, object] | None = None) -> int:
        """How many tokens the prompt for ``messages`` takes, whole (an estimate where
        ``capabilities().exact_tokens`` is False). Safe beside a reply."""

    def describe(self) -> ModelInfo:
        """What is loaded and where it runs: its context (``n_ctx``) and Think control (``think``) included."""

    def capabilities(self) -> Capabilities:
        """What it can do, and which of the optional protocols it offers (cheap: no figures are read).
        A method beside ``describe`` rather than only its field, because the server asks it per request."""

    def close(self) -> None:
        """Unload: free the model and everything it holds."""


@runtime_checkable
class Scheduling(Protocol):
    """An engine that queues its requests itself (``Capabilities.schedules``)."""

    def capacity(self) -> int:
        """How many requests other than the window's it runs at once (more wait their turn)."""

    def load(self) -> dict[str, Any]:
        """Its figures now (``running``, ``waiting``, ``kv_used_tokens``...)."""

    def set_parallel(self, parallel: int, *, window: bool = True) -> None:
        """Make room to run ``parallel`` requests at once, besides the window's own where ``window``."""


@runtime_checkable
class Completion(Protocol):
    """An engine that continues raw text, with no chat template (``Capabilities.completion``)."""

    def complete(self, text: str, params: SamplingParams | None = None, *,
                 cancel: threading.Event | None = None, priority: int = 0, max_wait_s: float | None = None,
                 label: str = "") -> Iterator[StreamEvent]:
        """A continuation of raw ``text``, with the same events as ``stream``."""


@runtime_checkable
class ToolPlanner(Protocol):
    """An engine that takes tool definitions (``Capabilities.tools``)."""

    def plan_tools(self, tools: Sequence[Tool], choice: str = "auto", parallel: bool = True) -> ToolPlan:
        """``tools`` as this model calls them; ToolsUnsupported says why a model cannot take them."""


@runtime_checkable
class ImageCounter(Protocol):
    """An engine that counts an image's positions here, with its model's projector (``Capabilities.image_tokens``)."""

    def count_image_tokens(self, data: bytes) -> int:
        """The positions an image takes in a prompt. Safe beside a reply."""


# Each optional protocol and the Capabilities field that claims it.
OPTIONAL: dict[str, type] = {"schedules": Scheduling, "completion": Completion, "tools": ToolPlanner,
                             "image_tokens": ImageCounter}


def _claimed(engine: ChatEngine, what: str) -> Any:
    """``engine`` as the protocol its capability ``what`` claims, or None where it claims none. An engine that
    claims one and lacks its methods is a bug, said at once rather than as a missing attribute later."""
    if not getattr(engine.capabilities(), what):
        return None
    if not isinstance(engine, OPTIONAL[what]):
        raise TypeError(f"{type(engine).__name__} claims {what} but lacks {OPTIONAL[what].__name__}'s methods")
    return engine


def scheduling(engine: ChatEngine) -> Scheduling | None:
    """The engine's own queue (None: its server, or nobody, schedules its requests)."""
    return cast("Scheduling | None", _claimed(engine, "schedules"))


def continue_text(engine: ChatEngine, text: str, params: SamplingParams | None = None, *,
                  cancel: threading.Event | None = None, priority: int = 0, max_wait_s: float | None = None,
                  label: str = "") -> Iterator[StreamEvent]:
    """A continuation of raw ``text``: the engine's own (:class:`Completion`), else through its chat
    (most servers' /completions differ), ``text`` as one user turn."""
    raw = cast("Completion | None", _claimed(engine, "completion"))
    if raw is not None:
        return raw.complete(text, params, cancel=cancel, priority=priority, max_wait_s=max_wait_s, label=label)
    return engine.stream([Message("user", text)], params, cancel=cancel, priority=priority, max_wait_s=max_wait_s,
                         label=label)


def plan_tools(engine: ChatEngine, tools: Sequence[Tool], choice: str = "auto", parallel: bool = True) -> ToolPlan:
    """``tools`` as ``engine``'s model calls them; ToolsUnsupported says why it cannot."""
    planner = cast("ToolPlanner | None", _claimed(engine, "tools"))
    if planner is None:
        raise ToolsUnsupported("this model cannot call tools: its engine takes none")
    return planner.plan_tools(tools, choice, parallel)


def count_image_tokens(engine: ChatEngine, data: bytes) -> int | None:
    """The positions an image takes in ``engine``'s prompt, counted here (None: not counted on this side,
    where a server counts it)."""
    counter = cast("ImageCounter | None", _claimed(engine, "image_tokens"))
    return None if counter is None else counter.count_image_tokens(data)

