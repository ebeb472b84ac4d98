"""``python -m engine bench speed``: Hearth against llama.cpp itself, on the quants people download.

In one interleaved run per model (each round runs every side once, the order alternating, so
drift on the machine hits all of them) it measures prefill (a prompt of 512 tokens, and one of
``--prompt-tokens``, the length a person's first message with a document has) and decode (128
tokens after a short prompt, greedy) for:

- ``llama-bench``, built from the llama.cpp this runtime vendors with llama.cpp's own defaults
  (tinyBLAS and repack on; llama_tools.py): pp512, pp``N`` and tg128, its own figures;
- llama-cpp-python's ``Llama`` with its defaults, on the same wheel and threads as Hearth;
- Hearth in each exactness profile (``exact``, ``fast``), through ``Engine.complete``: the
  figures its own stats report (``prefill_ms``, ``decode_tok_s``), prefix cache off.

Each side runs in a worker process of its own (``worker``), so ggml's once-a-process switches
(``GGML_CPU_TILED_MM``) are what that side would have alone.

Models: the bundled Q4_1, and Qwen2.5-Coder-1.5B in Q4_K_M (``models fetch-bench-pair``) and in
Q4_0 and Q8_0, made from it with llama.cpp's own ``llama-quantize`` (cached beside it). Each
round runs one test at a time on every side back to back (the order turned every other round); a
side's ratio is the median of its per-round ratios to llama-bench (pairing.py), with their range,
their 90% interval and, for the default profile, #42's bars read against it ("met", "not met",
"within noise"): a shared machine drifts by 10-20% within a minute. ``--sides`` picks the sides,
``--control`` runs llama-bench twice a round (the noise floor), ``--switches`` runs llama-bench
with each switch off (repack, the tiled K-quant matmul, flash attention; ``tinyblas``: a second
build without it) and other micro-batches, and ``--window`` the window against the engine (window_run).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ..config import DEFAULT_EXACTNESS, EXACTNESS
from .llama_tools import ensure_tools
from .pairing import bracket, columns, paired, run_order, verdict

N_GEN = 128
PP = 512
SHORT = "Write a long story about a lighthouse."
PREFILL_BAR, DECODE_BAR = 1.0, 0.97
CONTROL = "llama-bench-again"   # the reference run twice a round: the noise floor


def quantized(tools: Path, source: Path, kind: str) -> Path:
    """``source`` requantized to ``kind`` by llama-quantize (cached beside it)."""
    out = source.with_name(source.stem.replace("q4_k_m", kind.lower()) + "-from-q4_k_m.gguf")
    if not out.is_file():
        part = out.with_suffix(".part")
        subprocess.run([str(tools / "llama-quantize"), "--allow-requantize", str(source), str(part), kind],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        part.rename(out)
    return out


def speed_models(tools: Path, which: str) -> list[tuple[str, Path]]:
    from ..models import catalogue

    out: list[tuple[str, Path]] = []
    for name in which.split(","):
        if name == "bundled":
            out.append(("SmolLM2-135M Q4_1 (bundled)", catalogue.bundled_model_path()))
            continue
        target = catalogue.bench_model_path(catalogue.BENCH_TARGET)
        if target is None:
            raise SystemExit("bench speed needs Qwen2.5-Coder-1.5B: python -m engine models fetch-bench-pair")
        kind = name.upper()
        out.append((f"Qwen2.5-Coder-1.5B {kind}", target if kind == "Q4_K_M" else quantized(tools, target, kind)))
    return out


def prompt_ids(tokenize, n: int) -> list[int]:
    """The first ``n`` tokens of the project's own documentation, by this model's tokenizer."""
    from .documents import manual_text

    return tokenize(manual_text())[:n]


def backend_prompt_ids(b: Any, n: int) -> list[int]:
    """``prompt_ids`` by a Hearth backend's tokenizer: ``n`` tokens with the BOS it adds, which is not among them."""
    return prompt_ids(lambda t: b.tokenize(t, add_bos=False, special=False), n - int(b.add_bos))


