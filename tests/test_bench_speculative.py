"""bench speculative's report and prompt sets, without running the models:
auto against the best fixed mode of the same run, and the prompts it measures."""
from __future__ import annotations

import json
from importlib.resources import files

from engine.bench.speculative import _gpu_speedup, _messages, _Row, _set_report
from engine.speculative.controller import SpecController


def _row(speedups, tokens_by_mode, drafted=0, accepted=0):
    r = _Row()
    for x in speedups:
        r.speedup.append(x)
        r.tok_s.append(20 * x)
        r.spec.append({"drafted": drafted, "accepted": accepted, "target_passes": 10, "rounds": 5,
                       "tokens_by_mode": tokens_by_mode, "notes": []})
    return r


def test_auto_is_reported_against_the_best_fixed_mode_of_the_run():
    ctls = {k: SpecController([k if k != "auto" else "plain"]) for k in ("model", "ngram", "auto")}
    rows = {"model": _row([0.7, 0.6, 0.8], {"model": 64}),
            "ngram": _row([1.30, 1.25, 1.40], {"ngram": 64}, drafted=60, accepted=50),
            "auto": _row([1.26, 1.20, 1.30], {"ngram": 60, "plain": 4})}
    rep = _set_report(rows, ctls, [20.0, 21.0, 19.0])
    assert rep["best_fixed"] == "ngram" and rep["ngram"]["speedup"] == 1.30  # medians of per-round ratios
    assert rep["auto_vs_best"] == round(1.26 / 1.30, 3) and rep["auto_regret"] == round(1 - 1.26 / 1.30, 3)
    assert rep["ngram"]["acceptance_rate"] == round(50 / 60, 4) and rep["auto"]["tokens"] == 64
    # Where every draft loses, the best fixed mode is plain decoding itself.
    rows = {"ngram": _row([0.9], {"ngram": 8}), "auto": _row([0.98], {"plain": 8})}
    rep = _set_report(rows, {k: SpecController([k if k != "auto" else "plain"]) for k in rows}, [20.0])
    assert rep["best_fixed"] == "plain" and rep["auto_vs_best"] == 0.98


def test_the_prompt_sets_include_a_whole_file_rewrite_and_a_long_conversation():
    sets = json.loads(files("engine").joinpath("data/spec_prompts.json").read_text())
    assert {"code", "chat", "edit", "rewrite", "long_chat"} <= set(sets)
    (rewrite,) = sets["rewrite"]
    code = rewrite.split("```python\n", 1)[1].split("```", 1)[0]
    assert len(code.splitlines()) >= 150 and "whole updated file" in rewrite
    compile(code, "rewrite.py", "exec")  # a real Python file
    for name in ("low_stock", "Order.total", "Inventory.ship"):
        assert name in rewrite.split("```")[0]  # the three small edits are asked for
    (chat,) = sets["long_chat"]
    msgs = _messages(chat)
    assert len(msgs) >= 7 and msgs[-1].role == "user"
    assert [m.role for m in msgs[:-1]] == ["user", "assistant"] * ((len(msgs) - 1) // 2)
    assert [m.content for m in _messages("hi")] == ["hi"]


def test_the_gpu_cost_model_charges_model_drafts_and_not_ngram_drafts():
    # 10 rounds: 4 n-gram (free drafts), 4 model (3 drafts each), 2 plain; 30 tokens.
    spec = {"tokens_by_mode": {"ngram": 14, "model": 14, "plain": 2}, "rounds_by_mode": {"ngram": 4, "model": 4,
            "plain": 2}, "drafted_by_mode": {"ngram": 16, "model": 12}}
    assert _gpu_speedup([spec], 0.5) == round(30 / (10 + 0.5 * 12), 3)
    assert _gpu_speedup([], 0.5) == 0.0
