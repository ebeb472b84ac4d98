"""Engine: messages in, streamed text out, one backend underneath.

The engine owns the conversation-independent state: the loaded backend, the
prompt builder (template, context fitting), the KV reuse policy (kv.reuse) and
speculative decoding's draft and controller. One request: messages -> prompt
tokens -> reuse the longest cached prefix -> prefill the rest in chunks -> one
step generator (plain or speculative, chosen once) -> text events.
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Generator, Mapping, Sequence

import numpy as np

from .backends.base import Backend
from .backends.open import DEFAULT_CTX, open_backend
from .config import EngineConfig
from .decode.batch import BatchSession
from .decode.constraint import ConstrainedSampler
from .decode.generate import Steering, generate_step, no_steps
from .decode.metrics import GenerationStats
from .decode.prepare import Prepared, prepare_request
from .decode.resample import SequenceRewind
from .decode.sampling import Sampler
from .decode.stream import Steps, stream_tokens
from .decode.timeline import NO_TIMELINE, Recorder
from .errors import Cancelled, HearthError, PromptTooLongError, ToolsUnsupported
from .inputs.media import has_media, whole as whole_images
from .interface import LoadedModel
from .kv.disk_store import PrefixStore
from .kv.prefix_cache import DEFAULT_BUDGET, PrefixCache
from .kv.reuse import FINAL_PIECE, KVReuse, ProgressFn, prefill
from .models.catalogue import ModelRef
from .prompt.builder import PromptBuilder
from .prompt.chat_template import CHATML_FALLBACK, ChatTemplate
from .prompt.messages import Message
from .reply_formats import Layout, ThinkControl, detect
from .reply_formats.tools import Tool, ToolPlan, ToolSyntax, detect_tools, unsupported_tools
from .sizing.reality import buffers_total
from .speculative.controller import SpecController
from .speculative.drafts import ModelDraft
from .speculative.setup import Speculation
from .speculative.stats import SpecStats
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
        self.kv = KVReuse(backend, PrefixCache(cache_budget), store)
        self.template = ChatTemplate(backend.chat_template or CHATML_FALLBACK,
                                     bos_token=backend.bos_token, eos_token=backend.eos_token)
        self.prompts = PromptBuilder(backend, self.template)
        # A thinking model's layout, known once from its template and vocabulary (engine/reply_formats):
        # how its replies split into reasoning and answer, and the Think control its template offers.
        self.layout: Layout | None = _detect_layout(backend)
        self.think: ThinkControl | None = self.layout.think if self.layout is not None else None
        # How the model writes tool calls, from its template (None: it takes none Hearth can parse).
        self.tool_syntax: ToolSyntax | None = detect_tools(backend.chat_template)
        self._busy = threading.Lock()
        self.speculation = Speculation(backend)
        # Each reply's final stats carry its timeline (engine/decode/timeline.py); off only
        # to measure what recording costs.
        self.record_timeline = True

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
        on offer) or a GGUF path to load as the draft model (``Speculation.configure``)."""
        self.speculation.configure(kind, k=k, n_threads=n_threads, force=force)

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

    def describe(self) -> LoadedModel:
        """What this engine runs and where (no plan: the planned load adds its own)."""
        b = self.backend
        info = b.describe()
        report = b.memory_report()
        draft = self.draft
        return LoadedModel(
            label=self.model.label if self.model else info.name,
            path=str(self.model.path) if self.model else "",
            bundled=bool(self.model and self.model.is_bundled),
            backend=info.backend, quant=info.quant, n_ctx=info.n_ctx, n_threads=info.threads,
            runtime=info.runtime, device=info.device, n_gpu_layers=info.n_gpu_layers, kv_type=info.kv_type,
            exactness=info.exactness, draft=self.spec_kind,
            draft_model=Path(draft.backend.describe().path).name if draft is not None else None,
            draft_memory=buffers_total(draft.backend.memory_report()) if draft is not None else 0,
            memory=report, memory_total=buffers_total(report),
            prefix_budget=int(self.cache_stats()["budget_bytes"]), devices=_device_memory(),
            threads_poll=info.threads_poll, projector=Path(info.projector).name if info.projector else None)

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
               context_policy: str = "drop_oldest",
               template_kwargs: Mapping[str, object] | None = None,
               tools: ToolPlan | None = None) -> Generator[StreamEvent, None, None]:
        """Yield text deltas, then one final event with the finish reason and metrics.

        A thinking model's reply (``self.layout``) streams its reasoning as "reasoning"
        events and its answer as "delta" events; the final event's ``text`` is the
        answer and ``reasoning`` the reasoning. ``template_kwargs`` reach the chat
        template (``self.think.kwargs(value)``: ``{"enable_thinking": False}``...).

        ``progress(done, total)`` reports prompt tokens read during a long prefill;
        Stop (``cancel``) takes effect during it too. A conversation too long for
        the context loses its oldest turns (``context_policy="drop_oldest"``, the
        final stats say how many) or raises PromptTooLongError (``"stop"``), in
        both cases before any work if even the newest message cannot fit.

        ``tools`` (``plan_tools``): the template is given them, a grammar built from their
        schemas shapes every call (lazily, behind the call opener, for ``auto``), and
        complete calls come out as "tool_call" events and in the final event.
        """
        params = params or SamplingParams()
        if not self._busy.acquire(blocking=False):
            raise HearthError("the engine is already generating a reply")
        try:
            t_start = time.perf_counter()
            rec = self._recorder(t_start)
            spent = self.prompts.template_s, self.prompts.tokenize_s
            req = prepare_request(self.prompts, self.layout, params, messages=messages,
                                  context_policy=context_policy, template_kwargs=template_kwargs, tools=tools)
            checkpoints = self.kv.checkpoint(
                req.tokens, self.prompts.shared_system_tokens(req.messages, req.template_kwargs),
                self.prompts.shared_image_tokens(req.messages, req.template_kwargs))
            rec.prompt_built(self.prompts.template_s - spent[0], self.prompts.tokenize_s - spent[1])
            yield from self._run(req, cancel, t_start, checkpoints, progress, rec, t_prefill=time.perf_counter())
        finally:
            self._busy.release()

    def complete(self, text: str, params: SamplingParams | None = None, *,
                 cancel: threading.Event | None = None) -> Generator[StreamEvent, None, None]:
        """Continue raw ``text`` (no chat template), with the same events as ``stream``;
        a text longer than the context raises PromptTooLongError."""
        params = params or SamplingParams()
        if not self._busy.acquire(blocking=False):
            raise HearthError("the engine is already generating a reply")
        try:
            t_start = time.perf_counter()
            rec = self._recorder(t_start)
            req = prepare_request(self.prompts, None, params, text=text)
            t_prefill = time.perf_counter()
            rec.prompt_built(0.0, t_prefill - t_start)
            yield from self._run(req, cancel, t_start, rec=rec, t_prefill=t_prefill)
        finally:
            self._busy.release()

    def open_batch(self, parallel: int, slot_ctx: int, prefill_chunk: int) -> BatchSession | None:
        """A second context on the same weights where ``parallel`` requests of up to ``slot_ctx``
        tokens each decode together (``decode.batch``); None on a backend without one."""
        be = self.backend
        batch = be.open_batch(parallel, parallel * slot_ctx)
        if batch is None:
            return None
        for i in range(be.n_vocab):  # readers detokenize in their own threads: fill the piece cache now
            be.token_bytes(i)
        return BatchSession(be, batch, self.template, self.layout, slot_ctx=slot_ctx, prefill_chunk=prefill_chunk)

    def _run(self, req: Prepared, cancel: threading.Event | None, t_start: float, checkpoints: Sequence[int] = (),
             progress: ProgressFn | None = None, rec: Recorder = NO_TIMELINE,
             t_prefill: float | None = None) -> Generator[StreamEvent, None, None]:
        b = self.backend
        prompt, params = req.tokens, req.params
        if len(prompt) >= b.n_ctx:
            raise PromptTooLongError(
                f"the conversation is {len(prompt)} tokens but the context holds {b.n_ctx}; "
                "start a new conversation, shorten the message, or raise the context length")
        history = list(prompt)
        stats = GenerationStats(backend=b.name, profile=getattr(b, "exactness", ""), n_ctx=b.n_ctx,
                                dropped_messages=req.dropped)
        # A grammar is checked before any KV work; it runs on plain steps only
        # (rejected drafts would have to rewind its parse state), and so does a
        # thinking budget (its closing tokens are fed between two plain steps).
        constraint = req.constraint(b)
        # A grammar over the whole reply ("reply" scope) must see every token, so no closing text is
        # forced past it; an answer-scoped one pauses while the reply is inside its reasoning (steer.free).
        whole = constraint is not None and params.grammar_scope == "reply"
        steer = Steering() if req.layout is not None and not whole else None
        base = rec.make_sampler(params)
        # The grammar shapes the answer only: steer.free pauses it inside the reasoning.
        sampler = base if constraint is None else ConstrainedSampler(base, constraint, steer)
        # A tool call that fails its schema is drawn again from its section's start (decode/resample.py).
        rewind = SequenceRewind(b, len(prompt), history, sampler, params, steer) if req.tools is not None else None
        keep = 0
        try:
            try:
                keep = self.kv.prepare(prompt, checkpoints, cancel=cancel, progress=progress)
                # All but the last few prompt tokens, in chunks: Stop works during a
                # long prompt. The step loop feeds the rest; its logits start decoding.
                tail = len(prompt) - whole_images(prompt, len(prompt) - min(FINAL_PIECE, len(prompt) - b.kv_len))
                prefill(b, prompt[b.kv_len:len(prompt) - tail], cancel=cancel, progress=progress,
                        done=b.kv_len, total=len(prompt))
            except Cancelled:
                steps, spec = no_steps(), None
            else:
                steps, spec = self._steps(prompt, base, sampler, history, steer,
                                          budgeted=steer is not None and params.reasoning_budget is not None)
            yield from stream_tokens(b, steps, prompt_len=len(prompt), cached=keep, params=params,
                                     stats=stats, t_start=t_start, cancel=cancel, spec_stats=spec, timeline=rec,
                                     t_prefill=t_prefill, layout=req.layout, opened=req.opened,
                                     steer=steer if spec is None else None, tools=req.tools, rewind=rewind)
        finally:
            # Whatever happened (stop, cancel, error, abandoned generator), record
            # what the KV really holds so the next request can reuse it safely.
            self.kv.commit(history)
            if constraint is not None:
                constraint.close()

    def _steps(self, prompt: list[int], base: Sampler, sampler: Callable[[Sequence[int], np.ndarray], int],
               history: list[int], steer: Steering | None, *, budgeted: bool) -> tuple[Steps, SpecStats | None]:
        """The reply's one step generator, chosen once: plain under a grammar (``sampler`` then
        carries it over ``base``) or a thinking budget, else speculative where the engine speculates."""
        pending = prompt[self.backend.kv_len:]
        if sampler is not base:
            return generate_step(self.backend, pending, sampler, history, steer), None
        chosen = None if budgeted else self.speculation.steps(pending, base, history,
                                                              sees_images=has_media(prompt))
        if chosen is None:
            return generate_step(self.backend, pending, sampler, history, steer), None
        return chosen

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
        self.kv.reset()

    def close(self) -> None:
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
