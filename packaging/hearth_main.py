"""Entry point of the frozen app: the same ``main()`` as ``python -m app``."""
import os
import sys
import time


def _trace_window_shown(path: str) -> None:
    """For packaging/smoke.sh: write the wall-clock time of the first MainWindow.show() to ``path``.

    The self-test's window_shown_ms counts from the window's constructor; the
    smoke test wants the time from process start, so it notes when it launched
    the bundle and this notes when the window appeared. Off unless asked for.
    """
    from app.window import main_window

    original = main_window.MainWindow.show

    def show(self):
        original(self)
        if not os.path.exists(path):
            with open(path, "w") as f:
                f.write(f"{time.time():.6f}\n")

    main_window.MainWindow.show = show


if __name__ == "__main__":
    if sys.argv[1:2] == ["--engine"]:
        # The bundle's copy of `python -m engine ...` (chat, info, plan, bench): a way
        # to check the bundle's backends from a terminal without the window.
        from engine.cli import main as engine_main

        sys.exit(engine_main(sys.argv[2:]))
    if os.environ.get("HEARTH_TRACE_WINDOW_SHOWN"):
        _trace_window_shown(os.environ["HEARTH_TRACE_WINDOW_SHOWN"])
    from app.__main__ import main

    sys.exit(main())
