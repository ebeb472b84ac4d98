"""``bench serve``'s two rows on Hearth alone, through ``engine serve`` and the official client.

- **hol** (head-of-line): a short request arriving while another request's 2,500-token prompt is
  being read. Each round measures, on one server (``--parallel 2``): the short request alone (its
  TTFT), the long prompt alone (its TTFT over its chunks, ``PREFILL_CHUNK`` tokens each, is one
  chunk's time in this run), and the two together: the long one sent, the short one sent
  ``ARRIVE_AT`` of the long one's read later, its TTFT. The bar: within 2x of its own TTFT alone plus
  one chunk (the engine core starts a newcomer's prompt at the next step, and a step reads at most
  one chunk of prompt). The chunk is the mean over the whole prompt's chunks; the chunk in flight
  when the short one arrives, early in the read, attends over fewer tokens and is a little cheaper.
- **spec** (speculation inside the batch): the rewrite set of ``bench speculative``, four requests
  at once (``--parallel 4``), on a server with speculation as shipped (``--draft auto``, ``engine
  serve``'s default: the n-gram lookup asked every round and verified where its expected tokens pay
  for the rows, a draft model where one is found that pays) against one without (``--draft none``),
  the order turned each round. The
  figure is a request's decode speed (tokens after the first over the time after the first), the
  mean of the four; the bar: at least 1.3x plain. Replies are not cut at the end of the answer
  (speculation only pays on what the model writes), and whether both sides wrote the same text is
  reported (the fast profile's kernels may round a near tie the other way), with the drafts the
  speculating server verified and accepted (its ``/metrics``, warm-up included). Its **limit** is
  measured in the same run, before the servers start (``spec_limit``): what the four requests would
  gain if every draft were accepted, from the step times of this machine. On a CPU that is bound by
  compute, not by reading the weights, a verified row costs nearly what a step does, and the limit
  can sit under the bar: then the bar cannot be met here, whatever the drafts. A second limit reads
  the text the speculating server's replies wrote (``text_limit``, copy_limit.py): what the n-gram
  lookup could give on it with a gate that knows the future, at this machine's step times. A reply
  copies its prompt only in places, and what it does not copy no draft can bring.
Every prompt of the hol row opens with words of its own, so no server reads it from an earlier one's cache.
"""
from __future__ import annotations

import json
import math
import statistics
import threading
import time
from importlib.resources import files
from pathlib import Path
from typing import Any, Callable

from ..kv.reuse import PREFILL_CHUNK
from .pairing import at_most, paired, run_order, verdict
from .serve_client import StreamedReply, make_client, stream_one, wave
from .serve_sides import Server, Setup, counters, per_sequence, say, start_hearth

LONG_TOKENS = 2500
ARRIVE_AT = 0.3      # the short request arrives this far into the long prompt's read (of its TTFT alone)
HOL_BAR = 2.0        # the short request's TTFT over (alone + one chunk), at most
SPEC_BAR = 1.3       # a batched request's decode speed with speculation (auto) over without, at least
SPEC_STREAMS = 4
LIMIT_KS = (2, 4, 8, 16)  # draft lengths the limit is measured at (every sequence drafting that many a round)
LIMIT_REPS = 7           # steps timed per shape (the median; 3 with --quick)
SHORT = "Question {tag}: what is the capital of France? Answer in one word."


def question(tag: str) -> list[dict]:
    return [{"role": "user", "content": SHORT.format(tag=tag)}]


def long_prompt(tag: str, chars: int) -> list[dict]:
    """The project's documentation, ``chars`` of it, to be summarized: a long prompt read in chunks."""
    from .documents import manual_text

    return [{"role": "user", "content": f"Document {tag}. Summarize it in one line.\n\n{manual_text()[:chars]}"}]


def text_tokenizer(path: Path) -> Callable[[str], list[int]]:
    """Plain text to the model's token ids, by its own tokenizer (llama.cpp, the vocabulary alone; no BOS,
    no special tokens)."""
    from llama_cpp import Llama

    vocab = Llama(model_path=str(path), vocab_only=True, verbose=False)
    return lambda t: list(vocab.tokenize(t.encode(), add_bos=False, special=False))


