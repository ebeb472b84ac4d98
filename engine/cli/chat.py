"""``python -m engine chat``: a streaming terminal chat, on a model loaded here or on a server's (``--remote``)."""
from __future__ import annotations

import argparse
import sys

from ..errors import HearthError
from ..library.model_defaults import ModelSettings
from ..library.model_settings import LAYER_LABELS, Layered
from ..prompt.messages import Message
from ..prompt.summary import compacted
from ..types import SamplingParams


def _prefill_progress(min_tokens: int = 1024):
    """A progress callback that shows "reading the prompt... 40%" on stderr
    for prompts long enough to make the user wait, and clears it at the end."""
    def show(done: int, total: int) -> None:
        if total < min_tokens:
            return
        end = "\n" if done >= total else ""
        print(f"\r\x1b[2mreading the prompt... {done * 100 // total}%\x1b[0m", end=end, file=sys.stderr,
              flush=True)
    return show


def _download_progress(step: float = 0.05):
    """Prints a Hub download's progress to stderr, every 5% of the bytes."""
    shown = [-1.0]

    def show(done: int, total: int, name: str) -> None:
        if total <= 0 or not name:
            return
        frac = done / total
        if frac >= 1.0 or frac - shown[0] >= step:
            shown[0] = frac
            print(f"downloading {name}: {done / 2**20:,.0f} of {total / 2**20:,.0f} MiB", file=sys.stderr, flush=True)
    return show


def _print_stats(st) -> None:
    cached = f", cached {st.cached_tokens}/{st.prompt_tokens}" if st.prompt_tokens else ""
    spec = ""
    if st.spec and st.spec.get("drafted"):
        spec = f", draft acceptance {st.spec['acceptance_rate']:.0%}"
    if st.summarized_messages:
        spec += f", {st.summarized_messages} oldest messages summarized to fit the context"
    elif st.dropped_messages:
        how = " (moved, not read again)" if st.context_policy == "shift" else ""
        spec += f", {st.dropped_messages} oldest messages left out to fit the context{how}"
    print(f"\x1b[2m[{st.generated_tokens} tok, {st.decode_tok_s:.1f} tok/s, TTFT {st.ttft_ms:.0f} ms"
          f"{cached}{spec}, {st.finish_reason}]\x1b[0m", file=sys.stderr, flush=True)


def chat_settings(a: argparse.Namespace, flags: dict) -> tuple[ModelSettings, Layered]:
    """The model's settings (its recommendations, yours for it: ``models defaults``) and the layers the
    chat's replies use, the command line's flags (``flags``) on top."""
    from ..library.model_defaults import model_settings, source_of
    from ..library.model_settings import value_problem
    from ..library.model_store import ModelStore, memo_dir
    from ..paths import data_dir

    for k, v in flags.items():  # a flag the user typed is an error when wrong, never quietly left out
        why = value_problem(k, v)
        if why:
            raise HearthError(f"--{k.replace('_', '-')}: {why}")
    entries, notice = ModelStore().load()
    if notice:
        print(f"note: {notice}", file=sys.stderr, flush=True)
    if a.remote:
        ms = model_settings("remote", f"{a.remote}#{a.model}", entries, None) if a.model else ModelSettings(None, "")
    else:
        model = a.model or "bundled"
        ms = model_settings(source_of(model), model, entries, memo_dir(data_dir()))
    return ms, ms.layered(request=flags)


def _say_settings(got: Layered) -> None:
    """One line on stderr naming what came from the model and from the user's settings for it."""
    keys = [k for k in got.values if got.layers[k] in ("model", "yours") and k not in ("system_prompt", "messages")]
    if keys:
        where = " and ".join(sorted({LAYER_LABELS[got.layers[k]] for k in keys}))
        mine = ", ".join(f"{k} {got.values[k]}" for k in keys)
        print(f"\x1b[2msettings from {where}: {mine}\x1b[0m", file=sys.stderr, flush=True)
    for note in got.notes:
        print(f"note: {note}", file=sys.stderr, flush=True)


