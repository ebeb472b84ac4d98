"""What the documentation's picture scripts share: ``--out`` and ``--dark``, the offscreen Qt app, and a
scratch data folder per theme that is deleted afterwards (``HEARTH_DATA_DIR`` points at it)."""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent


def take_pictures(doc: str, take: Callable[[Path, Path, str, argparse.Namespace], None], *, prefix: str,
                  more: Callable[[argparse.ArgumentParser], None] | None = None) -> int:
    """Parse the command line (``more`` adds a script's own options), then call
    ``take(out, scratch, theme, args)`` for the light theme, and the dark one with ``--dark``."""
    p = argparse.ArgumentParser(description=doc.split("\n")[0])
    p.add_argument("--out", default=str(ROOT / "assets"), help="folder for the pictures")
    p.add_argument("--dark", action="store_true", help="the dark theme too")
    if more is not None:
        more(p)
    args = p.parse_args()
    out = Path(args.out).resolve()
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # the tests' helpers: PDFs, template copies, MCP server
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv)
    from app.ui import theme

    for t in ("light", "dark") if args.dark else ("light",):
        theme.apply(app, t)
        with tempfile.TemporaryDirectory(prefix=prefix) as scratch:
            os.environ["HEARTH_DATA_DIR"] = scratch
            take(out, Path(scratch), t, args)
    return 0


def open_window(settings, *, size: tuple[int, int] = (1280, 800)):
    """Save ``settings``, then a shown MainWindow whose model has loaded, at ``size``."""
    from app.core.settings import SettingsFile
    from app.window.main_window import MainWindow
    from app.window.selftest import wait_until

    SettingsFile().save(settings)
    win = MainWindow()
    win.show()
    win.start()
    if not wait_until(lambda: win.host.ready or not win.host.loading, 120.0) or not win.host.ready:
        raise RuntimeError("the model did not load: " + " | ".join(win.info.messages()))
    win.resize(*size)
    return win