def calibrate(client, model: str, path: Path, want: int) -> int:
    """How many characters of the documentation make the long prompt ``want`` tokens: the chat template's
    share measured on the server (one short request, which also warms it up), the text's counted by the
    model's own tokenizer (``text_tokenizer``); the rounds report the length it made."""
    from .documents import manual_text

    base = stream_one(client, model, long_prompt("calibration", 0), 1, ignore_eos=True).prompt_tokens
    tok = text_tokenizer(path)
    text = manual_text()
    lo, hi = 0, min(len(text), 16 * want)
    while lo < hi:  # the longest cut whose tokens fit
        mid = (lo + hi + 1) // 2
        if len(tok(text[:mid])) <= want - base:
            lo = mid
        else:
            hi = mid - 1
    return lo


def hol_round(client, model: str, r: int, chars: int) -> dict[str, float]:
    """One round: the short request alone, the long prompt alone, then the short one during the long one's read."""
    alone = stream_one(client, model, question(f"{r}a"), 8, ignore_eos=True)
    long_alone = stream_one(client, model, long_prompt(f"{r}a", chars), 1, ignore_eos=True)
    chunk_s = long_alone.ttft_s / math.ceil(long_alone.prompt_tokens / PREFILL_CHUNK)
    background: list[StreamedReply] = []
    t = threading.Thread(target=lambda: background.append(
        stream_one(client, model, long_prompt(f"{r}b", chars), 1, ignore_eos=True)))
    t.start()
    time.sleep(ARRIVE_AT * long_alone.ttft_s)
    busy = stream_one(client, model, question(f"{r}b"), 8, ignore_eos=True)
    t.join()
    if not background:
        raise RuntimeError("the long request of the head-of-line round failed")
    return {"alone_ms": alone.ttft_s * 1e3, "chunk_ms": chunk_s * 1e3, "busy_ms": busy.ttft_s * 1e3,
            "long_ttft_ms": long_alone.ttft_s * 1e3, "long_prompt_tokens": long_alone.prompt_tokens,
            "long_busy_ttft_ms": background[0].ttft_s * 1e3}


def hol_row(s: Setup) -> dict[str, Any]:
    """The head-of-line row: the short request's TTFT during a long prompt's read, against alone + one chunk."""
    rounds = s.rounds
    server = start_hearth("hearth-hol", s.model, s.workdir, parallel=2, n_ctx_seq=per_sequence(LONG_TOKENS + 512),
                          threads=s.threads, exactness=s.exactness)
    try:
        client = make_client(server.url)
        chars = calibrate(client, server.model_id, s.model, LONG_TOKENS)
        stream_one(client, server.model_id, question("warm"), 8, ignore_eos=True)
        got = [hol_round(client, server.model_id, r, chars) for r in range(rounds)]
    finally:
        server.close()
    limit = [g["alone_ms"] + g["chunk_ms"] for g in got]
    ratio = paired([g["busy_ms"] for g in got], limit)
    med = {k: round(statistics.median(g[k] for g in got), 1) for k in got[0]}
    tokens = int(med.pop("long_prompt_tokens"))
    out: dict[str, Any] = {
        "long_prompt_tokens": tokens, "chunk_tokens": PREFILL_CHUNK, "arrives_at": ARRIVE_AT, **med,
        "busy_vs_alone_plus_chunk": ratio, "bar": f"<= {HOL_BAR}x (alone + one chunk)",
        "verdict": at_most(ratio["ci"][0], ratio["ci"][1], HOL_BAR, ratio["coverage"]), "rounds": got}
    out["line"] = (f"head-of-line: short TTFT {med['busy_ms']:.0f} ms during a {tokens}-token read, alone "
                   f"{med['alone_ms']:.0f} ms + one chunk {med['chunk_ms']:.0f} ms: {ratio['median']:.2f}x "
                   f"[{ratio['ci'][0]:.2f}, {ratio['ci'][1]:.2f}] (bar <= {HOL_BAR}x) {out['verdict']}")
    say(out["line"])
    return out


def rewrite_prompt() -> str:
    """The rewrite set of ``bench speculative`` (data/spec_prompts.json): its first prompt."""
    sets = json.loads(files("engine").joinpath("data/spec_prompts.json").read_text())
    return str(sets["rewrite"][0])