def run_llama_bench(tools: Path, path: Path, threads: int, n_prompt: int, extra: tuple[str, ...] = (),
                    env: dict[str, str] | None = None, n_gen: int = N_GEN,
                    prompts: tuple[int, ...] | None = None) -> dict:
    """llama-bench's pp512, pp``n_prompt`` and tg``n_gen`` in tokens/s (one repetition, after llama-bench's
    own warm-up; ``n_prompt`` 0: decode only; ``prompts``: these prompt lengths instead of 512 and
    ``n_prompt``; ``n_gen`` 0: prefill only). ``env``: variables ggml reads (GGML_CPU_TILED_MM), on top of a
    clean environment's."""
    pp = prompts if prompts is not None else ((PP, n_prompt) if n_prompt else ())
    cmd = [str(tools / "llama-bench"), "-m", str(path), "-t", str(threads),
           "-p", ",".join(map(str, pp)) or "0", "-n", str(n_gen), "-r", "1", "-o", "json", *extra]
    rows = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True,
                                     env={**clean_env(), **(env or {})}).stdout)
    out = {}
    for r in rows:
        key = f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}"
        out[key] = r["avg_ts"]
    return out


def clean_env() -> dict[str, str]:
    """This process's environment without ggml's switches: each side sets its own, as it would alone."""
    return {k: v for k, v in os.environ.items() if not k.startswith("GGML_")}


class LlamaCppPython:
    """llama-cpp-python's ``Llama`` with its defaults (the same wheel and threads as Hearth)."""

    def __init__(self, path: Path, threads: int, n_ctx: int) -> None:
        from llama_cpp import Llama

        self.llm = Llama(model_path=str(path), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                         verbose=False)

    def prefill(self, n: int) -> float:
        toks = prompt_ids(lambda t: self.llm.tokenize(t.encode(), add_bos=True), n)
        self.llm.reset()
        t0 = time.perf_counter()
        self.llm.eval(toks)
        return len(toks) / (time.perf_counter() - t0)

    def decode(self) -> float:
        self.llm.reset()
        n, t_first, t_last = 0, 0.0, 0.0
        for _ in self.llm.generate(self.llm.tokenize(SHORT.encode()), top_k=1, temp=0.0, repeat_penalty=1.0):
            n += 1
            t_last = time.perf_counter()
            if n == 1:
                t_first = t_last
            if n == N_GEN + 1:
                break
        return N_GEN / (t_last - t_first)


class HearthSide:
    """Hearth in one exactness profile, through Engine.complete (no chat template), cache off: the
    figures its own stats report."""

    def __init__(self, path: Path, threads: int, n_ctx: int, profile: str) -> None:
        from ..config import EngineConfig
        from ..engine import Engine

        self.engine = Engine.open(EngineConfig(path, n_ctx=n_ctx, n_threads=threads, exactness=profile,
                                               cache_budget=0))

    def _final(self, text: str, n: int):
        from ..types import SamplingParams

        self.engine.reset()
        params = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
        return [ev for ev in self.engine.complete(text, params) if ev.kind == "final"][0].stats

    def prefill(self, n: int) -> float:
        b = self.engine.backend
        ids = backend_prompt_ids(b, n)
        s = self._final(b"".join(b.token_bytes(t) for t in ids).decode("utf-8", "ignore"), 1)
        return s.prompt_tokens / (s.prefill_ms / 1e3)

    def decode(self) -> float:
        return self._final(SHORT, N_GEN + 1).decode_tok_s


