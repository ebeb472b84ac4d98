"""``python -m engine bench serve``: Hearth's server under concurrent load, against llama-server.

Rows, each measured side by side in one run so its ratios compare like with like:

- **throughput** (the default row): at 1, 2, 4 and 8 concurrent streams, Hearth's ``engine serve
  --parallel N`` against llama-server built from the same vendored llama.cpp (``-np N``, continuous
  batching), the same model file, threads, per-sequence context and kernels (serve_sides.py), both
  driven by the official ``openai`` client with the same prompts, ``max_tokens``, greedy sampling and
  ``ignore_eos`` (serve_client.py). Each level starts both servers, warms each up, then runs
  ``--rounds`` rounds; a round runs one wave on each side back to back (the order turned every other
  round): every stream sends ``PER_STREAM`` requests one after another. Per level: aggregate generated
  tokens/s, p50/p99 TTFT and TPOT on each side (over every round's requests), and the ratios
  Hearth / llama-server paired round by round (pairing.py) with their 90% interval, the bars
  ("Hearth >= 1.0x throughput", "p99 TTFT no worse") read against it. Hearth speculates in none of
  these (``--draft none``): the row compares the engines; the ``spec`` row measures speculation.
- **hol** and **spec**: serve_rows.py.

``--quick``: a check that everything runs (sized for about 2 minutes on two quiet cores): one round, short
replies.
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from ..serve.runtime.quiet_gc import settle
from .pairing import at_most, paired, run_order, verdict
from .serve_client import StreamedReply, make_client, story, wave_figures, wave
from .serve_sides import Server, Setup, check_matched, per_sequence, say, start_hearth, start_llama_server

LEVELS = (1, 2, 4, 8)
PER_STREAM = 2            # requests each stream sends one after another in a round
# Tokens per request unless --tokens says: 128 keeps the default run within 10 minutes on two cores
# (at 256 its throughput waves alone took 8.9 of 12.7 minutes); speculation's replies stay longer.
THROUGHPUT_TOKENS = 128
SPEC_TOKENS = 256
THROUGHPUT_BAR = 1.0      # Hearth's throughput over llama-server's, at least
TTFT_BAR = 1.0            # Hearth's p99 TTFT over llama-server's, at most
HEARTH, LLAMA = "hearth", "llama-server"
ROWS = ("throughput", "hol", "spec")


def level_ratios(got: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Hearth / llama-server, round by round, for each figure of a wave's summary."""
    keys = ("tok_s", "ttft_ms_p50", "ttft_ms_p99", "tpot_ms_p50", "tpot_ms_p99")
    return {k: paired([w[k] for w in got[HEARTH]], [w[k] for w in got[LLAMA]]) for k in keys}


def bars(ratios: dict[str, dict[str, Any]]) -> dict[str, str]:
    """The issue's two bars, read against each ratio's interval."""
    tput, ttft = ratios["tok_s"], ratios["ttft_ms_p99"]
    return {f"throughput >= {THROUGHPUT_BAR}x": verdict(tput["ci"][0], tput["ci"][1], THROUGHPUT_BAR, tput["coverage"]),
            "p99 TTFT no worse": at_most(ttft["ci"][0], ttft["ci"][1], TTFT_BAR, ttft["coverage"])}


def level_line(n: int, ratios: dict[str, dict[str, Any]], verdicts: dict[str, str]) -> str:
    """One level as a line of the printed table."""
    t, f = ratios["tok_s"], ratios["ttft_ms_p99"]
    return (f"{n} stream{'s' if n > 1 else ' '}: throughput {t['median']:.3f}x [{t['ci'][0]:.3f}, {t['ci'][1]:.3f}] "
            f"{verdicts[f'throughput >= {THROUGHPUT_BAR}x']}; p99 TTFT {f['median']:.3f}x "
            f"[{f['ci'][0]:.3f}, {f['ci'][1]:.3f}] {verdicts['p99 TTFT no worse']}")


def pooled(waves: list[dict[str, Any]], replies: list[StreamedReply]) -> dict[str, Any]:
    """A side's figures over every round of a level: p50/p99 over all its requests, the median throughput
    of its waves (and each wave's)."""
    import statistics

    out = wave_figures(replies, 1.0)
    out.pop("tokens")
    out["tok_s"] = round(statistics.median(w["tok_s"] for w in waves), 2) if waves else 0.0
    out["tok_s_rounds"] = [w["tok_s"] for w in waves]
    return out


