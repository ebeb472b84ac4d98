"""``python -m engine bench long-chat``: a conversation that outgrows the context, per policy.

A scripted conversation (a system prompt with a fact, a pinned message with a fact, a turn
with a fact that the cut will leave out, then questions on a round of topics, each answered
greedily by the model) grows to ``--grow`` times the context (3 by default) on the bundled model
and on Qwen2.5-Coder-1.5B (``models fetch-bench-pair``). The turns before the first overflow are
run once; from there each policy goes on from the same KV (restored), turn by turn:

- TTFT per turn before and after the first overflow, and the prompt tokens read against those
  served from the KV; a *re-read* is a turn that read more than twice the median before;
- the goal of issue #58: under ``shift`` no turn after the overflow slower than 1.5x the median
  before it; under ``drop_oldest`` the median within 1.5x, its re-reads counted;
- ``stop``: where it refuses (the turns before are the same as every policy's);
- shift's drift against reading the same view from scratch (greedy agreement, and the KL of the
  next-token distributions over the reply, as ``bench quality`` measures; long_chat_drift.py);
- compaction's cost: each summary's own prefill and decode, and the turn that reads it;
- memory: the system prompt's and the pinned message's facts asked at the end under every
  policy, and the left-out turn's fact.

Each side runs in the same process, ratios against the same run's turns before the overflow.
``--quick``: the bundled model only in a 512-token context, growing to 1.5x: that it runs, not figures.
Each turn is noted on stderr as it ends (the run takes minutes).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any, Callable

from ..prompt.messages import Message
from ..prompt.summary import compacted
from ..types import SamplingParams

POLICIES = ("drop_oldest", "shift", "compact")
SYSTEM = "You are a helpful assistant. Answer in one or two short sentences. The user's dog is called Biscuit."
PINNED = "Please remember this for later: my locker code is 4721."
DROPPED = "By the way, my sister lives in Lisbon. Now, a first question: what is a prime number?"
FACTS = {"system": ("What is my dog called?", "biscuit"), "pinned": ("What is my locker code?", "4721"),
         "dropped": ("In which city does my sister live?", "lisbon")}
TOPICS = ("the moon", "bread", "rivers", "chess", "volcanoes", "bees", "glass", "tea", "maps", "clocks", "salt",
          "owls", "bridges", "paper", "rain", "copper", "violins", "deserts", "coffee", "kites")
QUESTION = "Tell me one interesting fact about {t}, and say why it matters to people today. (Turn {i}.)"
GOAL = 1.5  # issue #58: after the overflow, shift's slowest turn and drop's median within this of the median before
MODELS = {"bundled": 2048, "1.5b": 768}  # each model's context in the default run (about 10 minutes in all)
QUICK_CTX = 512  # --quick: a check that everything runs (a few minutes), not figures


def bench_long_chat(a: argparse.Namespace) -> dict:
    from ..config import EngineConfig
    from ..engine import Engine
    from ..models import catalogue

    quick = bool(getattr(a, "quick", False))
    grow = float(getattr(a, "grow", None) or (1.5 if quick else 3.0))
    names = ["bundled"] if quick else [m.strip() for m in (getattr(a, "models", None) or "bundled,1.5b").split(",")]
    out: dict[str, Any] = {"grow": grow, "goal": GOAL, "models": []}
    for name in names:
        path = (catalogue.bundled_model_path() if name == "bundled"
                else catalogue.bench_model_path(catalogue.BENCH_TARGET))
        if path is None:
            out["models"].append({"model": name, "skipped": "run `python -m engine models fetch-bench-pair` first"})
            continue
        n_ctx = int(getattr(a, "n_ctx_chat", None) or (QUICK_CTX if quick else MODELS.get(name, 2048)))
        engine = Engine.open(EngineConfig(path, n_ctx=n_ctx, n_threads=a.threads, cache_budget=0, draft="none",
                                          exactness="fast"))
        try:
            t0 = time.perf_counter()
            row = run_model(engine, name, n_ctx, grow, quick)
            out["models"].append({**row, "seconds": round(time.perf_counter() - t0, 1)})
        finally:
            engine.close()
    out["table"] = [r for m in out["models"] if "policies" in m for r in table(m)]
    for r in out["table"]:
        print("long-chat: " + ", ".join(f"{k} {v}" for k, v in r.items()), file=sys.stderr, flush=True)
    return out


def table(row: dict) -> list[dict]:
    """One model's figures per policy, the goals of issue #58 beside them: what the docs quote."""
    out = []
    base = row["ttft_before_median_ms"]
    for policy, p in row["policies"].items():
        r: dict[str, Any] = {"model": row["model"], "n_ctx": row["n_ctx"], "policy": policy,
                             "ttft_before_median_ms": base}
        if policy == "stop":
            out.append({**r, "refused_at_turn": p["refused_at_turn"], "replies_cut": p["replies_cut"]})
            continue
        r.update({k: p[k] for k in ("ttft_after_median_ms", "ttft_after_max_ms", "median_ratio", "max_ratio",
                                    "rereads", "tokens_read", "tokens_cached", "tokens_shifted")})
        if policy == "shift":
            r.update(goal=f"max_ratio <= {GOAL}", goal_met=p["goal_met"])
            d = row.get("shift_drift", {})
            r.update({f"drift_{k}": d[k] for k in ("measured", "agreement", "kl_mean", "top1_changed") if k in d})
        elif policy == "drop_oldest":
            r.update(goal=f"median_ratio <= {GOAL}, rereads counted", goal_met=p["goal_met"])
        else:
            c = p["compactions"]
            r.update(compactions=len(c), summary_ms=sum(x["summary_ms"] for x in c),
                     summary_tokens=sum(x["summary_tokens"] for x in c))
        r["facts_kept"] = ",".join(k for k, v in p["facts"].items() if v["ok"]) or "none"
        r["facts_goal"] = "system,pinned,dropped" if policy == "compact" else "system,pinned"
        out.append(r)
    return out