def spec_prompts(text: str, tag: str) -> list[str]:
    """The four requests' prompts: the rewrite prompt, each with its own last words (the figure is decode
    speed: the file they share comes from the prefix cache on both sides, read by the warm-up wave)."""
    return [f"{text}\n\n(Task {tag}-{i}.)" for i in range(SPEC_STREAMS)]


def spec_wave(server: Server, client, text: str, tag: str, tokens: int) -> tuple[list[StreamedReply], float]:
    """The four requests at once."""
    prompts = [[{"role": "user", "content": p}] for p in spec_prompts(text, tag)]
    return wave(client, server.model_id, prompts, SPEC_STREAMS, tokens, ignore_eos=False)


def text_limit(s: Setup, prompts: list[str], replies: list[str], step_ms: dict[int, float]) -> dict[str, Any]:
    """``copy_limit`` on what the speculating server's replies wrote: the most the n-gram lookup could
    give on that text with this machine's step times (the prompts and replies tokenized by the model's
    own vocabulary; the chat template's few tokens left out, which the lookup does not copy from), over
    every reply and each round's (``rounds``, beside the round's figure)."""
    from .copy_limit import copy_limit

    tok = text_tokenizer(s.model)
    pairs = [(tok(p), tok(r)) for p, r in zip(prompts, replies)]
    out = copy_limit(pairs, step_ms, max(LIMIT_KS))
    out["rounds"] = [copy_limit(pairs[i:i + SPEC_STREAMS], step_ms, max(LIMIT_KS))["limit"]
                     for i in range(0, len(pairs), SPEC_STREAMS)]  # a wave's four replies each
    return out


def mean_decode(replies: list[StreamedReply]) -> float:
    speeds = [r.decode_tok_s for r in replies if r.decode_tok_s]
    return statistics.fmean(speeds) if speeds else 0.0


def spec_limit(s: Setup, text: str) -> dict[str, Any]:
    """The most speculation can give the spec row on this machine: each of the ``SPEC_STREAMS``
    sequences drafting k tokens a round, every draft accepted, so a round yields 1 + k tokens each for
    one step of ``SPEC_STREAMS`` x (1 + k) rows, against one token each for a plain step of
    ``SPEC_STREAMS`` rows: (1 + k) x plain step / that step, at the best k of ``LIMIT_KS``. Timed
    in-process on the same model, threads and profile, every sequence holding the rewrite prompt, as
    the row's requests do (the median of ``LIMIT_REPS`` steps per shape)."""
    from ..config import EngineConfig
    from ..engine import Engine
    from ..types import WANT_ALL, WANT_LAST

    e = Engine.open(EngineConfig(s.model, n_ctx=per_sequence(2048 + s.spec_tokens), n_threads=s.threads,
                                 exactness=s.exactness, cache_budget=0, draft="none"))
    try:
        e.set_parallel(SPEC_STREAMS, window=False)
        prompt = e.prompt_tokens([{"role": "user", "content": text}])
        pool = e.kv.pool

        def steps() -> dict[int, float]:  # on the engine core's thread, where the servers compute too
            pool.batch([(0, prompt, WANT_LAST)])
            for seq in range(1, SPEC_STREAMS):
                pool.seq_copy(0, seq, len(prompt))
            out = {}
            for k in (0, *LIMIT_KS):
                rows = [(seq, prompt[-1 - k:], WANT_ALL if k else WANT_LAST) for seq in range(SPEC_STREAMS)]
                times = []
                for _ in range(3 if s.quick else LIMIT_REPS):
                    for seq in range(SPEC_STREAMS):
                        pool.seq_truncate(seq, len(prompt) - 1 - k)
                    t0 = time.perf_counter()
                    pool.batch(rows)
                    times.append(time.perf_counter() - t0)
                out[k] = statistics.median(times)
            return out

        step_s = e.core.call(steps)
    finally:
        e.close()
    by_k = {k: (1 + k) * step_s[0] / step_s[k] for k in LIMIT_KS}
    best = max(by_k, key=lambda k: by_k[k])
    return {"limit": round(by_k[best], 3), "at_k": best, "by_k": {k: round(v, 3) for k, v in by_k.items()},
            "step_ms": {k: round(v * 1e3, 1) for k, v in step_s.items()}, "prompt_tokens": len(prompt)}


