"""Engine: messages in, streamed text out, one backend underneath.

The engine owns the conversation-independent state: the loaded backend, the
prompt builder (template, context fitting), the KV reuse policy (kv.reuse) and
speculative decoding's draft and controller. One request: messages -> prompt
tokens -> reuse the longest cached prefix -> prefill the rest in chunks -> one
step generator (plain or speculative, chosen once) -> text events.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path
from typing import Callable, Generator, Mapping, Sequence

from .backends.base import Backend
from .chat_template import CHATML_FALLBACK, ChatTemplate
from .errors import Cancelled, HearthError, PromptTooLongError
from .formats import Layout, ThinkControl, detect, opens_in_prompt
from .formats.tools import Tool, ToolPlan, ToolSyntax, detect_tools, unsupported_tools
from .generate import Steering, generate_step, no_steps, stream_tokens
from .kv.disk_store import DEFAULT_DISK_BUDGET, PrefixStore
from .kv.prefix_cache import DEFAULT_BUDGET, PrefixCache
from .kv.reuse import FINAL_PIECE, KVReuse, ProgressFn, prefill
from .loading.backend import DEFAULT_CTX, open_backend
from .spec.find_draft import draft_header_vocab, find_draft_for
from .metrics import GenerationStats
from .media import has_media, whole as whole_images
from .models.catalogue import ModelRef, resolve
from .prompt import PromptBuilder
from .grammar import ConstrainedSampler, tool_constraint
from .spec.controller import SpecController, SpecStats
from .spec.costs import measure_round_costs, measure_verify_costs, model_draft_hopeless
from .spec.drafts import DraftSource, ModelDraft, NgramDraft, check_draft_compatible
from .spec.step import speculative_step
from .timeline import NO_TIMELINE, Recorder
from .types import Message, SamplingParams, StreamEvent, Vocab

__all__ = ["DEFAULT_CTX", "Engine"]


class Engine:
    def __init__(self, backend: Backend, *, model: ModelRef | None = None,
                 cache_budget: int = DEFAULT_BUDGET, store: PrefixStore | None = None) -> None:
        self.backend = backend
        self.model = model
        # budget 0 disables the snapshot cache; the live-KV prefix is always reused.
        self.kv = KVReuse(backend, PrefixCache(cache_budget), store)
        self.template = ChatTemplate(backend.chat_template or CHATML_FALLBACK,
                                     bos_token=backend.bos_token, eos_token=backend.eos_token)
        self.prompts = PromptBuilder(backend, self.template)
        # A thinking model's layout, known once from its template and vocabulary (engine/formats):
        # how its replies split into reasoning and answer, and the Think control its template offers.
        self.layout: Layout | None = _detect_layout(backend)
        self.think: ThinkControl | None = self.layout.think if self.layout is not None else None
        # How the model writes tool calls, from its template (None: it takes none Hearth can parse).
        self.tool_syntax: ToolSyntax | None = detect_tools(backend.chat_template)
        self._busy = threading.Lock()
        self.draft: ModelDraft | None = None
        self.spec_kind = "none"
        self.spec_ctl: SpecController | None = None
        self._draft_costs: tuple[float, float, float] | None = None  # measure_round_costs()
        self._verify_costs: tuple[float, dict[int, float]] | None = None  # measure_verify_costs()
        # Each reply's final stats carry its timeline (engine/timeline.py); off only
        # to measure what recording costs.
        self.record_timeline = True

    @classmethod
    def load(cls, model: str | os.PathLike[str] | None = None, *, n_ctx: int | None = None,
             n_threads: int | None = None, n_gpu_layers: int = 0, kv_type: str = "f16",
             cache_budget: int = DEFAULT_BUDGET, disk_cache: str | os.PathLike[str] | None = None,
             disk_cache_bytes: int | None = DEFAULT_DISK_BUDGET,
             draft: str | os.PathLike[str] | None = None, draft_k: int | None = None,
             backend: str | None = None, quant: str = "none", device: str = "auto",
             max_memory: dict | None = None, allow_pickle: bool = False, allow_remote_code: bool = False,
             repack: bool = False, exactness: str = "exact", threads_poll: int | None = None,
             mmproj: str | os.PathLike[str] | None = "auto",
             progress: Callable[[int, int, str], None] | None = None,
             cancel: threading.Event | None = None) -> "Engine":
        """Load a model (the bundled GGUF by default): a GGUF file, a transformers
        folder or a Hugging Face Hub id (downloaded first, with ``progress`` and ``cancel``).

        ``backend``: "llama_cpp" or "hf" (default: llama.cpp for GGUF, hf for folders).
        ``quant``/``device``/``max_memory``: the hf backend's bitsandbytes choice and
        accelerate placement; ``max_memory`` is where a sizing plan plugs in.
        ``disk_cache``: a folder where system-prompt prefixes persist across restarts,
        capped at ``disk_cache_bytes`` (least recently used entries are deleted first).
        ``draft``: speculative decoding: None/"none", "ngram", "auto" or a draft GGUF path.
        ``repack``: llama.cpp's faster CPU kernels for some quant types, which make
        logits depend on batch shape (see LlamaCppBackend); off keeps output exact.
        ``exactness``: "exact" (default) or "fast" (repack and flash attention on; cached
        and speculative output may then differ slightly from plain decoding).
        ``threads_poll``: llama.cpp only: run its threads on a pool of Hearth's own at this
        poll level (0-100; engine/backends/llama/threadpool.py); None: llama.cpp's default.
        ``mmproj``: a vision projector GGUF to load beside a GGUF model (it then sees images);
        "auto": the one made for it in the model's folder, if there is one.
        """
        ref = resolve(model)
        if ref.kind == "hub":
            from .models.hub import fetch_ref

            ref = fetch_ref(ref, allow_pickle=allow_pickle, allow_remote_code=allow_remote_code,
                            progress=progress, cancel=cancel)
        be, model_sha = open_backend(ref, backend=backend, n_ctx=n_ctx, n_threads=n_threads,
                                     n_gpu_layers=n_gpu_layers, kv_type=kv_type, quant=quant, device=device,
                                     max_memory=max_memory, allow_pickle=allow_pickle,
                                     allow_remote_code=allow_remote_code, repack=repack,
                                     exactness=exactness, threads_poll=threads_poll, mmproj=mmproj)
        store = None
        if disk_cache is not None and cache_budget > 0:
            root = Path(disk_cache)
            store = PrefixStore(root, {"model_sha256": model_sha(root), **be.state_identity()},
                                max_bytes=disk_cache_bytes)
        engine = cls(be, model=ref, cache_budget=cache_budget, store=store)
        try:
            engine.set_speculation(draft, k=draft_k, n_threads=n_threads)
        except BaseException:
            engine.close()
            raise
        return engine

    # -- speculative decoding -------------------------------------------------

    def set_speculation(self, kind: str | os.PathLike[str] | None, *, k: int | None = None,
                        n_threads: int | None = None, force: bool = False) -> None:
        """Choose the draft: "none", "ngram", "model" (the loaded draft), "auto"
        (every draft on offer) or a GGUF path to load as the draft model.

        Speculation measures itself against plain decoding and switches itself
        off where it does not pay, unless ``force`` (benchmarks of one draft
        kind). ``k`` fixes the draft length instead of adapting it."""
        kind = "none" if kind is None else str(kind)
        note = None
        if kind not in ("none", "ngram", "model", "auto"):
            self._load_draft(Path(kind), n_threads)
            kind = "model"
        elif kind == "auto" and self.draft is None:
            found = find_draft_for(self.backend.vocab())
            if found is not None:
                try:
                    self._load_draft(found, n_threads)
                except HearthError as e:  # a file Auto picked (not the user) will not load: say so, keep n-gram
                    note = f"model draft {found.name} not used: {e}"
        if kind == "model" and self.draft is None:
            raise HearthError("no draft model is loaded; choose a draft model file first")
        if kind == "auto" and self.draft is not None:
            note = self._model_draft_hopeless()
        self.spec_kind = kind
        if kind == "auto":
            # The n-gram lookup: asked every round, verified where it pays; else a model draft or plain.
            fallback = ["model"] if self.draft and not note else []
            self.spec_ctl = SpecController(fallback if force and fallback else fallback + ["plain"],
                                           k_fixed=k, free="ngram")
            self._seed_verify_costs(self.spec_ctl)
        else:
            modes = {"none": [], "ngram": ["ngram"], "model": ["model"]}[kind]
            self.spec_ctl = SpecController(modes if force else modes + ["plain"], k_fixed=k) if modes else None
        if note and self.spec_ctl is not None:
            self.spec_ctl.pending_notes.append(note)

    def _seed_verify_costs(self, ctl: SpecController) -> None:
        """Seed auto's cost line for verifying n-gram drafts: measured once per engine (~0.9 s).
        Without room, a KV that cannot be cut back or a token, it fits the line from its rounds."""
        with contextlib.suppress(ValueError, IndexError, HearthError):
            if ctl.k_fixed:
                return
            self._verify_costs = self._verify_costs or measure_verify_costs(self.backend, self.backend.tokenize("A")[0])
            ctl.seed_costs(*self._verify_costs)

    def _model_draft_hopeless(self) -> str | None:
        """Why ``auto`` leaves the model draft out on this machine, or None to try it.

        Before a model draft's first use costs a prefill of the conversation on the
        draft, measure (~0.5 s on a CPU, once per draft) what a target step, a verified
        token and a draft step cost here (``costs.model_draft_hopeless``).
        """
        if self._draft_costs is None:
            token = self.backend.tokenize("Hello")[0]
            assert self.draft is not None  # only asked with a draft loaded
            try:
                self._draft_costs = measure_round_costs(self.backend, self.draft.backend, token)
            except ValueError:
                return None  # no room to measure: let the controller find out
        return model_draft_hopeless(*self._draft_costs)

    def _load_draft(self, path: Path, n_threads: int | None) -> None:
        """Load a draft on the target's backend kind, after checking that its
        vocabulary matches the target's id for id."""
        header = draft_header_vocab(path)
        if header is not None:
            self._check_draft(path, header)  # before loading: the header is enough
        backend = self.backend.open_draft(path, n_threads=n_threads)
        try:
            self._check_draft(path, backend.vocab())
        except HearthError:
            backend.close()
            raise
        if self.draft is not None:
            self.draft.backend.close()
        self.draft = ModelDraft(backend, n_vocab_target=self.backend.n_vocab)
        self._draft_costs = None

    def _check_draft(self, path: Path, draft_vocab: Vocab) -> None:
        target = self.backend.vocab()
        why = check_draft_compatible(target, draft_vocab)
        if why:
            raise HearthError(f"{Path(path).name} cannot draft for {target.name}: {why}")

    # -- prompt -------------------------------------------------------------

    def render(self, messages: Sequence[Message | Mapping[str, str]],
               template_kwargs: Mapping[str, object] | None = None) -> str:
        return self.prompts.render(messages, template_kwargs)

    def prompt_tokens(self, messages: Sequence[Message | Mapping[str, str]],
                      template_kwargs: Mapping[str, object] | None = None) -> list[int]:
        return self.prompts.tokens(messages, template_kwargs)

    def count_image_tokens(self, data: bytes) -> int:
        """The positions an image takes in a prompt (its wrapping tokens included), counted by the
        model's own projector; safe beside a reply on another thread. NoVisionError without one."""
        from .images import decode

        return len(self.backend.tokenize_images([decode(data)], add_bos=False))

    def plan_tools(self, tools: Sequence[Tool], choice: str = "auto", parallel: bool = True) -> ToolPlan:
        """``tools`` for this model's call syntax; HearthError says why a model cannot take them."""
        if self.tool_syntax is None:
            why = unsupported_tools(self.backend.chat_template) or "its chat template takes no tools"
            raise HearthError(f"this model cannot call tools: {why}")
        return ToolPlan(self.tool_syntax, tuple(tools), choice, parallel)

    # -- generation ---------------------------------------------------------

    def stream(self, messages: Sequence[Message | Mapping[str, str]],
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
        if tools is not None:
            template_kwargs = tools.with_tools(template_kwargs)
            tools = tools.calling()  # tool_choice "none": shown to the model, never called
        if not self._busy.acquire(blocking=False):
            raise HearthError("the engine is already generating a reply")
        try:
            t_start = time.perf_counter()
            rec = self._recorder(t_start)
            spent = self.prompts.template_s, self.prompts.tokenize_s
            built = self.prompts.build(messages, reserve=params.max_tokens, policy=context_policy,
                                       template_kwargs=template_kwargs)
            checkpoints = self.kv.checkpoint(built.tokens,
                                             self.prompts.shared_system_tokens(built.messages, template_kwargs),
                                             self.prompts.shared_image_tokens(built.messages, template_kwargs))
            rec.prompt_built(self.prompts.template_s - spent[0], self.prompts.tokenize_s - spent[1])
            yield from self._run(built.tokens, params, cancel, t_start, checkpoints, progress, built.dropped, rec,
                                 t_prefill=time.perf_counter(), layout=self.layout,
                                 opened=opens_in_prompt(self.layout, built.text), tools=tools)
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
            tokens = self.backend.tokenize(text, add_bos=self.backend.add_bos, special=True)
            if not tokens:
                raise HearthError("the prompt is empty")
            t_prefill = time.perf_counter()
            rec.prompt_built(0.0, t_prefill - t_start)
            yield from self._run(tokens, params, cancel, t_start, rec=rec, t_prefill=t_prefill)
        finally:
            self._busy.release()

    def _run(self, prompt: list[int], params: SamplingParams, cancel: threading.Event | None,
             t_start: float, checkpoints: Sequence[int] = (), progress: ProgressFn | None = None,
             dropped: int = 0, rec: Recorder = NO_TIMELINE, t_prefill: float | None = None,
             layout: Layout | None = None, opened: bool = False,
             tools: ToolPlan | None = None) -> Generator[StreamEvent, None, None]:
        b = self.backend
        if len(prompt) >= b.n_ctx:
            raise PromptTooLongError(
                f"the conversation is {len(prompt)} tokens but the context holds {b.n_ctx}; "
                "start a new conversation, shorten the message, or raise the context length")
        history = list(prompt)
        stats = GenerationStats(backend=b.name, n_ctx=b.n_ctx, dropped_messages=dropped)
        sampler = rec.make_sampler(params)
        # A grammar is checked before any KV work; it runs on plain steps only
        # (rejected drafts would have to rewind its parse state), and so does a
        # thinking budget (its closing tokens are fed between two plain steps).
        constraint = tool_constraint(b, tools) if tools is not None else \
            None if params.grammar is None else b.grammar(params.grammar)
        # A grammar over the whole reply ("reply" scope) must see every token, so no closing text is
        # forced past it; an answer-scoped one pauses while the reply is inside its reasoning (steer.free).
        whole = constraint is not None and params.grammar_scope == "reply"
        steer = Steering() if layout is not None and not whole else None
        budgeted = steer is not None and params.reasoning_budget is not None
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
                steps = no_steps()
                spec = None
            else:
                spec = None
                if constraint is not None:
                    # The grammar shapes the answer only: steer.free pauses it inside the reasoning.
                    steps = generate_step(b, prompt[b.kv_len:], ConstrainedSampler(sampler, constraint, steer),
                                          history, steer)
                elif self.spec_ctl is None or budgeted:
                    steps = generate_step(b, prompt[b.kv_len:], sampler, history, steer)
                else:
                    spec = SpecStats()
                    drafts: dict[str, DraftSource] = {"ngram": NgramDraft()}
                    ctl = self.spec_ctl
                    if self.draft is not None and has_media(prompt):
                        # The draft model cannot see the images: this reply drafts by n-gram lookup only.
                        ctl = SpecController(["plain"], k_fixed=ctl.k_fixed, free="ngram")
                        ctl.pending_notes.append("the draft model cannot see images: n-gram drafts only")
                    elif self.draft is not None:
                        drafts["model"] = self.draft
                    steps = speculative_step(b, drafts, ctl, prompt[b.kv_len:], sampler, history, spec)
            yield from stream_tokens(b, steps, prompt_len=len(prompt), cached=keep, params=params,
                                     stats=stats, t_start=t_start, cancel=cancel, spec_stats=spec, timeline=rec,
                                     t_prefill=t_prefill, layout=layout, opened=opened,
                                     steer=steer if spec is None else None, tools=tools)
        finally:
            # Whatever happened (stop, cancel, error, abandoned generator), record
            # what the KV really holds so the next request can reuse it safely.
            self.kv.commit(history)
            if constraint is not None:
                constraint.close()

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
        if self.draft is not None:
            self.draft.backend.close()
        self.backend.close()


def _detect_layout(backend: Backend) -> Layout | None:
    """The reasoning layout of the backend's model (None: it does not think, or cannot be told)."""
    try:
        tokens = backend.vocab().tokens
    except (AttributeError, NotImplementedError, HearthError):
        tokens = ()
    return detect(backend.chat_template, tokens, bos_token=backend.bos_token, eos_token=backend.eos_token)
