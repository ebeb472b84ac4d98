"""``python -m engine doctor``: the diagnosis rules on timelines built for each
case, then a real run on the bundled model built to be prefill-dominated."""
from __future__ import annotations

import json

import pytest

from engine.cli.doctor import Machine, diagnose, render_diagnosis, run_prompts
from engine.decode.metrics import GenerationStats

MB = 1_000_000
# A 100 MB model on a 10 GB/s machine: reading the weights once costs 10 ms.
MACHINE = Machine(model_bytes=100 * MB, bandwidth_bytes_s=10e9, cache_enabled=True, threads=2, label="test")


def reply(*, template=0.5, tokenize=1.0, queue=0.0, prefill=20.0, steps=(12.0,) * 20, sampling=0.02,
          detok=0.01, prompt=100, computed=100, kv_used=150, n_ctx=4096, hits=0, inserts=0,
          evictions=0) -> GenerationStats:
    """A reply whose forward passes take ``steps`` less sampling and detokenizing."""
    step_ms = list(steps)
    n = len(step_ms) + 1
    decode = sum(step_ms) - (sampling + detok) * len(step_ms)
    tl = GenerationStats(timed=True, template_ms=template, tokenize_ms=tokenize, prefill_ms=prefill,
                         prefill_tokens=computed, cached_tokens=prompt - computed, prompt_tokens=prompt,
                         generated_tokens=n, step_ms=step_ms, forward_ms=decode, sampling_ms=sampling * n,
                         detokenize_ms=detok * n, kv_used=kv_used, n_ctx=n_ctx, cache_hits=hits,
                         cache_inserts=inserts, cache_evictions=evictions)
    assert tl.sampling_ms_per_token == pytest.approx(sampling)
    tl.e2e_ms = sum(tl.parts().values())
    if queue:
        tl.record_queue_wait(queue)
    return tl


def stages(d) -> list[str]:
    return [f.stage for f in d.findings if f.suggestion]


def test_findings_follow_the_checklist_order():
    d = diagnose([reply()], MACHINE)
    assert [f.stage for f in d.findings] == ["preprocessing", "queue", "prefill", "decode", "kv", "sampling"]
    assert json.loads(json.dumps(d.to_dict()))["suggestion"] == d.suggestion


def test_memory_bound_decode_suggests_a_smaller_quantization():
    # 100 MB per 14 ms forward = 7.1 GB/s = 71% of 10 GB/s.
    d = diagnose([reply(steps=(14.03,) * 30)] * 2, MACHINE)
    assert stages(d) == ["decode"]
    assert d.suggestion.startswith("decode reaches 71% of memory bandwidth") and "smaller quantization" in d.suggestion
    assert d.figures["roofline_fraction"] == pytest.approx(0.71, abs=0.005)


def test_compute_bound_decode_suggests_threads():
    d = diagnose([reply(steps=(90.0,) * 10)], MACHINE)  # 1.11 GB/s: 11%
    assert stages(d) == ["decode"] and "only 11% of memory bandwidth" in d.suggestion
    assert "thread count (now 2)" in d.suggestion


def test_uneven_steps_are_named():
    steps = (25.0,) * 18 + (90.0, 95.0)  # 40% of bandwidth at P50, P99 3.7x P50
    d = diagnose([reply(steps=steps)], MACHINE)
    assert stages(d) == ["decode"] and "uneven" in d.suggestion
    # Stalls on a busy machine are named as such, not read as a compute-bound step;
    # the roofline uses the median step, so the stalls do not drag it down.
    d = diagnose([reply(steps=(12.0,) * 15 + (5000.0,) * 5)], MACHINE)
    assert stages(d) == ["decode"] and "competing for the CPU" in d.suggestion
    assert d.figures["roofline_fraction"] == pytest.approx(100e6 / 0.012 / 10e9, rel=0.01)  # 83%, from the median


def test_prefill_with_the_cache_off_suggests_turning_it_on():
    off = Machine(**{**{f: getattr(MACHINE, f) for f in MACHINE.__slots__}, "cache_enabled": False})
    cases = [reply(prefill=3000.0, prompt=3000, computed=3000, steps=(25.0,) * 10) for _ in range(3)]
    d = diagnose(cases, off)
    assert d.suggestion.startswith("prefill is 92% of the reply time with the prefix cache off")
    assert d.suggestion.endswith("turn the prefix cache on")
    # The same timelines with the cache on (it just did not help): not that advice.
    d = diagnose(cases, MACHINE)
    assert "turn the prefix cache on" not in d.suggestion and "shorten the system prompt" in d.suggestion