class BackendLoop:
    """Hearth's llama.cpp backend in the default profile, driven by the barest loop Python can run:
    the prompt in one ``forward``, then ``forward`` of one token and an argmax, nothing else. Between
    llama-bench and Hearth it tells the wheel's cost (the same llama.cpp, built as a shared, Vulkan-
    capable library) from the cost of Hearth's step (sampler, detokenizer, events, stop rules)."""

    def __init__(self, path: Path, threads: int, n_ctx: int) -> None:
        from ..backends.llama.backend import LlamaCppBackend

        self.b = LlamaCppBackend(path, n_ctx=n_ctx, n_threads=threads, exactness=DEFAULT_EXACTNESS)
        self.short = self.b.tokenize(SHORT, add_bos=self.b.add_bos)

    def prefill(self, n: int) -> float:
        b = self.b
        ids = backend_prompt_ids(b, n)
        ids = [*b.tokenize("", add_bos=True), *ids] if b.add_bos else ids
        b.truncate(0)
        t0 = time.perf_counter()
        b.forward(ids)
        return len(ids) / (time.perf_counter() - t0)

    def decode(self) -> float:
        import numpy as np

        b = self.b
        b.truncate(0)
        tok = int(np.argmax(b.forward(self.short)))
        t0 = time.perf_counter()
        for _ in range(N_GEN):
            tok = int(np.argmax(b.forward((tok,))))
        return N_GEN / (time.perf_counter() - t0)


SIDES = ("llama-cpp-python", "backend-loop", *(f"hearth-{p}" for p in EXACTNESS))


def worker(side: str, path: str, threads: int) -> None:
    """One side in a process of its own (``python -m engine.bench.speed SIDE PATH THREADS``), so
    that ggml's once-a-process switches are each side's own: it answers ``pp N`` and ``tg`` with
    tokens/s, a line each, until its input ends."""
    if side not in SIDES:
        raise SystemExit(f"bench speed: unknown side {side!r}; one of {', '.join(SIDES)}")
    s: LlamaCppPython | BackendLoop | HearthSide = \
        LlamaCppPython(Path(path), threads, 4096) if side == "llama-cpp-python" else \
        BackendLoop(Path(path), threads, 4096) if side == "backend-loop" else \
        HearthSide(Path(path), threads, 4096, side.removeprefix("hearth-"))
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = line.split()
        print(round(s.prefill(int(cmd[1])) if cmd[0] == "pp" else s.decode(), 3), flush=True)


