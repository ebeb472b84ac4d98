"""``python -m app --bench-stream --model URL#id``: the window on a server's model against the official client.

The window loads the server's model the normal way (the remote engine, through
the engine thread) and streams the same greedy request, ``rounds`` times, through
the real window (offscreen: input box, Enter, the engine thread, the store, the
chat's rendering) and through the ``openai`` client against the same server,
alternating, after one unmeasured pair. Both sides are timed where a user sees
the words: the window when its GUI thread handles each delta signal, the client
as each chunk with content arrives. TTFT is Enter (or the client's call) to the
first text; tok/s is the text chunks after the first over the time they took.
Settings and conversations go to a scratch data folder (app/__main__.py).
"""
from __future__ import annotations

import json
import statistics
import time

from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from app.core.settings import Settings, SettingsFile
from app.window.bench_stream import PROMPT, SETTLE_S
from app.window.selftest import _start_window, wait_until


def _rate(times: list[float]) -> float:
    return (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 and times[-1] > times[0] else 0.0


def _window_reply(win, prompt: str, timeout_s: float) -> dict:
    win.new_conversation()
    wait_until(lambda: False, SETTLE_S)
    arrivals: list[float] = []
    end: dict = {}

    def delta(_mid: int, _text: str) -> None:
        arrivals.append(time.perf_counter())

    def finished(_mid: int, result: dict) -> None:
        end.update(result=result)

    win.host.delta.connect(delta)
    win.host.finished.connect(finished)
    failed: list[str] = []
    win.host.failed.connect(lambda _m, msg, _p: failed.append(msg))
    try:
        win.chat.input.setPlainText(prompt)
        t0 = time.perf_counter()
        QTest.keyClick(win.chat.input, Qt.Key.Key_Return)
        if win.host.job is None:
            raise RuntimeError("the message was not sent: " + " | ".join(win.info.messages()))
        if not wait_until(lambda: bool(end) or bool(failed), timeout_s):
            raise RuntimeError(f"no reply within {timeout_s:.0f} s")
        if failed:
            raise RuntimeError(failed[0])
    finally:
        win.host.delta.disconnect(delta)
        win.host.finished.disconnect(finished)
    metrics = end["result"].get("metrics") or {}
    return {"text": end["result"]["text"], "ttft_ms": (arrivals[0] - t0) * 1e3 if arrivals else 0.0,
            "tok_s": _rate(arrivals), "chunks": len(arrivals), "engine_ttft_ms": metrics.get("ttft_ms", 0.0)}


def _client_reply(client, model: str, prompt: str, tokens: int) -> dict:
    arrivals: list[float] = []
    text: list[str] = []
    t0 = time.perf_counter()
    stream = client.chat.completions.create(model=model, messages=[{"role": "user", "content": prompt}],
                                            temperature=0.0, seed=0, max_tokens=tokens, stream=True)
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            arrivals.append(time.perf_counter())
            text.append(chunk.choices[0].delta.content)
    return {"text": "".join(text), "ttft_ms": (arrivals[0] - t0) * 1e3 if arrivals else 0.0,
            "tok_s": _rate(arrivals), "chunks": len(arrivals)}


def run_remote(model: str, tokens: int = 128, rounds: int = 3, prompt: str = PROMPT,
               timeout_s: float = 600.0) -> dict:
    """Warm up, then alternate window and client replies ``rounds`` times; the figures as a dict."""
    import openai

    from engine.loading import split_remote

    url, model_id = split_remote(model)
    s = Settings(model=model, draft="none")
    s.sampling.update({"temperature": 0.0, "seed": 0, "max_tokens": tokens})
    SettingsFile().save(s)
    win = None
    try:
        win, *_ = _start_window()
        if win.host.model is None or not win.host.model.capabilities.on_server:
            raise RuntimeError("the window did not open the server's model: " + " | ".join(win.info.messages()))
        model_id = win.host.model.label
        client = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=timeout_s)
        window, ref = [], []
        for i in range(rounds + 1):  # the first pair warms up (the server's first prefill) and is not counted
            w = _window_reply(win, prompt, timeout_s)
            r = _client_reply(client, model_id, prompt, tokens)
            if i:
                window.append(w)
                ref.append(r)
        problems = ["the window's reply and the client's differ"] if any(
            w["text"] != r["text"] for w, r in zip(window, ref)) else []
        w_tok, r_tok = (statistics.median(x["tok_s"] for x in side) for side in (window, ref))
        w_ttft, r_ttft = (statistics.median(x["ttft_ms"] for x in side) for side in (window, ref))
        return {"ok": not problems, "problems": problems, "model": model_id, "server": url, "tokens": tokens,
                "rounds": rounds, "window_tok_s": round(w_tok, 2), "client_tok_s": round(r_tok, 2),
                "ratio": round(w_tok / r_tok, 3) if r_tok else 0.0, "window_ttft_ms": round(w_ttft, 1),
                "client_ttft_ms": round(r_ttft, 1), "ttft_added_ms": round(w_ttft - r_ttft, 1),
                "per_round": {"window_tok_s": [round(x["tok_s"], 2) for x in window],
                              "client_tok_s": [round(x["tok_s"], 2) for x in ref],
                              "window_ttft_ms": [round(x["ttft_ms"], 1) for x in window],
                              "client_ttft_ms": [round(x["ttft_ms"], 1) for x in ref],
                              "window_engine_ttft_ms": [round(x["engine_ttft_ms"], 1) for x in window],
                              "chunks": [x["chunks"] for x in window]}}
    finally:
        if win is not None:
            win.close()


def main(model: str, tokens: int = 128, rounds: int = 3) -> int:
    """Print one JSON object; 0 when both sides wrote the same text."""
    try:
        result = run_remote(model, tokens, rounds)
    except Exception as e:
        result = {"ok": False, "problems": [f"{type(e).__name__}: {e}"]}
    print(json.dumps(result), flush=True)
    return 0 if result["ok"] else 1
