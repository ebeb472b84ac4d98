"""Take the documentation's pictures of a thinking reply, while its reasoning streams and once it folds.

    .venv/bin/python scripts/thinking_screenshots.py   # offscreen: assets/screenshot-thinking-*.png

The real window, worker, store and renderer, with the bundled model loaded, in a scratch data
folder that is deleted afterwards. The bundled model cannot think, so its reply is given as a
script of the engine's own StreamEvents ("reasoning", then "delta", then "final" with its
figures), on the engine thread, the way tests/test_app_reasoning.py drives the window.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMPT = "Is 1001 a prime number?"
REASONING = ("The user asks whether 1001 is prime. Let me try small divisors. It is odd, so not 2. "
             "Digit sum 1+0+0+1 = 2, so not 3. It does not end in 0 or 5, so not 5. Try 7: 7 × 143 = 1001. "
             "So 1001 = 7 × 143, and 143 = 11 × 13. So 1001 = 7 × 11 × 13: not prime. I should answer "
             "with the factorisation and a quick way to check it.")
ANSWER = ("No. **1001 is not prime**: it factors as `1001 = 7 × 11 × 13`.\n\n"
          "A quick check: 7 × 11 = 77, and 77 × 13 = 1001.\n\n"
          "- It is odd, and its digit sum (2) rules out 3.\n"
          "- 7 is the first divisor that works: 1001 ÷ 7 = 143.\n")


class Scripted:
    """The loaded engine, whose next reply is ``script``: StreamEvents, and threading.Events to wait on."""

    def __init__(self, real, script: list) -> None:
        self.real, self.script = real, script

    def __getattr__(self, name):
        return getattr(self.real, name)

    def stream(self, messages, params, **kwargs):
        for step in self.script:
            if isinstance(step, threading.Event):
                step.wait(60)
            else:
                yield step


def words(text: str) -> list[str]:
    out, cur = [], ""
    for ch in text:
        cur += ch
        if ch == " ":
            out.append(cur)
            cur = ""
    return out + ([cur] if cur else [])


def take(out: Path, theme: str) -> None:
    from engine.decode.metrics import GenerationStats
    from engine.types import StreamEvent

    from app.window.main_window import MainWindow
    from app.window.selftest import wait_until, write_settings

    write_settings(max_tokens=400)
    win = MainWindow()
    win.show()
    win.start()
    if not wait_until(lambda: win.host.ready or not win.host.loading, 120.0) or not win.host.ready:
        raise RuntimeError("the model did not load: " + " | ".join(win.info.messages()))
    win.set_theme(theme)
    win.resize(1280, 800)
    answer_go = threading.Event()
    shown = words(REASONING)[:40]  # the picture is taken while the reasoning is still coming
    stats = GenerationStats(prompt_tokens=38, generated_tokens=131, decode_tok_s=28.4, ttft_ms=61.0,
                            finish_reason="eos", reasoning_ms=9_412.0, reasoning_tokens=96, answer_tokens=35)
    win.host.shared.engine = Scripted(win.host.shared.engine, [
        *[StreamEvent("reasoning", t) for t in shown], answer_go,
        *[StreamEvent("reasoning", t) for t in words(REASONING)[40:]],
        *[StreamEvent("delta", t) for t in words(ANSWER)],
        StreamEvent("final", ANSWER, finish_reason="eos", stats=stats, reasoning=REASONING)])
    win.chat.input.setPlainText(PROMPT)
    win.send(PROMPT)
    win.rename_conversation(win.current, "Is 1001 prime?")
    block = win.chat.widget(win.stream.mid).thinking
    if not wait_until(lambda: block.text == "".join(shown) and block.expanded, 30.0):
        raise RuntimeError("the reasoning did not stream into its block")
    wait_until(lambda: False, 0.5)
    suffix = "-dark" if theme == "dark" else ""
    if not win.grab().save(str(out / f"screenshot-thinking-streaming{suffix}.png")):
        raise RuntimeError("could not write the streaming picture")
    answer_go.set()
    if not wait_until(lambda: win.stream is None and not block.expanded and block.line.startswith("Thought for"),
                      60.0):
        raise RuntimeError("the reply did not end with its reasoning folded")
    wait_until(lambda: False, 0.5)
    if not win.grab().save(str(out / f"screenshot-thinking-folded{suffix}.png")):
        raise RuntimeError("could not write the folded picture")
    win.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=str(ROOT / "assets"), help="folder for the pictures")
    args = p.parse_args()
    out = Path(args.out).resolve()
    sys.path[:0] = [str(ROOT)]
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv)
    from app.ui import theme

    theme.apply(app, "light")
    for t in ("light", "dark"):
        with tempfile.TemporaryDirectory(prefix="hearth-thinking-") as scratch:
            os.environ["HEARTH_DATA_DIR"] = scratch  # a fresh data folder each: one conversation per picture
            take(out, t)
    return 0


if __name__ == "__main__":
    sys.exit(main())
