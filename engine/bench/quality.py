"""``python -m engine bench quality``: what a quantization costs in output quality.

For one model and one or more quantizations it reports:
- perplexity on a fixed text shipped with Hearth (engine/data/quality_text.txt);
- greedy agreement with the unquantized model on a fixed prompt set
  (engine/data/quality_prompts.json): the fraction of identical tokens over
  the first 64 generated, plus the mean length of the identical prefix.

For a GGUF file on llama.cpp it runs the file in each exactness profile and adds
``profiles``: what the fast kernels change against the exact ones (greedy
agreement, the KL divergence of the next-token distributions over the text, the
share of positions whose top token changes, and the perplexity ratio).

The reference is the unquantized model on the transformers backend. For a
GGUF file that is its dequantized float32 copy, so ``--backend llama_cpp``
measures the file as llama.cpp runs it against the weights it approximates,
and ``--backend hf --quant int8 --quant int4`` measures bitsandbytes on top.
"""
from __future__ import annotations

import argparse
import time
from typing import Any


from ..errors import HearthError
from ..config import EXACTNESS
from ..tuning.quality import (GEN_TOKENS, agreement, greedy_replies, kl_divergence, perplexity_of,
                              quality_prompts, quality_text, text_logits)


def _measure(engine: Any, label: str, text: str, prompts: list[str], ref_tokens,
             keep: dict | None = None) -> tuple[dict, list]:
    t0 = time.perf_counter()
    ids, logits = text_logits(engine.backend, text)
    if keep is not None:
        keep.update(ids=ids, logits=logits)
    tokens, tok_s = greedy_replies(engine, prompts, GEN_TOKENS)
    row = {"quant": label, "backend": engine.backend.name, "perplexity": round(perplexity_of(ids, logits), 4),
           "text_tokens": len(ids) - 1}
    row.update(agreement(ref_tokens if ref_tokens is not None else tokens, tokens, GEN_TOKENS))
    mem = engine.backend.memory_report()
    row["weight_bytes"] = int(mem.get("weights", mem.get("model_size", 0)))
    row["decode_tok_s"] = round(tok_s, 2)
    row["seconds"] = round(time.perf_counter() - t0, 1)
    return row, tokens


def bench_quality(a: argparse.Namespace) -> dict:
    from ..engine import Engine
    from ..config import EngineConfig
    from ..models.catalogue import resolve

    text, prompts = quality_text(), quality_prompts()
    backend = getattr(a, "backend", None) or "hf"
    quants = list(getattr(a, "quant", None) or (["none", "int8", "int4"] if backend == "hf" else []))
    threads = getattr(a, "threads", None)
    ref_model = resolve(a.model)
    if ref_model.kind == "hub":
        from ..models.hub import fetch_ref

        ref_model = fetch_ref(ref_model)
    if backend == "llama_cpp" and ref_model.kind != "gguf":
        raise HearthError("bench quality: --backend llama_cpp needs a GGUF model")
    if backend == "llama_cpp" and quants:
        raise HearthError("bench quality: --quant applies to --backend hf; a GGUF file carries its own "
                          "quantization, which the llama_cpp report measures against its float32 weights")
    n_ctx = 2048
    kw: dict[str, Any] = dict(n_ctx=n_ctx, n_threads=threads, cache_budget=0)

    ref = Engine.open(EngineConfig(ref_model.path, backend="hf", quant="none", **kw))
    ref_dtype = ref.backend.describe().quant  # unquantized: the dtype the weights were loaded in
    ref_row, ref_tokens = _measure(ref, "none", text, prompts, None)
    rows = []
    if backend == "llama_cpp":
        ref_row["quant"] = f"reference: dequantized {ref_dtype} (hf)"
        rows.append(ref_row)
        ref.close()
        seen: dict[str, tuple[dict, list, dict]] = {}
        for profile in EXACTNESS:
            eng = Engine.open(EngineConfig(ref_model.path, backend="llama_cpp", exactness=profile, **kw))
            keep: dict = {}
            row, tokens = _measure(eng, f"gguf {eng.backend.describe().quant} (llama_cpp, {profile})", text,
                                   prompts, ref_tokens, keep)
            eng.close()
            rows.append(row)
            seen[profile] = (row, tokens, keep)
        profiles = profile_drift(seen["exact"], seen["fast"])
    else:
        for q in quants:
            if q == "none":
                rows.append(ref_row)
                continue
            eng = Engine.open(EngineConfig(ref_model.path, backend="hf", quant=q, **kw))
            row, _ = _measure(eng, q, text, prompts, ref_tokens)
            rows.append(row)
            eng.close()
        if "none" not in quants:
            rows.insert(0, ref_row | {"quant": f"reference: none ({ref_dtype})"})
        ref.close()
    out = {
        "model": ref_model.label,
        "backend": backend,
        "reference": f"transformers, unquantized ({ref_dtype})",
        "text": "engine/data/quality_text.txt",
        "prompts": len(prompts),
        "gen_tokens": GEN_TOKENS,
        "rows": rows,
    }
    if backend == "llama_cpp":
        out["profiles"] = profiles
    return out


def profile_drift(exact: tuple[dict, list, dict], fast: tuple[dict, list, dict]) -> dict:
    """What the fast profile changes against the exact one, on the same file and inputs."""
    (erow, etok, ekeep), (frow, ftok, fkeep) = exact, fast
    return {"greedy_vs_exact": agreement(etok, ftok, GEN_TOKENS), **kl_divergence(ekeep["logits"], fkeep["logits"]),
            "perplexity_ratio": round(frow["perplexity"] / erow["perplexity"], 5),
            "decode_speedup": round(frow["decode_tok_s"] / erow["decode_tok_s"], 3) if erow["decode_tok_s"] else None}
