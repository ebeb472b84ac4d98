"""``python -m engine doctor``: where this machine and model spend a reply's time,
and the one change most worth trying.

It runs a short fixed prompt set (each prompt a new chat, so the prefix cache
is what may serve the shared system prompt), collects each reply's stats (their
timeline recorded) and reads them in the order an inference engineer would:
preprocessing, queue wait, prefill, decode steps against the memory roofline,
KV pressure, sampling. ``diagnose`` is a pure function of the replies' stats and
the machine's figures, so tests feed it cases built by hand.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Sequence

from ..decode.metrics import PARTS, GenerationStats, percentile
from ..prompt.messages import Message
from ..types import SamplingParams

# A stage is flagged when it takes at least this share of the replies' time.
PREPROCESS_SHARE = 0.10
QUEUE_SHARE = 0.10
PREFILL_SHARE = 0.50
SAMPLING_SHARE = 0.10
MEMORY_BOUND = 0.60      # decode reads the weights at >= this share of bandwidth: memory-bound
COMPUTE_BOUND = 0.25     # below this share the step is spent computing (or waiting), not reading
KV_FULL = 0.90           # KV used / n_ctx at which the oldest turns are about to be dropped
JITTER = 2.0             # P99 step over P50: steps this uneven mean something else wants the CPU
THINKING_SHARE = 0.50    # reasoning tokens over all generated tokens at which thinking dominates the replies

DOCTOR_SYSTEM = ("You are a helpful assistant. Answer clearly and briefly, in plain language, "
                 "and say so when you are not sure.")
DOCTOR_PROMPTS = ("Explain in two sentences why the sky is blue.",
                  "Give three tips for writing readable code.",
                  "What is the difference between weather and climate?")


@dataclass(slots=True, frozen=True)
class Machine:
    """The figures the diagnosis needs besides the replies' stats."""

    model_bytes: int             # weight bytes read per decoded token
    bandwidth_bytes_s: float     # measured memory bandwidth of the device the weights are on
    cache_enabled: bool          # the prefix cache (snapshots) is on
    threads: int = 0
    label: str = ""              # model and runtime, for the heading


@dataclass(slots=True)
class Finding:
    stage: str                   # "preprocessing", "queue", "prefill", "decode", "kv", "sampling"
    line: str                    # what was measured, one line
    suggestion: str = ""         # the change it points to, "" when the stage is fine
    weight: float = 0.0          # how much is at stake (share of the time, or KV fullness)


@dataclass(slots=True)
class Diagnosis:
    findings: list[Finding]
    suggestion: str              # the one change to try, with the measurement behind it
    figures: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"findings": [asdict(f) for f in self.findings], "suggestion": self.suggestion,
                "figures": self.figures}


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


class _Replies:
    """The replies' timed stats, summed for the stage readings."""

    def __init__(self, timelines: Sequence[GenerationStats]) -> None:
        self.t = timelines
        self.n = len(timelines)
        self.total = sum(t.e2e_ms for t in timelines) or 1e-9
        self.steps = [s for t in timelines for s in t.step_ms]

    def sum(self, name: str) -> float:
        return sum(getattr(t, name) for t in self.t)

    def share(self, name: str) -> float:
        """The stage's share of the replies' whole time."""
        return self.sum(name) / self.total


def _preprocessing(r: _Replies) -> Finding:
    pre = r.share("template_ms") + r.share("tokenize_ms")
    f = Finding("preprocessing", f"template {r.sum('template_ms') / r.n:.1f} ms + tokenize "
                f"{r.sum('tokenize_ms') / r.n:.1f} ms per reply = {_pct(pre)} of the time", weight=pre)
    if pre >= PREPROCESS_SHARE:
        f.suggestion = (f"rendering and tokenizing take {_pct(pre)} of the reply time: every turn re-reads the whole "
                        "conversation, so shorten the system prompt or start a new chat")
    return f


def _queue(r: _Replies) -> Finding:
    queue = r.share("queue_wait_ms")
    f = Finding("queue", f"waited {r.sum('queue_wait_ms') / r.n:.0f} ms per reply = {_pct(queue)}", weight=queue)
    if queue >= QUEUE_SHARE:
        f.suggestion = (f"requests wait {_pct(queue)} of their time in the queue: run fewer at once, or give "
                        "the chat window's requests priority over background ones")
    return f