class Side:
    """A side's worker process (``python -m MODULE SIDE PATH THREADS EXTRA...``, answering ``pp N`` and ``tg``)."""

    def __init__(self, side: str, path: Path, threads: int, module: str = "engine.bench.speed",
                 extra: tuple[str, ...] = (), env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", module, side, str(path), str(threads), *extra],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env or clean_env(),
                                     cwd=Path(__file__).resolve().parents[2])
        if self._read() != "ready":
            raise RuntimeError(f"bench speed: the {side} side did not start")

    def _read(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if not line:
            raise RuntimeError(f"bench speed: a side's worker ended (exit {self.proc.wait()})")
        return line

    def ask(self, cmd: str) -> float:
        assert self.proc.stdin is not None
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        return float(self._read())

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def _median(xs: list[float]) -> float:
    return round(statistics.median(xs), 2) if xs else 0.0


def speed_sides(which: str | None, loop: bool = False) -> tuple[str, ...]:
    """The sides a run measures: ``which`` (comma-separated, of SIDES) or Hearth in each profile and
    llama-cpp-python's ``Llama``; ``loop`` adds the bare backend loop. An unknown name stops the run."""
    names = [w.strip() for w in which.split(",") if w.strip()] if which else \
        [*(f"hearth-{p}" for p in EXACTNESS), "llama-cpp-python"]
    unknown = [n for n in names if n not in SIDES]
    if unknown or not names:
        raise SystemExit(f"bench speed: unknown side {unknown[0]!r}; one of {', '.join(SIDES)}" if unknown else
                         f"bench speed: no side named; one or more of {', '.join(SIDES)}")
    return tuple(dict.fromkeys([*names, *(["backend-loop"] if loop else [])]))


def measure_model(tools: Path, label: str, path: Path, threads: int, n_prompt: int, rounds: int,
                  sides: tuple[str, ...], control: bool = False) -> dict[str, Any]:
    """Every side and llama-bench, one test at a time (pp512, pp``n_prompt``, tg128): within a
    round each test runs on every side back to back, so each side's figure has the reference's
    from seconds before or after it, and its ratio is the median of those pairs. ``control``: llama-bench
    runs twice a round, at both ends of it: the second against the first is the run's noise floor (a
    ratio of 1.0 by construction, measured), and each side's reference is the mean of the two
    (``bracket``). The default profile's ratios are read against the issue's bars."""
    # The default profile runs right next to the reference; llama-cpp-python's Llama furthest from it.
    names = sorted(sides, key=lambda s: (s != f"hearth-{DEFAULT_EXACTNESS}", s == "llama-cpp-python"))
    workers: dict[str, Side] = {}
    try:
        for name in names:
            workers[name] = Side(name, path, threads)
        tests = tuple(dict.fromkeys((f"pp{PP}", f"pp{n_prompt}", f"tg{N_GEN}")))
        refs = ["llama-bench", *([CONTROL] if control else [])]
        got: dict[str, dict[str, list[float]]] = {name: {t: [] for t in tests} for name in [*refs, *names]}

        def one(name: str, test: str) -> float:
            if name in refs:
                if test.startswith("tg"):
                    return run_llama_bench(tools, path, threads, 0)[test]
                return run_llama_bench(tools, path, threads, 0, n_gen=0, prompts=(int(test[2:]),))[test]
            return workers[name].ask("tg" if test.startswith("tg") else f"pp {test[2:]}")

        # The control runs at the other end of the round: the sides run between the two references.
        everyone = [refs[0], *names, *refs[1:]]
        for test in tests:  # warm-up: weights paged in, buffers made
            for name in everyone:
                one(name, test)
        for r in range(rounds):
            for test in tests:
                for name in run_order(everyone, r):
                    got[name][test].append(one(name, test))
    finally:
        for w in workers.values():
            w.close()
    ref = got["llama-bench"]
    # With the control every side ran between llama-bench's two runs of its round: its reference is both.
    sides_ref = {t: bracket(ref[t], got[CONTROL][t]) for t in tests} if control else ref
    out: dict[str, Any] = {"model": label, "file": path.name, "reference": "llama-bench, " + (
                               "the mean of its two runs around each side's" if control else "its run in each round"),
                           "llama_bench_tok_s": {t: _median(v) for t, v in ref.items()}, "sides": {},
                           "llama_bench_rounds": {t: [round(x, 2) for x in v] for t, v in ref.items()}}
    for name in [*names, *refs[1:]]:
        pairs = {t: paired(got[name][t], (ref if name == CONTROL else sides_ref)[t]) for t in tests}
        row: dict[str, Any] = {"tok_s": {t: _median(v) for t, v in got[name].items()},
                               **columns(pairs, "vs_llama_bench"),
                               "rounds": {t: [round(x, 2) for x in v] for t, v in got[name].items()}}
        if name == f"hearth-{DEFAULT_EXACTNESS}":
            row["bars"] = {t: verdict(p["ci"][0], p["ci"][1], bar(t), p["coverage"]) for t, p in pairs.items()}
        out["sides"][name] = row
    return out


def bar(test: str) -> float:
    """#42's bar for the default profile: at least llama-bench's prefill, 0.97 of its decode (a
    Python step loop pays a little a token)."""
    return DECODE_BAR if test.startswith("tg") else PREFILL_BAR


def switch_rows(tools: Path, path: Path, threads: int, n_prompt: int, tinyblas: bool) -> dict[str, Any]:
    """What each of llama.cpp's switches buys, on llama-bench itself (one repetition each)."""
    base = run_llama_bench(tools, path, threads, n_prompt)
    tiled_off = {"GGML_CPU_TILED_MM": "0"}
    rows = {"defaults": base,
            "repack off": run_llama_bench(tools, path, threads, n_prompt, ("--repack", "0")),
            "tiled K-quant matmul off": run_llama_bench(tools, path, threads, n_prompt, env=tiled_off),
            "repack off, tiled off": run_llama_bench(tools, path, threads, n_prompt, ("--repack", "0"), tiled_off),
            "flash attention off": run_llama_bench(tools, path, threads, n_prompt, ("-fa", "off")),
            "flash attention on": run_llama_bench(tools, path, threads, n_prompt, ("-fa", "on")),
            "exact kernels (repack, tiled, flash attention off)":
                run_llama_bench(tools, path, threads, n_prompt, ("--repack", "0", "-fa", "off"), tiled_off),
            "ubatch 256": run_llama_bench(tools, path, threads, n_prompt, ("-ub", "256")),
            "ubatch 1024": run_llama_bench(tools, path, threads, n_prompt, ("-ub", "1024", "-b", "2048"))}
    if tinyblas:
        no_tinyblas = ensure_tools(("-DGGML_LLAMAFILE=OFF",))
        rows["tinyBLAS off (a build without it)"] = run_llama_bench(no_tinyblas, path, threads, n_prompt)
    return {k: {m: round(v, 2) for m, v in r.items()} for k, r in rows.items()}


def window_run(tools: Path, path: Path, threads: int, rounds: int, tokens: int = N_GEN) -> dict[str, Any]:
    """The window delivers the engine's speed, and the engine llama.cpp's, in one run: each round
    runs llama-bench's tg``tokens`` and then ``python -m app --bench-stream`` on the same file (the
    window against Engine.stream on one loaded engine, the app's own threads, the default profile)."""
    ref: list[float] = []
    streams: list[dict[str, Any]] = []
    for _ in range(rounds):
        ref.append(run_llama_bench(tools, path, threads, 0, n_gen=tokens)[f"tg{tokens}"])
        p = subprocess.run([sys.executable, "-m", "app", "--bench-stream", "--model", str(path), "--tokens",
                            str(tokens), "--rounds", "1"], capture_output=True, text=True, env=clean_env(),
                           cwd=Path(__file__).resolve().parents[2])
        streams.append(json.loads((p.stdout.strip().splitlines() or ["{}"])[-1] or "{}"))
    problems = [x for s in streams for x in (s.get("problems") or ([] if s.get("ok") else ["no result"]))]
    if problems:
        return {"ok": False, "problems": problems}
    window, engine = [s["window_tok_s"] for s in streams], [s["engine_tok_s"] for s in streams]
    by_window, by_engine = paired(window, engine), paired(engine, ref)
    return {"ok": True, "profile": streams[0].get("profile"), "threads": streams[0]["threads"], "tokens": tokens,
            "window_tok_s": _median(window), "engine_tok_s": _median(engine), "llama_bench_tok_s": _median(ref),
            "window_vs_engine": by_window["median"], "engine_vs_llama_bench": by_engine["median"],
            "window_vs_engine_range": [by_window["min"], by_window["max"]],
            "engine_vs_llama_bench_range": [by_engine["min"], by_engine["max"]],
            "window_vs_engine_ci": by_window["ci"], "engine_vs_llama_bench_ci": by_engine["ci"],
            "ci_coverage": by_engine["coverage"],
            "rounds": {"window": window, "engine": engine, "llama_bench": [round(x, 2) for x in ref]}}


def bench_speed(a: argparse.Namespace) -> dict[str, Any]:
    from ..backends.llama.backend import default_threads

    tools = ensure_tools()
    threads = a.threads or default_threads()
    n_prompt = getattr(a, "prompt_tokens", None) or 957
    rounds = a.rounds or 3
    models = speed_models(tools, getattr(a, "models", None) or "bundled,q4_k_m,q4_0,q8_0")
    out: dict[str, Any] = {"threads": threads, "rounds": rounds, "prompt_tokens": n_prompt, "tools": str(tools)}
    if getattr(a, "window", False):  # the window's run instead of the sides'
        out["window"] = {label: window_run(tools, path, threads, rounds) for label, path in models}
        return out
    sides = speed_sides(getattr(a, "sides", None), getattr(a, "loop", False))
    out["models"] = [measure_model(tools, label, path, threads, n_prompt, rounds, sides, getattr(a, "control", False))
                     for label, path in models]
    which = getattr(a, "switches", None)
    if which:
        out["switches"] = {label: switch_rows(tools, path, threads, n_prompt, which == "tinyblas")
                           for label, path in models}
    return out


if __name__ == "__main__":
    worker(sys.argv[1], sys.argv[2], int(sys.argv[3]))
