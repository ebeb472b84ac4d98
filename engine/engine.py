"""Engine: messages in, streamed text out, one backend underneath.

The engine owns the conversation-independent state: the loaded backend, the
chat template and which tokens the backend's KV cache currently holds. It
reuses the longest common prefix of that KV with each new prompt, so the next
turn of the same conversation only prefills the new tokens.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path
import time
from typing import Callable, Iterator, Mapping, Sequence

from .backends.base import Backend
from .chat_template import CHATML_FALLBACK, ChatTemplate
from .errors import HearthError, PromptTooLongError
from .generate import generate_step, stream_tokens
from .metrics import GenerationStats
from .models.catalogue import BACKENDS, ModelRef, default_backend, resolve
from .kv.prefix_cache import DEFAULT_BUDGET, PrefixCache, common_prefix_len
from .kv.disk_store import PrefixStore, file_sha256
from .sampling import make_sampler
from .spec.controller import SpecController, SpecStats, measure_round_costs, model_draft_ceiling
from .spec.drafts import ModelDraft, NgramDraft, check_draft_compatible
from .spec.step import speculative_step
from .types import Message, SamplingParams, StreamEvent

DEFAULT_CTX = 8192


class Engine:
    def __init__(self, backend: Backend, *, model: ModelRef | None = None,
                 cache_budget: int = DEFAULT_BUDGET, store: PrefixStore | None = None) -> None:
        self.backend = backend
        self.model = model
        self.store = store  # system-prompt snapshots on disk, across restarts
        # budget 0 disables the snapshot cache; the live-KV prefix is always reused.
        self.cache = PrefixCache(cache_budget)
        self.template = ChatTemplate(backend.chat_template or CHATML_FALLBACK,
                                     bos_token=backend.bos_token, eos_token=backend.eos_token)
        self._kv_tokens: list[int] = []   # exactly the tokens the backend's KV holds
        self._live_prompt_len = 0         # prompt part of _kv_tokens' last request
        self._busy = threading.Lock()
        self._sys_tokens: dict[str, list[int]] = {}
        self.draft: ModelDraft | None = None
        self.spec_kind = "none"
        self.spec_ctl: SpecController | None = None
        self._draft_costs: tuple[float, float, float] | None = None  # measure_round_costs()

    @classmethod
    def load(cls, model: str | os.PathLike[str] | None = None, *, n_ctx: int | None = None,
             n_threads: int | None = None, n_gpu_layers: int = 0, kv_type: str = "f16",
             cache_budget: int = DEFAULT_BUDGET, disk_cache: str | os.PathLike[str] | None = None,
             draft: str | os.PathLike[str] | None = None, draft_k: int | None = None,
             backend: str | None = None, quant: str = "none", device: str = "auto",
             max_memory: dict | None = None, allow_pickle: bool = False, allow_remote_code: bool = False,
             repack: bool = False, progress: Callable[[int, int, str], None] | None = None,
             cancel: threading.Event | None = None) -> "Engine":
        """Load a model (the bundled GGUF by default): a GGUF file, a transformers
        folder or a Hugging Face Hub id (downloaded first, with ``progress`` and ``cancel``).

        ``backend``: "llama_cpp" or "hf" (default: llama.cpp for GGUF, hf for folders).
        ``quant``/``device``/``max_memory``: the hf backend's bitsandbytes choice and
        accelerate placement; ``max_memory`` is where a sizing plan plugs in.
        ``disk_cache``: a folder where system-prompt prefixes persist across restarts.
        ``draft``: speculative decoding: None/"none", "ngram", "auto" or a draft GGUF path.
        ``repack``: llama.cpp's faster CPU kernels for some quant types, which make
        logits depend on batch shape (see LlamaCppBackend); off keeps output exact.
        """
        ref = resolve(model)
        if ref.kind == "hub":
            from .models.hub import fetch_ref

            ref = fetch_ref(ref, allow_pickle=allow_pickle, allow_remote_code=allow_remote_code,
                            progress=progress, cancel=cancel)
        kind = backend or default_backend(ref)
        if kind == "hf":
            hf = _import_hf()  # torch + transformers: only when this backend is chosen
            be = hf.load(ref, n_ctx=n_ctx, quant=quant, device=device, max_memory=max_memory,
                         n_threads=n_threads, allow_pickle=allow_pickle, allow_remote_code=allow_remote_code)
            model_sha = lambda root: hf.source_sha256(ref.path, memo_dir=root)  # noqa: E731
        elif kind == "llama_cpp":
            if ref.kind != "gguf":
                raise HearthError(f"{ref.label} is a transformers folder; the llama.cpp backend needs a "
                                  ".gguf file, so choose the transformers (hf) backend")
            if quant != "none":
                raise HearthError("int8/int4 are transformers-backend choices; a GGUF file carries its "
                                  "own quantization (pick another GGUF file to change it)")
            from .backends.llama_cpp import LlamaCppBackend  # native library: load only when asked
            from .models.gguf import model_info

            info = model_info(ref.path)
            if n_ctx is None:
                n_ctx = min(info.n_ctx_train or DEFAULT_CTX, DEFAULT_CTX)
            be = LlamaCppBackend(ref.path, n_ctx=n_ctx, n_threads=n_threads,
                                 n_gpu_layers=n_gpu_layers, kv_type=kv_type, repack=repack, info=info)
            model_sha = lambda root: file_sha256(ref.path, memo_dir=root)  # noqa: E731
        else:
            raise HearthError(f"unknown backend {kind!r}; choose one of {', '.join(BACKENDS)}")
        store = None
        if disk_cache is not None and cache_budget > 0:
            root = Path(disk_cache)
            store = PrefixStore(root, {"model_sha256": model_sha(root), **be.state_identity()})
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
        if kind not in ("none", "ngram", "model", "auto"):
            self._load_draft(Path(kind), n_threads)
            kind = "model"
        elif kind == "auto" and self.draft is None and getattr(self.backend, "info", None) is not None:
            found = find_draft_for(self.backend.info)
            if found is not None:
                self._load_draft(found, n_threads)
        if kind == "model" and self.draft is None:
            raise HearthError("no draft model is loaded; choose a draft model file first")
        note = None
        if kind == "auto" and self.draft is not None:
            note = self._model_draft_hopeless()
        modes = {"none": [], "ngram": ["ngram"], "model": ["model"],
                 "auto": (["model"] if self.draft and not note else []) + ["ngram"]}[kind]
        self.spec_kind = kind
        self.spec_ctl = SpecController(modes if force else modes + ["plain"], k_fixed=k) if modes else None
        if note and self.spec_ctl is not None:
            self.spec_ctl.pending_notes.append(note)

    def _model_draft_hopeless(self) -> str | None:
        """Why ``auto`` leaves the model draft out on this machine, or None to try it.

        Before a model draft's first use costs a prefill of the whole
        conversation on the draft, measure (~0.5 s on a CPU, once per draft)
        what a target step, a verified token and a draft step cost here. If
        even accepting every draft could not beat plain decoding, auto never
        runs it; a GPU, where verifying is nearly free, passes easily.
        """
        if self._draft_costs is None:
            token = self.backend.tokenize("Hello")[0]
            try:
                self._draft_costs = measure_round_costs(self.backend, self.draft.backend, token)
            except ValueError:
                return None  # no room to measure: let the controller find out
        step, per_token, draft_step = self._draft_costs
        best = model_draft_ceiling(step, per_token, draft_step)
        if best >= 1.0:
            return None
        return (f"model draft not used here: a verified token costs {per_token / step:.2f} of a step and a "
                f"draft step {draft_step / step:.2f}, so even accepting every draft it would run at "
                f"{best:.2f}x plain decoding")

    def _load_draft(self, path: Path, n_threads: int | None) -> None:
        """Load a draft on the target's backend kind, after checking that its
        vocabulary matches the target's id for id."""
        if self.backend.name == "hf":
            backend = _import_hf().load(resolve(path), n_ctx=self.backend.n_ctx, n_threads=n_threads)
        else:
            from .backends.llama_cpp import LlamaCppBackend
            from .models.gguf import model_info

            info = model_info(path)
            self._check_draft(path, info)  # before loading: the header is enough
            backend = LlamaCppBackend(path, n_ctx=self.backend.n_ctx, n_threads=n_threads, info=info)
        try:
            self._check_draft(path, vocab_of(backend))
        except HearthError:
            backend.close()
            raise
        if self.draft is not None:
            self.draft.backend.close()
        self.draft = ModelDraft(backend, n_vocab_target=self.backend.n_vocab)
        self._draft_costs = None

    def _check_draft(self, path: Path, draft_vocab) -> None:
        target = vocab_of(self.backend)
        why = check_draft_compatible(target, draft_vocab)
        if why:
            raise HearthError(f"{Path(path).name} cannot draft for {target.name}: {why}")

    # -- prompt -------------------------------------------------------------

    def render(self, messages: Sequence[Message | Mapping[str, str]]) -> str:
        return self.template.render(messages, add_generation_prompt=True)

    def prompt_tokens(self, messages: Sequence[Message | Mapping[str, str]]) -> list[int]:
        text = self.render(messages)
        b = self.backend
        # Templates that write the BOS text themselves must not get a second BOS.
        add_bos = getattr(b, "add_bos", False) and not (b.bos_token and text.startswith(b.bos_token))
        return b.tokenize(text, add_bos=add_bos, special=True)

    # -- generation ---------------------------------------------------------

    def stream(self, messages: Sequence[Message | Mapping[str, str]],
               params: SamplingParams | None = None, *,
               cancel: threading.Event | None = None) -> Iterator[StreamEvent]:
        """Yield text deltas, then one final event with the finish reason and metrics.

        Raises PromptTooLongError before any work if the prompt cannot fit.
        """
        params = params or SamplingParams()
        if not self._busy.acquire(blocking=False):
            raise HearthError("the engine is already generating a reply")
        try:
            t_start = time.perf_counter()
            prompt = self.prompt_tokens(messages)
            checkpoints = self._checkpoints(messages, prompt)
            yield from self._run(prompt, params, cancel, t_start, checkpoints)
        finally:
            self._busy.release()

    def _checkpoints(self, messages: Sequence[Message | Mapping[str, str]], prompt: list[int]) -> list[int]:
        """Prompt lengths worth snapshotting on the way through prefill.

        The system prompt, plus whatever the template always writes before a
        user's words (e.g. ``<|im_start|>user\n``), is shared by every
        conversation that uses it, so it is cached once (pinned) and restored
        for each of them.
        """
        if self.cache.budget_bytes <= 0 or not messages:
            return []
        first = messages[0]
        role = first.role if isinstance(first, Message) else first.get("role")
        if role != "system":
            return []
        content = first.content if isinstance(first, Message) else first.get("content", "")
        shared = self._sys_tokens.get(content)
        if shared is None:  # tokenizing a long system prompt costs ~10 ms: once per prompt
            if len(self._sys_tokens) > 32:
                self._sys_tokens.clear()
            # Two renders that differ only in the user's words: their common
            # tokens are exactly what every conversation with this prompt shares.
            try:
                a, b = (self.template.render([Message("system", content), Message("user", u)],
                                             add_generation_prompt=False) for u in ("A", "Z"))
            except HearthError:  # a template that insists on another shape: the system part alone
                a = b = self.template.render(messages[:1], add_generation_prompt=False)
            ta = self.backend.tokenize(a, special=True)
            tb = self.backend.tokenize(b, special=True)
            shared = self._sys_tokens[content] = ta[:common_prefix_len(ta, tb)]
        n = common_prefix_len(shared, prompt)
        return [n] if self.cache.block <= n < len(prompt) - 1 else []

    def _run(self, prompt: list[int], params: SamplingParams, cancel: threading.Event | None,
             t_start: float, checkpoints: Sequence[int] = ()) -> Iterator[StreamEvent]:
        b = self.backend
        if len(prompt) >= b.n_ctx:
            raise PromptTooLongError(
                f"the conversation is {len(prompt)} tokens but the context holds {b.n_ctx}; "
                "start a new conversation, shorten the message, or raise the context length")
        # The last prompt token is always recomputed: its logits start decoding.
        keep = min(common_prefix_len(self._kv_tokens, prompt), len(prompt) - 1)
        if keep < self._live_prompt_len - 1:
            # Diverging inside the last *prompt* means another conversation (or an
            # edit), not a regenerate: keep the live state for a switch back.
            self._save_live_kv()
        n_cached, state = self.cache.lookup(prompt, longer_than=keep)
        history = list(prompt)
        try:
            if state is not None:
                b.restore(state)
                keep = n_cached
            b.truncate(keep)
            # Prefill up to each checkpoint and snapshot it, so the shared system
            # prompt lands in the cache even on this first, cold request.
            for cp in checkpoints:
                if cp > b.kv_len:
                    keep = self._reach_checkpoint(prompt[:cp], served=keep)
            self._live_prompt_len = len(prompt)
            stats = GenerationStats(backend=b.name)
            sampler = make_sampler(params)
            spec = None
            if self.spec_ctl is None:
                steps = generate_step(b, prompt[b.kv_len:], sampler, history)
            else:
                spec = SpecStats()
                drafts = {"ngram": NgramDraft(), "model": self.draft}
                steps = speculative_step(b, drafts, self.spec_ctl, prompt[b.kv_len:], sampler, history, spec)
            yield from stream_tokens(b, steps, prompt_len=len(prompt), cached=keep, params=params,
                                     stats=stats, t_start=t_start, cancel=cancel, spec_stats=spec)
        finally:
            # Whatever happened (stop, cancel, error, abandoned generator), record
            # what the KV really holds so the next request can reuse it safely.
            self._kv_tokens = history[:b.kv_len]

    def _reach_checkpoint(self, tokens: list[int], served: int) -> int:
        """Bring the KV to exactly ``tokens``: from disk if stored, else by
        prefilling; then cache it in memory (pinned) and on disk.

        Returns how many prompt tokens were served without computing them.
        """
        b = self.backend
        stored = self.store.load(tokens) if self.store else None
        if stored is not None:
            try:
                b.restore(b.state_from_bytes(len(tokens), stored))
                served = len(tokens)
            except HearthError as e:  # passed its checksum but llama.cpp refused it
                self.store.reject(tokens, str(e))
                b.truncate(0)
                stored, served = None, 0
        if stored is None:
            b.forward(tokens[b.kv_len:])
        state = b.snapshot()
        self.cache.insert(tokens, lambda: state, b.nbytes, pinned=True)
        if self.store and stored is None:
            self.store.save(tokens, b.state_bytes(state))
        return served

    def _save_live_kv(self) -> None:
        """Snapshot the live KV before a different prompt overwrites it, so
        switching back to that conversation costs a restore, not a prefill."""
        if self.cache.budget_bytes > 0 and len(self._kv_tokens) >= self.cache.block:
            self.cache.insert(self._kv_tokens, self.backend.snapshot, self.backend.nbytes)

    def cache_stats(self) -> dict[str, float]:
        """Hit rate and bytes of the prefix cache, for the window and the CLI."""
        return self.cache.stats()

    def reset(self) -> None:
        """Forget the KV cache (e.g. ``/reset`` in the CLI)."""
        self.backend.truncate(0)
        self._kv_tokens = []
        self._live_prompt_len = 0

    def close(self) -> None:
        if self.draft is not None:
            self.draft.backend.close()
        self.backend.close()