def _prefill(r: _Replies, machine: Machine) -> Finding:
    prefill = r.share("prefill_ms")
    computed = int(r.sum("prefill_tokens"))
    prompt = int(r.sum("prompt_tokens")) or 1
    rate = computed / (r.sum("prefill_ms") / 1e3 or 1e-9)
    f = Finding("prefill", f"{_pct(prefill)} of the time: {computed} of {prompt} prompt tokens computed "
                f"({_pct(1 - computed / prompt)} cached) at {rate:.0f} tok/s", weight=prefill)
    if prefill >= PREFILL_SHARE:
        if not machine.cache_enabled:
            f.suggestion = (f"prefill is {_pct(prefill)} of the reply time with the prefix cache off: "
                            "turn the prefix cache on")
        else:
            f.suggestion = (f"prefill is {_pct(prefill)} of the reply time although the prefix cache is on "
                            f"({_pct(1 - computed / prompt)} of the prompt served from it): shorten the system "
                            "prompt, or offload layers to a GPU")
    return f


def _decode(r: _Replies, machine: Machine) -> tuple[Finding, float, float]:
    """The decode finding, the fraction of the memory roofline reached, and the bytes/s achieved."""
    decode = r.share(PARTS["decode"])
    steps = r.steps
    # The typical step (the median, so a few stalls do not count), less its
    # sampling and detokenizing: the forward pass that reads the weights.
    forward_share = r.sum("forward_ms") / (sum(steps) or 1e-9)
    forward_s = percentile(steps, 50) * forward_share / 1e3
    achieved = machine.model_bytes / forward_s if forward_s > 0 else 0.0
    roof = achieved / machine.bandwidth_bytes_s if machine.bandwidth_bytes_s > 0 else 0.0
    p50, p99 = percentile(steps, 50), percentile(steps, 99)
    f = Finding("decode", f"{_pct(decode)} of the time; TPOT P50 {p50:.1f} ms, P90 {percentile(steps, 90):.1f}, "
                f"P99 {p99:.1f}; {machine.model_bytes / 1e6:.0f} MB per token / {forward_s * 1e3:.2f} ms = "
                f"{achieved / 1e9:.1f} GB/s = {_pct(roof)} of {machine.bandwidth_bytes_s / 1e9:.1f} GB/s measured",
                weight=decode)
    if steps:
        if p50 > 0 and p99 / p50 >= JITTER:
            f.suggestion = (f"decode steps are uneven (P99 {p99:.1f} ms is {p99 / p50:.1f}x P50): another program "
                            "is competing for the CPU; close it or use fewer threads")
        elif roof >= MEMORY_BOUND:
            f.suggestion = (f"decode reaches {_pct(roof)} of memory bandwidth: it is memory-bound, so a smaller "
                            "quantization would be faster")
        elif roof < COMPUTE_BOUND:
            f.suggestion = (f"decode reaches only {_pct(roof)} of memory bandwidth: the step is spent computing, "
                            f"not reading weights; try another thread count (now {machine.threads or 'auto'}) "
                            "or the fast kernels")
        else:
            f.weight = 0.0
    return f, roof, achieved


def _kv(r: _Replies) -> Finding:
    t = r.t
    full = max(x.kv_used / x.n_ctx for x in t if x.n_ctx) if any(x.n_ctx for x in t) else 0.0
    evicted = int(r.sum("cache_evictions"))
    f = Finding("kv", f"KV {_pct(full)} of the context at most; prefix cache: "
                f"{int(r.sum('cache_hits'))} hits, {int(r.sum('cache_inserts'))} inserts, {evicted} evictions")
    if full >= KV_FULL:
        f.suggestion = (f"the KV reached {_pct(full)} of the context: raise the context length, or the oldest "
                        "turns will be left out")
        f.weight = full
    elif evicted:
        f.suggestion = (f"the prefix cache evicted {evicted} snapshots during {r.n} replies: raise its memory budget")
        f.weight = evicted / r.n
    return f


def _sampling(r: _Replies) -> Finding:
    sampling = r.share("sampling_ms") + r.share("detokenize_ms")
    per_tok = r.sum("sampling_ms") / max(1, r.sum("generated_tokens"))
    f = Finding("sampling", f"{per_tok:.2f} ms per token; sampling and detokenizing {_pct(sampling)} of the time",
                weight=sampling)
    if sampling >= SAMPLING_SHARE:
        f.suggestion = (f"sampling takes {_pct(sampling)} of the reply time ({per_tok:.2f} ms per token): set "
                        "top-k (the fast path) or turn the repetition penalties off")
    return f


def _thinking(r: _Replies) -> Finding | None:
    """Only for a thinking model's replies."""
    thought = int(r.sum("reasoning_tokens"))
    if not thought:
        return None
    think_share = thought / max(1, r.sum("generated_tokens"))
    f = Finding("thinking", f"{_pct(think_share)} of the generated tokens were reasoning ({thought / r.n:.0f} per "
                f"reply, {r.sum('reasoning_ms') / r.n / 1e3:.1f} s of thinking per reply)",
                weight=r.share("reasoning_ms"))
    if think_share > THINKING_SHARE:
        f.suggestion = (f"thinking dominates the replies ({_pct(think_share)} of their tokens are reasoning): "
                        "turn Think off for quick questions, or set a thinking budget")
    return f


