"""Take the documentation's pictures of each model's own settings and of the window on a laptop screen.

    .venv/bin/python scripts/model_settings_screenshots.py   # offscreen, on a 1366x768 screen:
        assets/settings-sampling.png      Settings → Sampling: each value and the layer it comes from
        assets/settings-model-1366.png    Settings → Model, fitted to the screen (the rest scrolls)
        assets/machines-lost.png          a machine lost mid-reply: one bar, with "Reload without"
        assets/machines-lost-reloaded.png the window after "Reload without": no bar left that is no longer true

All real: the window and the bundled model, a copy of it carrying general.sampling keys (written by gguf-py, as
the tests do), and a llama.cpp RPC worker on loopback that is killed mid-reply (tests/rpc_workers.py). The
screen is Qt's offscreen one, set to 1366x768 by its config file, so the pictures are the same on any machine.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAPTOP = {"screens": [{"name": "laptop", "x": 0, "y": 0, "width": 1366, "height": 768, "logicalDpi": 96,
                       "logicalBaseDpi": 96, "dpr": 1}]}


def _settle(seconds: float = 0.5) -> None:
    from app.window.selftest import wait_until

    wait_until(lambda: False, seconds)


def _save(widget, path: Path) -> None:
    if not widget.grab().save(str(path)):
        raise RuntimeError(f"could not write {path}")
    print(path)


def sampling_pictures(out: Path, scratch: Path) -> None:
    """Settings → Sampling on a model that recommends values, with two of the user's own; Settings → Model."""
    from app.core.model_defaults import with_yours
    from app.core.settings import Settings
    from app.settings_ui.settings_dialog import SettingsDialog
    from engine.models.catalogue import bundled_model_path
    from gguf_copy import QWEN3_SAMPLING, with_metadata
    from offscreen_pictures import open_window

    model = with_metadata(bundled_model_path(), scratch / "Qwen3-style-SmolLM2.gguf", QWEN3_SAMPLING)
    s = Settings(model=str(model), source="gguf")
    s.sampling.update({"presence_penalty": 0.3})  # one of Hearth's defaults, changed for every model
    win = open_window(s, size=(1366, 768))
    win._adopt_settings(with_yours(win.settings, win.host.identity,
                                   {"max_tokens": 4096, "temperature": 0.5, "system_prompt": "Answer briefly."}))
    dlg = SettingsDialog(win.settings, win, identity=win.host.identity, think=win.host.think)
    dlg.show()
    dlg.tabs.setCurrentIndex(1)
    _settle()
    _save(dlg, out / "settings-sampling.png")
    dlg.tabs.setCurrentIndex(0)
    _settle(2.0)  # the memory plan is made off the GUI thread
    _save(dlg, out / "settings-model-1366.png")
    dlg.reject()
    win.close()


def lost_machine_pictures(out: Path, scratch: Path) -> None:
    """A worker killed mid-reply, then the model reloaded without it."""
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest

    from app.core.settings import Settings
    from app.window.selftest import wait_until
    from offscreen_pictures import open_window
    from rpc_workers import start_worker

    endpoint, proc = start_worker(scratch, "worker")
    try:
        s = Settings(workers=(endpoint,))
        s.sampling.update({"temperature": 0.0, "seed": 0, "max_tokens": 300})
        win = open_window(s, size=(1366, 768))
        win.chat.input.setPlainText("Write a very long story about a dragon who learns to bake bread.")
        QTest.keyClick(win.chat.input, Qt.Key.Key_Return)
        if not wait_until(lambda: win.stream is not None and len("".join(win.stream.parts)) > 200, 120.0):
            raise RuntimeError("the reply did not start: " + " | ".join(win.info.messages()))
        proc.kill()
        if not wait_until(lambda: win.stream is None, 60.0):
            raise RuntimeError("the reply did not end")
        _settle()
        _save(win, out / "machines-lost.png")
        offer = next(b for b in win.info.bars() if b.action_button is not None
                     and b.action_button.text().startswith("Reload without"))
        offer.action_button.click()
        if not wait_until(lambda: win.host.ready and win.host.model.runtime != "rpc", 120.0):
            raise RuntimeError("the model did not load again: " + " | ".join(win.info.messages()))
        _settle()
        _save(win, out / "machines-lost-reloaded.png")
        win.close()
    finally:
        proc.kill()
        proc.wait(10)


def main() -> int:
    import argparse

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=str(ROOT / "assets"), help="folder for the pictures")
    p.add_argument("--only", choices=("settings", "machines"), default=None, help="one set of pictures")
    args = p.parse_args()
    out = Path(args.out).resolve()
    with tempfile.TemporaryDirectory(prefix="hearth-model-settings-") as scratch:
        config = Path(scratch) / "laptop-screen.json"
        config.write_text(json.dumps(LAPTOP))
        os.environ["QT_QPA_PLATFORM"] = f"offscreen:configfile={config}"
        os.environ["HEARTH_DATA_DIR"] = str(Path(scratch) / "data")
        sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "scripts")]
        from PySide6.QtWidgets import QApplication

        app = QApplication.instance() or QApplication(sys.argv)
        from app.ui import theme

        theme.apply(app, "light")
        if args.only in (None, "settings"):
            sampling_pictures(out, Path(scratch))
        if args.only in (None, "machines"):
            lost_machine_pictures(out, Path(scratch))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
