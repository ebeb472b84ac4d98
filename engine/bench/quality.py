"""``python -m engine bench quality``: what a quantization costs in output quality.

For one model and one or more quantizations it reports:
- perplexity on a fixed text shipped with Hearth (engine/data/quality_text.txt);
- greedy agreement with the unquantized model on a fixed prompt set
  (engine/data/quality_prompts.json): the fraction of identical tokens over
  the first 64 generated, plus the mean length of the identical prefix.

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
from ..tuning.quality import GEN_TOKENS, agreement, greedy_replies, perplexity, quality_prompts, quality_text

def _measure(engine: Any, label: str, text: str, prompts: list[str], ref_tokens) -> tuple[dict, list]:
    t0 = time.perf_counter()
    ppl, n_text = perplexity(engine.backend, text)
    tokens, tok_s = greedy_replies(engine, prompts, GEN_TOKENS)
    row = {"quant": label, "backend": engine.backend.name, "perplexity": round(ppl, 4),
           "text_tokens": n_text}
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
        eng = Engine.open(EngineConfig(ref_model.path, backend="llama_cpp", **kw))
        row, _ = _measure(eng, f"gguf {eng.backend.describe().quant} (llama_cpp)", text, prompts, ref_tokens)
        rows.append(row)
        eng.close()
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
    return {
        "model": ref_model.label,
        "backend": backend,
        "reference": f"transformers, unquantized ({ref_dtype})",
        "text": "engine/data/quality_text.txt",
        "prompts": len(prompts),
        "gen_tokens": GEN_TOKENS,
        "rows": rows,
    }
