"""``python -m engine bench speculative``: Qwen2.5-Coder 1.5B target with its
0.5B sibling as draft, greedy, plain and speculative runs interleaved in one
process, over the prompt sets in ``data/spec_prompts.json`` (code, chat, edit,
rewrite, long_chat). Each set reports every draft kind's speed against plain
decoding of the same prompt in the same round (medians), and ``auto``'s
against the best fixed mode of the run (``auto_vs_best``, ``auto_regret``)."""
from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import dataclass, field
from importlib.resources import files
from typing import cast

from ..engine import Engine
from ..config import EngineConfig
from ..errors import HearthError
from ..decode.metrics import GenerationStats
from ..models.catalogue import BENCH_DRAFT, BENCH_TARGET, bench_model_path
from ..speculative.controller import SpecController
from ..prompt.messages import Message
from ..types import SamplingParams

KINDS = ("model", "ngram", "hybrid", "auto")
FIXED = ("model", "ngram", "hybrid")  # auto is compared with the best of these and plain


@dataclass
class _Row:
    """One draft kind's runs over a prompt set."""
    speedup: list[float] = field(default_factory=list)  # each run against plain on the same prompt and round
    tok_s: list[float] = field(default_factory=list)
    identical: bool = True
    spec: list[dict] = field(default_factory=list)


def _controller(engine: Engine, kind: str, ratio: float) -> SpecController:
    if kind in ("model", "hybrid"):
        # The efficiency rows: k is chosen with the GPU cost model (one target
        # pass per round plus k draft steps of `ratio` each), the same model
        # predicted_gpu_speedup uses. With the CPU's measured costs the
        # controller would pick k = 1 here, which says nothing about the
        # algorithm; "auto" shows what this CPU does with its own costs.
        # hybrid: every n-gram hit is verified, the model drafts on the misses.
        hybrid = kind == "hybrid"
        return SpecController(["model"], round_cost=lambda k: 1 + k * ratio, free="ngram" if hybrid else None,
                              gated=not hybrid)
    engine.set_speculation(kind, force=kind != "auto")
    if engine.spec_ctl is None:
        raise HearthError(f"speculation {kind!r} did not start")
    return engine.spec_ctl


def _messages(prompt: str | list[dict]) -> list[Message]:
    """A prompt set's entry: one user message, or a whole conversation."""
    if isinstance(prompt, str):
        return [Message("user", prompt)]
    return [Message(m["role"], m["content"]) for m in prompt]


def bench_speculative(a: argparse.Namespace) -> dict:
    target, draft = bench_model_path(BENCH_TARGET), bench_model_path(BENCH_DRAFT)
    if not (target and draft):
        raise HearthError("the benchmark models are missing: run `python -m engine models fetch-bench-pair`")
    sets = json.loads(files("engine").joinpath("data/spec_prompts.json").read_text())
    wanted = [s.strip() for s in (getattr(a, "sets", None) or ",".join(sets)).split(",") if s.strip()]
    kinds = [k.strip() for k in (getattr(a, "rows", None) or ",".join(KINDS)).split(",") if k.strip()]
    for name, known in ((wanted, sets), (kinds, KINDS)):
        bad = [x for x in name if x not in known]
        if bad:
            raise HearthError(f"unknown {', '.join(bad)}; choose from {', '.join(known)}")
    params = SamplingParams(temperature=0.0, max_tokens=a.tokens, top_k=0, top_p=1.0, min_p=0.0)
    eng = Engine.open(EngineConfig(target, n_ctx=4096, n_threads=a.threads, cache_budget=0, draft=draft))
    out: dict = {}
    model_code_stats = None
    try:
        if eng.draft is None:
            raise HearthError("the benchmark draft did not load")
        ratio = eng.draft.backend.describe().weight_bytes / eng.backend.describe().weight_bytes
        for set_name in wanted:
            prompts = sets[set_name]
            # One controller per kind per set: "auto" learns across the set's
            # rounds like it would across one conversation's replies.
            ctls = {k: _controller(eng, k, ratio) for k in kinds}
            rows = {k: _Row() for k in kinds}
            plain_tok_s = []
            for i in range(a.rounds):
                msgs = _messages(prompts[i % len(prompts)])
                order = ["plain", *kinds]
                order = order[i % len(order):] + order[:i % len(order)]  # rotate who goes first
                results = {}
                for kind in order:
                    eng.spec_kind, eng.spec_ctl = (kind, ctls[kind]) if kind != "plain" else ("none", None)
                    # The prompt stays in the KV between the kinds (the prefix cache is
                    # exact): each run pays only its own decoding, as in a conversation.
                    for ev in eng.stream(msgs, params):
                        if ev.kind == "final":
                            results[kind] = ev
                ref = results["plain"]
                plain = cast(GenerationStats, ref.stats).decode_tok_s
                plain_tok_s.append(plain)
                for kind in kinds:
                    ev = results[kind]
                    st = cast(GenerationStats, ev.stats)
                    rows[kind].tok_s.append(st.decode_tok_s)
                    rows[kind].speedup.append(st.decode_tok_s / plain if plain else 0.0)
                    rows[kind].identical &= ev.token_ids == ref.token_ids
                    rows[kind].spec.append(st.spec or {})
            out[set_name] = _set_report(rows, ctls, plain_tok_s, ratio)
            if "model" in rows:
                r = rows["model"]
                if set_name == "code":
                    model_code_stats = (sum(s["drafted"] for s in r.spec), sum(s["accepted"] for s in r.spec),
                                        sum(s["rounds"] for s in r.spec))
    finally:
        eng.close()
    out["predicted_gpu_speedup"] = _predict(model_code_stats, ratio)
    out["draft_target_weight_ratio"] = round(ratio, 4)
    out["tokens_per_run"] = a.tokens
    out["rounds"] = a.rounds
    return out


