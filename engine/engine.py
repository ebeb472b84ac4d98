"""Engine: messages in, streamed text out, one backend underneath.

The engine owns the conversation-independent state: the loaded backend, the
prompt builder (template, context fitting), the KV reuse policy (kv.reuse),
speculative decoding's draft and controller, and the engine core (engine/core)
that runs every request. One request: messages -> prompt tokens (on the caller's
thread) -> the core: a sequence of the pool holding the longest cached prefix ->
its pipeline (the prompt's rest in chunks, one step generator, plain or
speculative, chosen once) stepped in one batch with every other request -> text
events back to the caller. The window, the local server, agents and other devices
all call ``stream``; a priority says who goes first.
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence


from .backends import openmp
from .backends.base import Backend
from .backends.open import DEFAULT_CTX, open_backend
from .config import EngineConfig
from .core.job import Handle, Job, Priority
from .core.loop import EngineCore
from .core.compact import compacting
from .core.reply import ReplyRequest, reply_pipeline
from .decode.prepare import Compaction, prepare_request
from .decode.timeline import NO_TIMELINE, Recorder
from .errors import HearthError, PromptTooLongError, ToolsUnsupported
from .interface import Capabilities, LocalDetails, ModelInfo
from .kv.disk_store import PrefixStore
from .kv.prefix_cache import DEFAULT_BUDGET, PrefixCache
from .kv.reuse import KVReuse, ProgressFn
from .models.catalogue import ModelRef
from .prompt.builder import PromptBuilder
from .prompt.chat_template import CHATML_FALLBACK, ChatTemplate
from .prompt.messages import Message
from .prompt.summary import Summaries
from .reply_formats import Layout, ThinkControl, detect
from .reply_formats.tools import Tool, ToolPlan
from .reply_formats.tool_syntax import ToolSyntax, detect_tools, unsupported_tools
from .sizing.reality import buffers_total
from .speculative.controller import SpecController
from .speculative.drafts import ModelDraft
from .speculative.setup import Speculation
from .types import SamplingParams, StreamEvent

__all__ = ["DEFAULT_CTX", "Engine"]


class Engine:
    def __init__(self, backend: Backend, *, model: ModelRef | None = None,
                 cache_budget: int = DEFAULT_BUDGET, store: PrefixStore | None = None,
                 config: EngineConfig | None = None) -> None:
        self.backend = backend
        self.model = model
        self.config = config  # what it was opened with (None: an engine around a backend opened by hand)
        # budget 0 disables the snapshot cache; the live-KV prefix is always reused.
        self.kv = KVReuse(backend, backend.pool(), PrefixCache(cache_budget), store)
        self.template = ChatTemplate(backend.chat_template or CHATML_FALLBACK,
                                     bos_token=backend.bos_token, eos_token=backend.eos_token)
        self.prompts = PromptBuilder(backend, self.template)
        # A thinking model's layout, known once from its template and vocabulary (engine/reply_formats):
        # how its replies split into reasoning and answer, and the Think control its template offers.
        self.layout: Layout | None = _detect_layout(backend)
        self.think: ThinkControl | None = self.layout.think if self.layout is not None else None
        # How the model writes tool calls, from its template (None: it takes none Hearth can parse).
        self.tool_syntax: ToolSyntax | None = detect_tools(backend.chat_template)
        self._prepare = threading.Lock()  # the prompt builder's sticky cut: one request prepared at a time
        self.speculation = Speculation(backend)
        self.summaries = Summaries()  # compaction's latest summaries, by the turns they stand for
        # Each reply's final stats carry its timeline (engine/decode/timeline.py); off only
        # to measure what recording costs.
        self.record_timeline = True
        # Whatever computed while the backend was opened (a warm-up) did so on this thread: give its
        # OpenMP team back, since from now on the core's thread computes (engine/backends/openmp.py).
        openmp.release()
        self.core = EngineCore(backend, self.kv)
        sees = bool(backend.describe().projector)  # what it can do is fixed at load: asked per request, built once
        self._capabilities = Capabilities(
            exact_tokens=True, images=sees, think=self.think is not None, batching=self.kv.pool.max_seq > 1,
            tunable=True, runs="here", schedules=True, completion=True, tools=True, image_tokens=sees)

    @classmethod
    def open(cls, config: EngineConfig | None = None, *,
             progress: Callable[[int, int, str], None] | None = None,
             cancel: threading.Event | None = None) -> "Engine":
        """Open the engine ``config`` describes (the bundled GGUF by default): a GGUF file, a
        transformers folder or a Hugging Face Hub id (downloaded first, with ``progress`` and
        ``cancel``). The config's fields say what each choice does (engine/config.py)."""
        config = config or EngineConfig()
        ref = config.ref
        if ref.kind == "hub":
            from .models.hub import fetch_ref

            ref = fetch_ref(ref, allow_pickle=config.allow_pickle, allow_remote_code=config.allow_remote_code,
                            progress=progress, cancel=cancel)
            config = config.with_model(ref)
        be, model_sha = open_backend(config)
        store = None
        root = config.disk_cache_dir
        if root is not None:
            store = PrefixStore(root, {"model_sha256": model_sha(root), **be.state_identity()},
                                max_bytes=config.disk_cache_bytes)
        engine = cls(be, model=ref, cache_budget=config.cache_budget, store=store, config=config)
        try:
            engine.set_speculation(config.draft, k=config.draft_k, n_threads=config.n_threads)
        except BaseException:
            engine.close()
            raise
        return engine

    # -- speculative decoding -------------------------------------------------

    def set_speculation(self, kind: str | os.PathLike[str] | None, *, k: int | None = None,
                        n_threads: int | None = None, force: bool = False) -> None:
        """Choose the draft: "none", "ngram", "model" (the loaded draft), "auto" (every draft
        on offer) or a GGUF path to load as the draft model (``Speculation.configure``). It measures
        what drafting costs here with the model: on the core's thread, between steps."""
        def configure() -> None:
            self.speculation.configure(kind, k=k, n_threads=n_threads, force=force)
            self.speculation.set_n_seq(self.kv.pool.n_seq)
        self.core.call(configure)

    @property
    def draft(self) -> ModelDraft | None:
        """The loaded draft model, if any."""
        return self.speculation.draft

    @property
    def spec_kind(self) -> str:
        """The speculation mode: "none", "ngram", "model" or "auto"."""
        return self.speculation.kind

    @spec_kind.setter
    def spec_kind(self, kind: str) -> None:
        self.speculation.kind = kind

    @property
    def spec_ctl(self) -> SpecController | None:
        """The controller that adapts speculation (None: plain decoding)."""
        return self.speculation.ctl

    @spec_ctl.setter
    def spec_ctl(self, ctl: SpecController | None) -> None:
        self.speculation.ctl = ctl

    # -- what it is -----------------------------------------------------------

    @property
    def n_ctx(self) -> int:
        return self.backend.n_ctx

    def describe(self) -> ModelInfo:
        """What this engine runs and where (no plan: the planned load adds its own)."""
        b = self.backend
        info = b.describe()
        report = b.memory_report()
        draft = self.draft
        return ModelInfo(
            label=self.model.label if self.model else info.name,
            path=str(self.model.path) if self.model else "",
            bundled=bool(self.model and self.model.is_bundled),
            backend=info.backend, quant=info.quant, n_ctx=info.n_ctx, runtime=info.runtime, device=info.device,
            think=self.think, capabilities=self.capabilities(),
            local=LocalDetails(
                n_threads=info.threads, n_gpu_layers=info.n_gpu_layers, kv_type=info.kv_type,
                exactness=info.exactness, draft=self.spec_kind,
                draft_model=Path(draft.backend.describe().path).name if draft is not None else None,
                draft_memory=buffers_total(draft.backend.memory_report()) if draft is not None else 0,
                memory=report, memory_total=buffers_total(report),
                prefix_budget=int(self.cache_stats()["budget_bytes"]), devices=_device_memory(),
                threads_poll=info.threads_poll, projector=Path(info.projector).name if info.projector else None))

    def capabilities(self) -> Capabilities:
        """Exact counts, its own queue (several requests in one batch where the backend holds several
        sequences), raw-text continuation, tool planning, and images where a projector is loaded."""
        return self._capabilities

    # -- prompt -------------------------------------------------------------

    def render(self, messages: Sequence[Message | Mapping[str, str]],
               template_kwargs: Mapping[str, object] | None = None) -> str:
        return self.prompts.render(messages, template_kwargs)

    def prompt_tokens(self, messages: Sequence[Message | Mapping[str, str]],
                      template_kwargs: Mapping[str, object] | None = None) -> list[int]:
        return self.prompts.tokens(messages, template_kwargs)

    def count_tokens(self, messages: Sequence[Message | Mapping[str, Any]],
                     template_kwargs: Mapping[str, object] | None = None) -> int:
        """How many tokens the prompt for ``messages`` takes, whole (``PromptBuilder.count``):
        safe beside a reply on another thread."""
        return self.prompts.count(messages, template_kwargs)

    def count_image_tokens(self, data: bytes) -> int:
        """The positions an image takes in a prompt (its wrapping tokens included), counted by the
        model's own projector; safe beside a reply on another thread. NoVisionError without one."""
        from .inputs.images import decode

        return len(self.backend.tokenize_images([decode(data)], add_bos=False))

    def plan_tools(self, tools: Sequence[Tool], choice: str = "auto", parallel: bool = True) -> ToolPlan:
        """``tools`` for this model's call syntax; HearthError says why a model cannot take them."""
        if self.tool_syntax is None:
            why = unsupported_tools(self.backend.chat_template) or "its chat template takes no tools"
            raise ToolsUnsupported(f"this model cannot call tools: {why}")
        return ToolPlan(self.tool_syntax, tuple(tools), choice, parallel)

    # -- generation ---------------------------------------------------------

    def stream(self, messages: Sequence[Message | Mapping[str, Any]],
               params: SamplingParams | None = None, *,
               cancel: threading.Event | None = None, progress: ProgressFn | None = None,
               context_policy: str | None = None,
               template_kwargs: Mapping[str, object] | None = None,
               tools: ToolPlan | None = None, priority: int = Priority.WINDOW,
               max_wait_s: float | None = None, label: str = "") -> Iterator[StreamEvent]:
        """Text deltas, then one final event with the finish reason and metrics.

        A thinking model's reply (``self.layout``) streams its reasoning as "reasoning"
        events and its answer as "delta" events; the final event's ``text`` is the
        answer and ``reasoning`` the reasoning. ``template_kwargs`` reach the chat
        template (``self.think.kwargs(value)``: ``{"enable_thinking": False}``...).

        ``progress(done, total)`` reports prompt tokens read during a long prefill (on
        this thread); Stop (``cancel``) takes effect during it too. A conversation too
        long for the context is fitted by ``context_policy`` (None: the config's; engine/prompt/view.py: "stop"
        raises PromptTooLongError; "drop_oldest", "shift" and "compact" leave out, move or
        summarize the oldest turns, never the system prompt or a pinned message; the final
        stats say what acted and what it cost, compaction's summary first comes as a
        "context" event), before any work if even the newest message cannot fit. A reply
        that fills the context goes on under every policy but "stop" (engine/decode/room.py).

        ``tools`` (``plan_tools``): the template is given them, a grammar built from their
        schemas shapes every call (lazily, behind the call opener, for ``auto``), and
        complete calls come out as "tool_call" events and in the final event.

        Any number of callers may stream at once, from any threads: every request runs in the
        engine core (engine/core), by ``priority`` (core.job.Priority: the window's first); one
        that waits past ``max_wait_s`` for a sequence raises core.job.QueueTimeout. The request
        is prepared and queued by this call (a prompt that cannot fit raises here); the events
        come as they are read. Leaving them early stops the request.
        """
        params = params or SamplingParams()
        context_policy = context_policy or (self.config.context_policy if self.config else "drop_oldest")
        ask: dict[str, Any] = dict(priority=priority, cancel=cancel, max_wait_s=max_wait_s, label=label)
        reply = self.prepare(messages, params, context_policy=context_policy, template_kwargs=template_kwargs,
                             tools=tools)
        if reply.req.compaction is None and reply.req.policy == "compact" and reply.req.dropped:
            return compacting(self, reply, messages, tools, progress, ask)
        return self.submit(reply, **ask).events(progress)

    def prepare(self, messages: Sequence[Message | Mapping[str, Any]], params: SamplingParams, *,
                context_policy: str = "drop_oldest", template_kwargs: Mapping[str, object] | None = None,
                tools: ToolPlan | None = None, compaction: Compaction | None = None) -> ReplyRequest:
        """``messages`` made ready for the core (``stream`` without submitting): the prompt fitted to the
        context, the prefix cache's checkpoints, the request's timeline started."""
        t_start = time.perf_counter()
        rec = self._recorder(t_start)
        with self._prepare:
            spent = self.prompts.template_s, self.prompts.tokenize_s
            req = prepare_request(self.prompts, self.layout, params, messages=messages,
                                  context_policy=context_policy, template_kwargs=template_kwargs, tools=tools)
            rec.prompt_built(self.prompts.template_s - spent[0], self.prompts.tokenize_s - spent[1])
            checkpoints = self.kv.checkpoint(
                req.tokens, self.prompts.shared_system_tokens(req.messages, req.template_kwargs),
                self.prompts.shared_image_tokens(req.messages, req.template_kwargs))
        req.compaction = compaction
        return ReplyRequest(req, checkpoints, rec, t_start)

    def complete(self, text: str, params: SamplingParams | None = None, *,
                 cancel: threading.Event | None = None, priority: int = Priority.WINDOW,
                 max_wait_s: float | None = None, label: str = "") -> Iterator[StreamEvent]:
        """Continue raw ``text`` (no chat template), with the same events as ``stream``;
        a text longer than the context raises PromptTooLongError."""
        params = params or SamplingParams()
        t_start = time.perf_counter()
        rec = self._recorder(t_start)
        req = prepare_request(self.prompts, None, params, text=text)
        rec.prompt_built(0.0, time.perf_counter() - t_start)
        handle = self.submit(ReplyRequest(req, (), rec, t_start), priority=priority, cancel=cancel,
                             max_wait_s=max_wait_s, label=label)
        return handle.events()

    def submit(self, reply: ReplyRequest, *, priority: int = Priority.WINDOW, cancel: threading.Event | None = None,
               max_wait_s: float | None = None, label: str = "") -> Handle:
        """Hand a prepared request to the engine core; read its reply from the handle."""
        prompt = reply.req.tokens
        if len(prompt) >= self.n_ctx:
            raise PromptTooLongError(
                f"the conversation is {len(prompt)} tokens but the context holds {self.n_ctx}; "
                "start a new conversation, shorten the message, or raise the context length")
        # Only the "shift" policy, in the fast profile, is ever served KV moved into place (engine/kv/shift.py).
        shift = reply.req.policy == "shift" and getattr(self.backend, "exactness", "") == "fast"
        job = Job(prompt, lambda lease: reply_pipeline(self.backend, self.speculation, reply, lease),
                  priority=priority, cancel=cancel if cancel is not None else threading.Event(),
                  max_wait_s=max_wait_s, label=label, shift=shift)
        return self.core.submit(job)

    # -- sequences ------------------------------------------------------------

    @property
    def n_seq(self) -> int:
        """How many requests the engine runs at once (the sequences of its KV pool)."""
        return self.kv.pool.n_seq

    def capacity(self) -> int:
        return self.core.capacity()

    def load(self) -> dict[str, Any]:
        """The engine core's figures now (requests running and waiting, KV in use)."""
        return self.core.load()

    def set_parallel(self, parallel: int, *, window: bool = True) -> None:
        """Run ``parallel`` requests at once besides the window's own (``window``: the window uses this
        engine too, and keeps a sequence for itself): llama.cpp holds ``parallel + 1`` sequences in the
        one context; a backend with one sequence serves every request in turn. A change waits for the
        requests in flight to end and empties the KV. What the sequences held, and the prefix cache's
        snapshots, in memory and on disk, restore into the new context where llama.cpp's states can be
        laid out again for its streams (a plain KV cache); another memory's in-memory snapshots are dropped."""
        want = min(max(1, parallel) + (1 if window else 0), self.kv.pool.max_seq)
        self.core.reserve = 1 if window and want > 1 else 0
        if want == self.n_seq:
            return

        def resize() -> None:
            self.kv.resizing()
            self.kv.pool.set_n_seq(want)
            self.kv.resized()
            self.speculation.set_n_seq(want)
        self.core.when_idle(resize)

    def _recorder(self, t_start: float) -> Recorder:
        """This request's timeline recorder, chosen once: the decode loop never asks."""
        return Recorder(t_start, self.kv.stats) if self.record_timeline else NO_TIMELINE

    @property
    def cache(self) -> PrefixCache:
        """The in-memory prefix cache (its stats and ``clear()`` are public)."""
        return self.kv.cache

    @property
    def store(self) -> PrefixStore | None:
        """The on-disk store of system-prompt snapshots, if enabled."""
        return self.kv.store

    def cache_stats(self) -> dict[str, float]:
        """Hit rate and bytes of the prefix cache, for the window and the CLI."""
        return self.kv.stats()

    def reset(self) -> None:
        """Forget the KV cache (e.g. ``/reset`` in the CLI)."""
        self.core.when_idle(self.kv.reset)

    def close(self) -> None:
        self.core.close()
        self.speculation.close()
        self.backend.close()


def _detect_layout(backend: Backend) -> Layout | None:
    """The reasoning layout of the backend's model (None: it does not think, or cannot be told)."""
    try:
        tokens = backend.vocab().tokens
    except (AttributeError, NotImplementedError, HearthError):
        tokens = ()
    return detect(backend.chat_template, tokens, bos_token=backend.bos_token, eos_token=backend.eos_token)


def _device_memory() -> dict[str, int]:
    """Each ggml device's free and total bytes now (empty where ggml cannot say)."""
    try:
        from .backends.llama.devices import memory_entries

        return memory_entries()
    except (ImportError, OSError, AttributeError):  # a build without ggml's device API
        return {}