def _import_hf():
    """The transformers backend module, or a clear message when the optional
    packages are not installed (the app's default set-up is GGUF-only)."""
    try:
        from .backends import hf
    except ImportError as e:
        import sys

        how = ("this Hearth bundle is the lite flavour; install the full bundle for transformers models"
               if getattr(sys, "frozen", False) else
               "run `python3 scripts/setup.py --hf` to add torch, transformers and bitsandbytes")
        raise HearthError(f"the transformers backend is not installed ({e.name or e}); {how}") from None
    return hf


def vocab_of(backend: Backend):
    """The target/draft vocabulary for the compatibility check: the GGUF header
    when there is one, else the transformers tokenizer's id -> token table."""
    info = getattr(backend, "info", None)
    if info is not None:
        return info
    from types import SimpleNamespace

    tok = backend.tok
    tokens = tok.convert_ids_to_tokens(list(range(len(tok))))
    return SimpleNamespace(tokens=tokens, tokenizer_model=f"hf-{type(tok).__name__}",
                           name=getattr(tok, "name_or_path", "model"), weight_bytes=0, path="")


def find_draft_for(target_info) -> Path | None:
    """A compatible draft among the local model files: the smallest GGUF in the
    model folder (benchmark pair included) whose vocabulary matches the
    target's and whose weights are at most half the target's."""
    from .models.gguf import model_info
    from .models.catalogue import model_dir

    best: tuple[int, Path] | None = None
    folder = model_dir()
    for p in sorted(folder.glob("*.gguf")) if folder.is_dir() else []:
        if p.resolve() == Path(target_info.path).resolve():
            continue
        try:
            info = model_info(p)
        except HearthError:
            continue
        if info.weight_bytes * 2 > target_info.weight_bytes:
            continue
        if check_draft_compatible(target_info, info) is None and (best is None or info.weight_bytes < best[0]):
            best = (info.weight_bytes, p)
    return best[1] if best else None