def run_model(engine: Any, name: str, n_ctx: int, grow: float, quick: bool) -> dict:
    """One model: the shared turns, then each policy from the same KV."""
    from .long_chat_drift import DriftProbe, restore_kv, save_kv

    reply = SamplingParams(temperature=0.0, max_tokens=24, repeat_penalty=1.1)
    script = Script(engine, n_ctx, grow)
    before = script.until_overflow(reply)
    saved, history, turn = engine.core.call(lambda: save_kv(engine)), list(script.history), script.turn
    row: dict[str, Any] = {"model": name, "n_ctx": n_ctx, "profile": "fast", "turns_before": len(before),
                           "ttft_before_median_ms": _median(before, "ttft_ms"), "policies": {}}
    row["policies"]["stop"] = script.refused(reply)
    for policy in POLICIES:
        engine.core.call(lambda: restore_kv(engine, saved))
        engine.summaries = type(engine.summaries)()
        script.history, script.turn = list(history), turn
        probe = DriftProbe(engine, 1 if quick else 3) if policy == "shift" else None
        t0 = time.perf_counter()
        turns = script.rest(policy, reply, probe)
        facts = script.facts(policy)
        row["policies"][policy] = policy_row(policy, before, turns, facts, time.perf_counter() - t0)
        if probe is not None:
            row["shift_drift"] = probe.summary()
    row["per_turn_before"] = before
    return row


