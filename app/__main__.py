"""``python -m app``: start Hearth's window (or ``--self-test`` / ``--screenshot PATH`` / a benchmark)."""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

from app.core import qt_platform
from app.core.paths import ENV_DATA_DIR


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m app", description="Hearth: chat with a local LLM")
    p.add_argument("--data-dir", help="keep conversations and settings in this folder "
                                      f"(default: the platform's folders, or ${ENV_DATA_DIR})")
    p.add_argument("--self-test", action="store_true",
                   help="offscreen: send one message to the bundled model, print one JSON line, exit")
    p.add_argument("--max-tokens", type=int, default=32, help="reply length for --self-test")
    p.add_argument("--gap-budget-ms", type=float, default=None,
                   help="--self-test fails if the event loop stalls this long (default: the product "
                        "budget, 100 ms; shared CI machines use a looser bound that still catches "
                        "work done on the GUI thread)")
    p.add_argument("--screenshot", metavar="PATH",
                   help="hold a short real conversation and save a PNG of the window (use a display, e.g. Xvfb)")
    p.add_argument("--theme", choices=("system", "light", "dark"), default="system",
                   help="the theme for --screenshot (as View → Theme sets it)")
    p.add_argument("--show", choices=("library", "hub"),
                   help="--screenshot pictures the Models dock instead of a conversation: the model library, "
                        "or the Hub browser with --search's first result open (see scripts/screenshots.py)")
    p.add_argument("--search", default="GGUF", help="what --show hub searches the Hub for")
    p.add_argument("--bench-open", action="store_true",
                   help="offscreen: time opening a 1,000-message chat and a 10k-token reply against a "
                        "10-message one, print the times and ratios, exit")
    p.add_argument("--bench-stream", action="store_true",
                   help="offscreen: stream the same greedy reply through the real window and through "
                        "Engine.stream on the same loaded model, print one JSON object (tok/s both ways, "
                        "their ratio, the GUI thread's CPU share, the worst event-loop gap), exit")
    p.add_argument("--model", metavar="PATH", default="bundled",
                   help="the model for --bench-stream (default: the bundled one; URL#id: a server's model, "
                        "measured against the openai client)")
    p.add_argument("--tokens", type=_positive, default=256, help="reply length for --bench-stream")
    p.add_argument("--threads", type=_positive, default=None,
                   help="CPU threads for --bench-stream (default: the app's Auto rule)")
    p.add_argument("--threads-poll", type=_poll, default=None, metavar="0-100",
                   help="--bench-stream: run llama.cpp on Hearth's own thread pool at this poll level")
    p.add_argument("--rounds", type=_positive, default=3,
                   help="--bench-stream alternates window and engine this many times and reports medians")
    return p


def _poll(text: str) -> int:
    from engine import HearthError
    from engine.loading import check_poll  # the one 0-100 rule

    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number from 0 to 100, got {text!r}") from None
    try:
        return check_poll(n)
    except HearthError:
        raise argparse.ArgumentTypeError(f"expected a whole number from 0 to 100, got {n}") from None


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def install_error_hook(win) -> None:
    """Show unexpected errors in the window as well as in the terminal.

    Qt reports an exception raised in a slot through ``sys.excepthook`` and
    carries on; without this the user would see nothing at all.
    """
    import sqlite3

    previous = sys.excepthook

    def hook(kind, value, tb) -> None:
        previous(kind, value, tb)  # keep the traceback for bug reports
        if issubclass(kind, sqlite3.Error):
            text = (f"Could not read or write the conversation database ({value}). "
                    "Check that the disk is not full; what is already saved is kept.")
        else:
            text = (f"Something went wrong: {kind.__name__}: {value}. "
                    "The details were printed in the terminal.")
        try:
            win.info.show_message(text, "error")
        except RuntimeError:  # the window is already gone
            pass

    sys.excepthook = hook


def _close_on_signals(win) -> None:
    """Ctrl+C or SIGTERM closes the window properly (stop the reply, save, free the model).

    Python runs signal handlers only between bytecodes, and Qt's event loop is
    C++; a slow no-op timer gives the interpreter a chance to run them.
    """
    import signal

    from PySide6.QtCore import QTimer

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: win.close())
    tick = QTimer(win)
    tick.timeout.connect(lambda: None)
    tick.start(250)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    remote = args.model.startswith(("http://", "https://"))  # a server's model (URL#id): --bench-stream on it
    model = args.model if args.model == "bundled" or remote else os.path.abspath(os.path.expanduser(args.model))
    if model != "bundled" and not remote and not os.path.exists(model):
        print(f"error: --model {args.model}: no such file or folder", file=sys.stderr)
        return 2
    scratch = None
    benchmark = args.bench_open or args.bench_stream  # they write their own settings: never into a real folder
    if args.self_test or benchmark:
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    if args.data_dir and not benchmark:
        os.environ[ENV_DATA_DIR] = args.data_dir
    elif args.self_test or args.screenshot or benchmark:
        # Never write test conversations into the user's real history.
        scratch = tempfile.TemporaryDirectory(prefix="hearth-selftest-")
        os.environ[ENV_DATA_DIR] = scratch.name
        if args.show:  # the picture lists only the bundled model (and what the caller set up), never the user's
            os.environ.setdefault("HEARTH_MODEL_DIR", os.path.join(scratch.name, "models"))
            os.environ.setdefault("HF_HUB_CACHE", os.path.join(scratch.name, "hf"))

    if qt_platform.uses_xcb():
        lacking = qt_platform.missing()  # before Qt fails with a message that names none of them
        if lacking:
            print(qt_platform.advice(lacking), file=sys.stderr)
            return 1

    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication, QMessageBox

    from app.ui import theme
    from app.core.store import StoreError

    app = QApplication(sys.argv[:1])
    app.setApplicationName("Hearth")
    app.setApplicationDisplayName("Hearth")
    app.setDesktopFileName("hearth")
    app.setWindowIcon(theme.app_icon())
    try:
        if args.self_test:
            from app.window.selftest import run_self_test
            return run_self_test(max_tokens=args.max_tokens, gap_budget_ms=args.gap_budget_ms)
        if args.bench_open:
            from app.window.bench_open import main as bench_open
            return bench_open()
        if args.bench_stream and remote:
            from app.window.bench_remote import main as bench_remote
            return bench_remote(model, tokens=args.tokens, rounds=args.rounds)
        if args.bench_stream:
            from app.window.bench_stream import main as bench_stream
            return bench_stream(model, tokens=args.tokens, threads=args.threads, rounds=args.rounds,
                                poll=args.threads_poll)
        if args.screenshot:
            from app.window.selftest import take_screenshot
            return take_screenshot(args.screenshot, theme=args.theme, show=args.show, search=args.search)

        from app.window.main_window import MainWindow
        try:
            win = MainWindow()
        except (StoreError, OSError) as e:
            QMessageBox.critical(None, "Hearth cannot start", str(e))
            print(f"error: {e}", file=sys.stderr)
            return 1
        win.show()
        QTimer.singleShot(0, win.start)  # load after the window is on screen
        install_error_hook(win)
        _close_on_signals(win)
        return app.exec()
    finally:
        if scratch is not None:
            scratch.cleanup()


if __name__ == "__main__":
    sys.exit(main())