def diagnose(timelines: Sequence[GenerationStats], machine: Machine) -> Diagnosis:
    """Read the replies' timed stats stage by stage; the suggestion is the flagged
    stage with the most at stake. Raises ValueError without any reply."""
    if not timelines:
        raise ValueError("no replies to diagnose")
    r = _Replies(timelines)
    decode, roof, achieved = _decode(r, machine)
    findings = [_preprocessing(r), _queue(r), _prefill(r, machine), decode, _kv(r), _sampling(r)]
    thinking = _thinking(r)
    if thinking is not None:
        findings.append(thinking)
    flagged = [f for f in findings if f.suggestion]
    if flagged:
        suggestion = max(flagged, key=lambda f: f.weight).suggestion
    else:
        suggestion = (f"nothing stands out: decode is {_pct(r.share(PARTS['decode']))} of the time at {_pct(roof)} "
                      f"of memory bandwidth and prefill {_pct(r.share('prefill_ms'))}; keep this configuration")
    figures = {"replies": r.n, "e2e_ms": round(r.total / r.n, 1), "roofline_fraction": round(roof, 4),
               "achieved_gb_s": round(achieved / 1e9, 3), "bandwidth_gb_s": round(machine.bandwidth_bytes_s / 1e9, 3),
               "shares": {k: round(r.share(f), 4) for k, f in PARTS.items()}}
    return Diagnosis(findings, suggestion, figures)


def run_prompts(engine, *, system: str = DOCTOR_SYSTEM, prompts: Sequence[str] = DOCTOR_PROMPTS,
                max_tokens: int = 48) -> list[GenerationStats]:
    """Each prompt as a new chat (the live KV forgotten, the prefix cache kept),
    greedy and of fixed length; returns their final stats, timeline included."""
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    out: list[GenerationStats] = []
    for text in prompts:
        engine.reset()
        final = None
        for ev in engine.stream([Message("system", system), Message("user", text)], params):
            if ev.kind == "final":
                final = ev
        if final is None or final.stats is None or not final.stats.timed:
            raise RuntimeError("the reply ended without a timeline")
        out.append(final.stats)
    return out


def render_diagnosis(d: Diagnosis, machine: Machine) -> str:
    """One screen of text."""
    lines = [f"Hearth doctor: {machine.label}, {machine.threads or 'auto'} threads, prefix cache "
             f"{'on' if machine.cache_enabled else 'off'}; {d.figures.get('replies', 0)} replies, "
             f"{d.figures.get('e2e_ms', 0):.0f} ms each"]
    names = {"preprocessing": "1. Preprocessing", "queue": "2. Queue wait", "prefill": "3. Prefill",
             "decode": "4. Decode", "kv": "5. KV pressure", "sampling": "6. Sampling", "thinking": "7. Thinking"}
    for f in d.findings:
        mark = "!" if f.suggestion else " "
        lines.append(f"{mark} {names.get(f.stage, f.stage):17} {f.line}")
    lines.append("")
    lines.append(f"Suggestion: {d.suggestion}")
    return "\n".join(lines)


def cli_doctor(a) -> int:
    """``python -m engine doctor``: load, run the prompt set, print the diagnosis."""
    import json
    from pathlib import Path

    from ..sizing.bandwidth import measure_read_bandwidth
    from ..backends.llama.backend import default_threads
    from ..engine import Engine
    from ..config import EngineConfig, default_exactness
    from ..kv.prefix_cache import DEFAULT_BUDGET

    system = Path(a.system_file).read_text(encoding="utf-8") if a.system_file else DOCTOR_SYSTEM
    threads = a.threads or default_threads()
    engine = Engine.open(EngineConfig(a.model, n_ctx=a.ctx, n_threads=threads,
                         exactness=getattr(a, "exactness", None) or default_exactness(),
                         cache_budget=0 if a.no_prefix_cache else DEFAULT_BUDGET))
    try:
        info = engine.backend.describe()
        timelines = run_prompts(engine, system=system, max_tokens=a.tokens)
        label = engine.model.label if engine.model else info.name
        machine = Machine(model_bytes=info.weight_bytes, bandwidth_bytes_s=measure_read_bandwidth(threads, mib=256),
                          cache_enabled=engine.kv.enabled, threads=threads,
                          label=f"{label} ({info.runtime}, {info.device})")
    finally:
        engine.close()
    d = diagnose(timelines, machine)
    if a.json:
        print(json.dumps({**d.to_dict(), "machine": asdict(machine)}))
    else:
        print(render_diagnosis(d, machine))
    return 0