def test_preprocessing_share():
    d = diagnose([reply(template=40.0, tokenize=90.0, steps=(25.0,) * 10)], MACHINE)
    assert "preprocessing" in stages(d) and d.suggestion.startswith("rendering and tokenizing take")


def test_queue_wait_dominates():
    d = diagnose([reply(queue=900.0, steps=(25.0,) * 10)], MACHINE)
    assert d.suggestion.startswith("requests wait 77% of their time in the queue")


def test_kv_pressure_and_evictions():
    d = diagnose([reply(kv_used=4000, steps=(25.0,) * 10)], MACHINE)
    assert d.suggestion.startswith("the KV reached 98% of the context")
    d = diagnose([reply(evictions=3, steps=(25.0,) * 10)], MACHINE)
    assert stages(d) == ["kv"] and "evicted 3 snapshots" in d.suggestion


def test_sampling_share():
    d = diagnose([reply(sampling=6.0, steps=(30.0,) * 10)], MACHINE)
    assert "sampling" in stages(d) and d.suggestion.startswith("sampling takes")
    assert "6.00 ms per token" in d.suggestion


def test_nothing_stands_out():
    d = diagnose([reply(steps=(25.0,) * 20)], MACHINE)  # 40% of bandwidth, even steps
    assert stages(d) == [] and d.suggestion.startswith("nothing stands out")


def test_no_replies_is_an_error():
    with pytest.raises(ValueError):
        diagnose([], MACHINE)


@pytest.mark.timeout(900)  # two cold prefills of a long prompt, on a busy shared machine
def test_a_huge_system_prompt_without_the_cache_is_prefill_dominated(bundled_path):
    from engine.engine import Engine
    from engine.config import EngineConfig

    huge = " ".join(f"Rule {i}: answer politely, cite the manual, and never guess about part {i}." for i in range(40))
    e = Engine.open(EngineConfig(bundled_path, n_ctx=2048, n_threads=2, cache_budget=0))
    try:
        tls = run_prompts(e, system=huge, prompts=("Hello.", "Which part is first?"), max_tokens=6)
        # The prefill rule does not read the bandwidth; the CLI test below measures it.
        machine = Machine(model_bytes=e.backend.describe().weight_bytes, bandwidth_bytes_s=10e9,
                          cache_enabled=e.kv.enabled, threads=2, label="bundled")
    finally:
        e.close()
    assert all(t.prompt_tokens > 600 and t.cached_tokens == 0 for t in tls)
    d = diagnose(tls, machine)
    prefill = next(f for f in d.findings if f.stage == "prefill")
    assert d.figures["shares"]["prefill"] >= 0.5 and prefill.suggestion
    assert d.suggestion == prefill.suggestion and d.suggestion.endswith("turn the prefix cache on")
    screen = render_diagnosis(d, machine)
    assert screen.count("\n") < 20 and "Suggestion: prefill is" in screen


@pytest.mark.timeout(900)  # three short replies and a bandwidth measurement, on a busy shared machine
def test_the_cli_prints_one_json_diagnosis(capsys):
    from engine.cli import main

    assert main(["doctor", "--json", "--tokens", "4", "--ctx", "1024", "--threads", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [f["stage"] for f in out["findings"]][:3] == ["preprocessing", "queue", "prefill"]
    assert out["figures"]["replies"] == 3 and out["suggestion"]
    assert out["machine"]["cache_enabled"] is True and out["machine"]["model_bytes"] > 0


def test_thinking_that_dominates_the_replies_is_named():
    # 21 tokens per reply, 15 of them reasoning over 200 ms: thinking is the story, not the hardware.
    think = reply(steps=(14.03,) * 20)
    think.reasoning_tokens, think.answer_tokens, think.reasoning_ms = 15, 6, 200.0
    d = diagnose([think], MACHINE)
    assert [f.stage for f in d.findings][-1] == "thinking"
    f = d.findings[-1]
    assert f.suggestion.startswith("thinking dominates the replies (71% of their tokens are reasoning)")
    assert "7. Thinking" in render_diagnosis(d, MACHINE)
    # Half or less: reported, not flagged; a model that does not think gets no thinking line at all.
    think.reasoning_tokens, think.answer_tokens = 10, 11
    assert not diagnose([think], MACHINE).findings[-1].suggestion
    assert "thinking" not in [f.stage for f in diagnose([reply()], MACHINE).findings]