def spec_row(s: Setup) -> dict[str, Any]:
    """Speculation inside the batch: four rewrite requests at once, speculation as shipped against none."""
    text = rewrite_prompt()
    tokens = s.spec_tokens
    limit = spec_limit(s, text)  # before any server runs: nothing else computes meanwhile
    names = ("plain", "auto")
    servers: dict[str, Server] = {}
    try:
        for name in names:
            servers[name] = start_hearth(f"hearth-{name}", s.model, s.workdir, parallel=SPEC_STREAMS,
                                         n_ctx_seq=per_sequence(2048 + tokens), threads=s.threads,
                                         exactness=s.exactness, draft="none" if name == "plain" else "auto")
        clients = {k: make_client(v.url) for k, v in servers.items()}
        for k, v in servers.items():  # first-use costs out of the rounds, and the file they share read once:
            # otherwise the first round's replies decode beside three 1,800-token reads, which swamps the figure
            spec_wave(v, clients[k], text, "warm", 8)
        speed: dict[str, list[float]] = {k: [] for k in names}
        tok_s: dict[str, list[float]] = {k: [] for k in names}
        texts: dict[str, list[str]] = {k: [] for k in names}
        asked: list[str] = []
        n_tokens: dict[str, list[int]] = {k: [] for k in names}
        for r in range(s.rounds):
            for k in run_order(list(names), r):
                replies, wall = spec_wave(servers[k], clients[k], text, str(r), tokens)
                speed[k].append(mean_decode(replies))
                tok_s[k].append(sum(x.tokens for x in replies) / wall)
                texts[k] += [x.text for x in replies]
                n_tokens[k] += [x.tokens for x in replies]
            asked += spec_prompts(text, str(r))
        drafts = counters(servers["auto"])
    finally:
        for v in servers.values():
            v.close()
    ratio = paired(speed["auto"], speed["plain"])
    on_text = text_limit(s, asked, texts["auto"], limit["step_ms"])
    out: dict[str, Any] = {
        "streams": SPEC_STREAMS, "max_tokens": tokens,
        "decode_tok_s": {k: round(statistics.median(v), 2) for k, v in speed.items()},
        "decode_tok_s_rounds": {k: [round(x, 2) for x in v] for k, v in speed.items()},
        "aggregate_tok_s": {k: round(statistics.median(v), 2) for k, v in tok_s.items()},
        "tokens_per_reply": {k: sorted(v)[len(v) // 2] for k, v in n_tokens.items()},
        "same_text": sum(a == b for a, b in zip(texts["plain"], texts["auto"])) / max(1, len(texts["plain"])),
        "auto_vs_plain": ratio, "aggregate_auto_vs_plain": paired(tok_s["auto"], tok_s["plain"]),
        "drafts": drafts, "bar": f">= {SPEC_BAR}x", "limit": limit, "text_limit": on_text,
        "verdict": verdict(ratio["ci"][0], ratio["ci"][1], SPEC_BAR, ratio["coverage"])}
    beyond = (" (the bar is over this machine's limit)" if limit["limit"] < SPEC_BAR else
              " (the bar is over what this text allows here)" if on_text["limit"] < SPEC_BAR else "")
    out["line"] = (f"speculation in a batch of {SPEC_STREAMS}: decode {out['decode_tok_s']['auto']} tok/s with "
                   f"speculation (auto), {out['decode_tok_s']['plain']} without: {ratio['median']:.2f}x "
                   f"[{ratio['ci'][0]:.2f}, {ratio['ci'][1]:.2f}] (bar >= {SPEC_BAR}x) {out['verdict']}; limit "
                   f"{limit['limit']:.2f}x, every draft accepted at k={limit['at_k']}; on the text the replies wrote "
                   f"{on_text['limit']:.2f}x ({on_text['copied']:.0%} of it copied, a gate that knows the future)"
                   f"{beyond}")
    say(out["line"])
    return out