def chat(a: argparse.Namespace, flags: dict) -> int:
    """The chat loop on a model loaded here, or on a server's (``--remote``): the model's own settings
    under the command line's sampling flags (``flags``)."""
    from ..config import default_exactness
    from ..loading.load import load_model
    from ..sizing.load_spec import LoadSpec, or_auto
    from ..paths import data_dir

    _ms, got = chat_settings(a, flags)
    params = got.params()
    _say_settings(got)
    if a.remote:
        return _chat_loop(a, params, _open_remote(a), reset=lambda: None, got=got)
    print("loading model...", file=sys.stderr, flush=True)
    # The window's planned load: what is left on Auto comes from the memory plan for this machine. The model's
    # own load settings (its context, what "Apply best" chose) come under the flags.
    own = got.values
    req = LoadSpec(model=a.model or "bundled", backend=or_auto(a.backend), quant=or_auto(a.quant),
                   context=or_auto(a.ctx if a.ctx is not None else own.get("context")),
                   draft=or_auto(a.draft or own.get("draft")), mmproj=or_auto(a.mmproj),
                   n_threads=or_auto(a.threads if a.threads is not None else own.get("n_threads")),
                   gpu_layers=or_auto(own.get("gpu_layers")), kv_type=or_auto(own.get("kv_type")),
                   exactness=a.exactness or own.get("exactness") or default_exactness())
    loaded = load_model(req, data_dir=data_dir(), progress=_download_progress())
    assert loaded.model is not None  # load_model describes what it loaded
    for note in loaded.model.notes:
        print(f"note: {note}", file=sys.stderr, flush=True)
    engine = loaded.engine
    label = engine.model.label if engine.model else "model"
    profile = getattr(engine.backend, "exactness", "")
    kernels = f", {profile} kernels" if profile else ""
    print(f"{label}, context {engine.backend.n_ctx}{kernels}. /reset clears the conversation, /quit leaves.",
          file=sys.stderr, flush=True)
    return _chat_loop(a, params, engine, reset=engine.reset, got=got)


def _open_remote(a: argparse.Namespace):
    import os

    from ..paths import data_dir
    from ..remote.connect import open_remote

    key = a.key or os.environ.get("HEARTH_REMOTE_KEY")
    engine = open_remote(a.remote, key, a.model, data_dir=data_dir())
    m = engine.describe()
    for note in m.notes:
        print(f"note: {note}", file=sys.stderr, flush=True)
    print(f"{m.label} on {m.device} ({m.runtime}), context {m.n_ctx:,}. /reset clears the conversation, "
          "/quit leaves.", file=sys.stderr, flush=True)
    return engine


def _opening(a: argparse.Namespace, got: Layered) -> list[Message]:
    """What every conversation starts with: the system prompt (``--system``, else the model's own), then the
    model's example turns (an Ollama Modelfile's MESSAGE lines)."""
    system = a.system if a.system is not None else got.values.get("system_prompt")
    out = [Message("system", system)] if system else []
    return out + [Message(m["role"], m["content"]) for m in got.values.get("messages") or ()]


def _policy(text: str, current: str) -> str:
    """``/policy NAME``: the context policy from now on (``/policy`` alone says which it is)."""
    from ..prompt.view import CONTEXT_POLICIES

    name = text[len("/policy"):].strip()
    if name not in CONTEXT_POLICIES:
        print(f"(context policy: {current}; /policy {' | '.join(CONTEXT_POLICIES)})", file=sys.stderr, flush=True)
        return current
    print(f"(context policy: {name})", file=sys.stderr, flush=True)
    return name


def _chat_loop(a: argparse.Namespace, params: SamplingParams, engine, *, reset, got: Layered) -> int:
    opening = _opening(a, got)
    history: list[Message] = list(opening)
    interactive = sys.stdin.isatty()
    policy = getattr(a, "context_policy", None) or "drop_oldest"
    while True:
        try:
            line = input("you> " if interactive else "")
        except EOFError:
            break
        except KeyboardInterrupt:
            print()
            break
        text = line.strip()
        if not text:
            continue
        if text in ("/quit", "/exit"):
            break
        if text == "/reset":
            history = list(opening)
            reset()
            print("(conversation cleared)", file=sys.stderr)
            continue
        if text.startswith("/policy"):
            policy = _policy(text, policy)
            continue
        history.append(Message("user", line))
        reply: list[str] = []
        try:
            events = engine.stream(history, params, progress=_prefill_progress(), context_policy=policy)
        except HearthError as e:  # too long under "stop": nothing was sent, the conversation stays
            history.pop()
            print(f"error: {e}\n(/policy drop_oldest, shift or compact goes on without the oldest messages; "
                  "then send it again)", file=sys.stderr, flush=True)
            continue
        try:
            if interactive:
                print("bot> ", end="", flush=True)
            for ev in events:
                if ev.kind == "delta":
                    reply.append(ev.text)
                    print(ev.text, end="", flush=True)
                elif ev.kind == "reasoning":
                    print(f"\x1b[2m{ev.text}\x1b[0m", end="", flush=True)
                elif ev.kind == "context":
                    said = f"summary of the oldest messages: {ev.text}" if ev.text else \
                        "summarizing the oldest messages to fit the context..."
                    print(f"\x1b[2m({said})\x1b[0m", file=sys.stderr, flush=True)
                elif ev.kind == "final":
                    print(flush=True)
                    _print_stats(ev.stats)
                    if ev.stats is not None and ev.stats.summary:  # the summary stands for them from now on
                        history[:] = compacted(history, ev.stats.view_start, ev.stats.summary)
        except KeyboardInterrupt:
            events.close()
            print("\n(stopped)", file=sys.stderr, flush=True)
        except HearthError as e:
            print(f"\nerror: {e}", file=sys.stderr, flush=True)
            if not reply:
                history.pop()  # keep the conversation usable; the user still sees their text
                continue
        history.append(Message("assistant", "".join(reply)))  # a partial reply too: the user saw it
    engine.close()
    return 0