class Script:
    """The scripted conversation on one engine: its history (the caller's view of it, as engine chat
    keeps one) and its turns, each recorded."""

    def __init__(self, engine: Any, n_ctx: int, grow: float) -> None:
        self.engine, self.n_ctx = engine, n_ctx
        self.history: list[Message] = [Message("system", SYSTEM), Message("user", PINNED, pinned=True),
                                       Message("assistant", "Noted: your locker code is 4721."),
                                       Message("user", DROPPED)]
        self.turn = 0
        self.goal = int(grow * n_ctx)  # every token the conversation has had, what it grows to
        self.last_prompt: list[int] = []

    def next_question(self) -> None:
        if self.history[-1].role == "assistant":
            t = TOPICS[self.turn % len(TOPICS)]
            self.history.append(Message("user", QUESTION.format(t=t, i=self.turn)))

    def ask(self, policy: str, params: SamplingParams) -> dict:
        """One turn under ``policy``: its record; the reply joins the history."""
        self.next_question()
        t0 = time.perf_counter()
        final, context = None, []
        for ev in self.engine.stream(self.history, params, context_policy=policy):
            if ev.kind == "context":
                context.append(ev.text)
            final = ev if ev.kind == "final" else final
        e2e = (time.perf_counter() - t0) * 1e3
        assert final is not None and final.stats is not None
        st = final.stats
        self.last_prompt = self.engine.kv.kv_tokens(0)[:max(0, st.kv_used - st.generated_tokens + 1)]
        if st.summary:
            self.history = compacted(self.history, st.view_start, st.summary)
        self.history.append(Message("assistant", final.text))
        self.turn += 1
        print(f"long-chat: turn {self.turn} ({policy}): ttft {st.ttft_ms:.0f} ms, read "
              f"{st.prompt_tokens - st.cached_tokens + st.reread_tokens} of {st.prompt_tokens} tokens",
              file=sys.stderr, flush=True)
        return {"turn": self.turn, "ttft_ms": round(st.ttft_ms, 1), "e2e_ms": round(e2e, 1),
                "prompt_tokens": st.prompt_tokens, "cached_tokens": st.cached_tokens,
                "read_tokens": st.prompt_tokens - st.cached_tokens + st.reread_tokens,
                "generated_tokens": st.generated_tokens, "dropped": st.dropped_messages,
                "summarized": st.summarized_messages, "shifted_tokens": st.shifted_tokens,
                "context_policy": st.context_policy, "context_ms": round(st.context_ms, 1),
                "summary_tokens": len(self.engine.backend.tokenize(st.summary)) if st.summary else 0,
                "finish_reason": final.finish_reason, "reply_tokens": list(final.token_ids)}

    def conversation_tokens(self) -> int:
        return self.engine.count_tokens(self.history)

    def until_overflow(self, params: SamplingParams) -> list[dict]:
        """The turns every policy shares: until the next question would not fit whole."""
        out: list[dict] = []
        room = self.n_ctx - min(params.limit, self.n_ctx // 4)
        while True:
            self.next_question()
            if self.conversation_tokens() > room:
                return out
            out.append(self.ask("stop", params))

    def refused(self, params: SamplingParams) -> dict:
        """``stop`` from the overflow on: the turns it still takes (their replies may end "context_full"),
        until it refuses one, with what it says. Leaves the history and the KV to be put back."""
        from ..errors import PromptTooLongError

        cut = 0
        while True:
            try:
                rec = self.ask("stop", params)
            except PromptTooLongError as e:
                return {"refused_at_turn": self.turn + 1, "replies_cut": cut, "message": str(e)}
            cut += rec["finish_reason"] == "context_full"

    def rest(self, policy: str, params: SamplingParams, after: Callable[[dict, list[int]], None] | None = None
             ) -> list[dict]:
        """The turns after the overflow under ``policy``, until the conversation has grown enough;
        ``after(record, prompt tokens)`` is called after each (between turns)."""
        out = []
        spoken = self.conversation_tokens()
        while spoken < self.goal:
            rec = self.ask(policy, params)
            out.append(rec)
            if after is not None:
                after(rec, self.last_prompt)
            spoken += rec["generated_tokens"] + len(self.engine.backend.tokenize(self.history[-2].content))
        return out

    def facts(self, policy: str) -> dict:
        """Each fact asked at the end (a branch off the last turn, not kept): answered right or not."""
        params = SamplingParams(temperature=0.0, max_tokens=16)
        out = {}
        for key, (question, want) in FACTS.items():
            final = None
            for ev in self.engine.stream([*self.history, Message("user", question)], params, context_policy=policy):
                final = ev if ev.kind == "final" else final
            text = final.text if final is not None else ""
            out[key] = {"ok": want in text.lower(), "answer": text.strip()[:80]}
        return out


def _median(turns: list[dict], key: str) -> float:
    return round(statistics.median(t[key] for t in turns), 1) if turns else 0.0


def policy_row(policy: str, before: list[dict], after: list[dict], facts: dict, seconds: float) -> dict:
    """One policy's figures: TTFT after the overflow against before it, tokens read and served, re-reads."""
    base = _median(before, "ttft_ms")
    read_base = statistics.median(t["read_tokens"] for t in before) if before else 0
    rereads = [t["turn"] for t in after if t["read_tokens"] > 2 * read_base]
    worst = max((t["ttft_ms"] for t in after), default=0.0)
    med = _median(after, "ttft_ms")
    out = {"turns_after": len(after), "ttft_after_median_ms": med, "ttft_after_max_ms": worst,
           "median_ratio": round(med / base, 2) if base else None,
           "max_ratio": round(worst / base, 2) if base else None,
           "rereads": len(rereads), "reread_turns": rereads,
           "tokens_read": sum(t["read_tokens"] for t in after), "tokens_cached": sum(t["cached_tokens"] for t in after),
           "tokens_shifted": sum(t["shifted_tokens"] for t in after), "facts": facts, "seconds": round(seconds, 1),
           "per_turn": after}
    if policy == "shift":
        out["goal_met"] = out["max_ratio"] is not None and out["max_ratio"] <= GOAL
    elif policy == "drop_oldest":
        out["goal_met"] = out["median_ratio"] is not None and out["median_ratio"] <= GOAL
    else:
        summaries = [t for t in after if t["summarized"]]
        out["compactions"] = [{"turn": t["turn"], "summary_ms": t["context_ms"], "summary_tokens": t["summary_tokens"],
                               "turn_read_tokens": t["read_tokens"], "turn_ttft_ms": t["ttft_ms"]} for t in summaries]
    return out