def run_level(s: Setup, n: int) -> dict[str, Any]:
    """Both servers at ``n`` streams: a warm-up, then ``s.rounds`` paired rounds."""
    assert s.llama_server is not None
    servers: dict[str, Server] = {}
    try:
        servers[LLAMA] = start_llama_server(s.llama_server, s.model, s.workdir, parallel=n, n_ctx_seq=s.n_ctx_seq,
                                            threads=s.threads, exactness=s.exactness)
        servers[HEARTH] = start_hearth(f"hearth-np{n}", s.model, s.workdir, parallel=n, n_ctx_seq=s.n_ctx_seq,
                                       threads=s.threads, exactness=s.exactness)
        problems = check_matched(servers[HEARTH], servers[LLAMA], s.n_ctx_seq, n)
        clients = {k: make_client(v.url) for k, v in servers.items()}
        for k, v in servers.items():  # warm-up: first-use costs (buffers, page faults) stay out of the rounds
            wave(clients[k], v.model_id, [story("warm", i) for i in range(n)], n, 8)
        got: dict[str, list[dict[str, Any]]] = {HEARTH: [], LLAMA: []}
        replies: dict[str, list[StreamedReply]] = {HEARTH: [], LLAMA: []}
        for r in range(s.rounds):
            prompts = [story(f"{n}.{r}", i) for i in range(n * s.per_stream)]
            for k in run_order([LLAMA, HEARTH], r):
                got_replies, wall = wave(clients[k], servers[k].model_id, prompts, n, s.tokens)
                got[k].append(wave_figures(got_replies, wall))
                replies[k] += got_replies
    finally:
        for v in servers.values():
            v.close()
    ratios = level_ratios(got)
    verdicts = bars(ratios)
    say(level_line(n, ratios, verdicts))
    return {"streams": n, HEARTH: pooled(got[HEARTH], replies[HEARTH]), LLAMA: pooled(got[LLAMA], replies[LLAMA]),
            "hearth_vs_llama_server": ratios, "bars": verdicts, "line": level_line(n, ratios, verdicts),
            "matched": problems or "yes", "hearth_loaded": servers[HEARTH].loaded,
            "llama_server_loaded": servers[LLAMA].loaded}


def throughput_row(s: Setup) -> dict[str, Any]:
    """Every level, Hearth against llama-server."""
    rows = [run_level(s, n) for n in s.levels]
    return {"levels": rows, "table": [r["line"] for r in rows],
            "method": (f"{s.per_stream} requests per stream per round, {s.tokens} tokens each (ignore_eos, greedy), "
                       f"{s.rounds} round(s) after a warm-up; ratios Hearth / llama-server paired by round")}


def resolve_model(name: str | None) -> Path:
    """``--model``: a GGUF file, ``bundled`` (the default) or ``target`` (Qwen2.5-Coder-1.5B, fetch-bench-pair)."""
    from ..models import catalogue

    if name in (None, "", "bundled"):
        return catalogue.bundled_model_path()
    if name == "target":
        path = catalogue.bench_model_path(catalogue.BENCH_TARGET)
        if path is None:
            raise SystemExit("bench serve --model target needs Qwen2.5-Coder-1.5B: "
                             "python -m engine models fetch-bench-pair")
        return path
    path = Path(name).expanduser()
    if path.suffix != ".gguf" or not path.is_file():
        raise SystemExit(f"bench serve --model takes a .gguf file, bundled or target, not {name!r} "
                         "(llama-server reads the same file)")
    return path


def wanted_rows(a: argparse.Namespace) -> tuple[str, ...]:
    """``--hol`` / ``--spec`` pick those rows; neither: every row."""
    picked = tuple(r for r in ROWS[1:] if getattr(a, r, False))
    return picked or ROWS


def parse_levels(text: str | None) -> tuple[int, ...]:
    if not text:
        return LEVELS
    try:
        levels = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise SystemExit(f"bench serve --streams takes numbers separated by commas, not {text!r}") from None
    if not levels or min(levels) < 1:
        raise SystemExit(f"bench serve --streams takes levels of 1 or more, not {text!r}")
    return levels


def setup_for(a: argparse.Namespace, workdir: Path, rows: tuple[str, ...]) -> Setup:
    from ..backends.llama.backend import default_threads
    from ..config import default_exactness

    quick = bool(getattr(a, "quick", False))
    tokens = 32 if quick else max(8, a.tokens or THROUGHPUT_TOKENS)
    server = None
    if "throughput" in rows:
        from .llama_tools import SERVER, ensure_tools

        server = ensure_tools(targets=(SERVER,)) / SERVER
    return Setup(model=resolve_model(a.model), threads=a.threads or default_threads(),
                 exactness=a.exactness or default_exactness(), tokens=tokens,
                 spec_tokens=64 if quick else max(8, a.tokens or SPEC_TOKENS),
                 rounds=1 if quick else max(1, a.rounds), levels=parse_levels(getattr(a, "streams", None)),
                 per_stream=1 if quick else PER_STREAM, n_ctx_seq=per_sequence(a.ctx or tokens + 256),
                 workdir=workdir, llama_server=server, quick=quick)


def bench_serve(a: argparse.Namespace) -> dict[str, Any]:
    from .serve_rows import hol_row, spec_row

    rows = wanted_rows(a)
    with tempfile.TemporaryDirectory(prefix="hearth-bench-serve-") as tmp:
        s = setup_for(a, Path(tmp), rows)
        settle()  # this client's own full collections out of the requests it times (serve/runtime/quiet_gc.py)
        out: dict[str, Any] = {"model": s.model.name, "threads": s.threads, "exactness": s.exactness,
                               "rounds": s.rounds, "quick": s.quick, "n_ctx_seq": s.n_ctx_seq}
        if "throughput" in rows:
            say(f"bench serve: {s.model.name}, {s.threads} threads, {s.exactness} profile, levels {s.levels}")
            out["throughput"] = throughput_row(s)
        if "hol" in rows:
            out["hol"] = hol_row(s)
        if "spec" in rows:
            out["spec"] = spec_row(s)
    return out