def _gpu_speedup(specs: list[dict], ratio: float) -> float:
    """The same rounds on a GPU's cost model: each round one target pass, plus
    ``ratio`` of one per model-draft step (an n-gram draft costs nothing)."""
    tokens = sum(sum(s.get("tokens_by_mode", {}).values()) for s in specs)
    cost = sum(sum(s.get("rounds_by_mode", {}).values()) + ratio * s.get("drafted_by_mode", {}).get("model", 0)
               for s in specs)
    return round(tokens / cost, 3) if cost else 0.0


def _set_report(rows: dict[str, _Row], ctls: dict[str, SpecController], plain_tok_s: list[float],
                ratio: float = 0.0) -> dict:
    rep: dict = {}
    for kind, r in rows.items():
        drafted = sum(s["drafted"] for s in r.spec)
        accepted = sum(s["accepted"] for s in r.spec)
        passes = sum(s["target_passes"] for s in r.spec)
        gen = sum(sum(s["tokens_by_mode"].values()) for s in r.spec)
        rep[kind] = {
            "speedup": round(statistics.median(r.speedup), 3),
            "speedups": [round(x, 3) for x in r.speedup],
            "acceptance_rate": round(accepted / drafted, 4) if drafted else 0.0,
            "target_passes_per_token": round(passes / gen, 4) if gen else 0.0,
            "identical": bool(r.identical),
            "tok_s": round(statistics.median(r.tok_s), 2),
            "plain_tok_s": round(statistics.median(plain_tok_s), 2),
            "tokens": round(gen / len(r.spec)),
            "tokens_by_mode": _sum_modes(r.spec),
            "notes": sorted({n for s in r.spec for n in s["notes"]})[:3],
            "k_policy": "gpu cost model" if kind in ("model", "hybrid") else "measured cost",
            "predicted_gpu_speedup": _gpu_speedup(r.spec, ratio),
        }
        ceiling = ctls[kind].ceiling("ngram") if kind == "ngram" else None
        if ceiling:
            # What this CPU allows even if every draft were accepted.
            rep[kind]["ceiling_speedup"] = round(ceiling / statistics.median(plain_tok_s), 3)
    fixed = {k: rep[k]["speedup"] for k in FIXED if k in rep}
    if "auto" in rep:
        best = max([("plain", 1.0), *fixed.items()], key=lambda kv: kv[1])
        rep["best_fixed"] = best[0]
        rep["auto_vs_best"] = round(rep["auto"]["speedup"] / best[1], 3)
        rep["auto_regret"] = round(1 - rep["auto_vs_best"], 3)
    return rep


def _sum_modes(specs: list[dict]) -> dict:
    tot: dict[str, int] = {}
    for s in specs:
        for m, n in s["tokens_by_mode"].items():
            tot[m] = tot.get(m, 0) + n
    return tot


def _predict(stats, ratio: float) -> float:
    """Cost model for a GPU, where decoding is bandwidth-bound: verifying k
    tokens costs one target pass and a draft step costs ``ratio`` of one.
    Tokens per round = mean accepted + 1; cost per round = 1 + k * ratio."""
    if not stats:
        return 0.0
    drafted, accepted, rounds = stats
    if not rounds:
        return 0.0
    k, m = drafted / rounds, accepted / rounds
    return round((m + 1) / (1 + k * ratio), 3)
