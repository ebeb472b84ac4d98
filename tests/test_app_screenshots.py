"""``--screenshot PATH --show library``: the documentation's picture of the model library, taken the
way the README says, in the real window (offscreen) with a scratch data and models folder."""
from __future__ import annotations

from PySide6.QtGui import QImage

from app.window import selftest
from app.__main__ import _parser
from app.library.library_view import FIT_COL
from engine.library import local as lib


def test_show_library_screenshot_pictures_the_open_dock_with_the_bundled_model(qtbot, tmp_path, monkeypatch,
                                                                               bundled_path):
    args = _parser().parse_args(["--screenshot", str(tmp_path / "x.png"), "--show", "library"])
    assert (args.show, args.search) == ("library", "GGUF")
    for var, sub in (("HEARTH_DATA_DIR", "data"), ("HEARTH_MODEL_DIR", "models"), ("HF_HUB_CACHE", "hf")):
        monkeypatch.setenv(var, str(tmp_path / sub))
    seen: dict = {}
    real_show = selftest.show_models

    def watch(win, page, search="GGUF", timeout_s=120.0):  # what the window shows just before the grab
        real_show(win, page, search, timeout_s)
        dock = win.models_dock
        view = dock.library_view
        seen.update(visible=dock.isVisible(), tab=dock.tabs.currentWidget() is view, rows=view.table.rowCount(),
                    names=[m.path for m in view.models], fit=view.table.item(0, FIT_COL).text()
                    if view.table.rowCount() else None, dock_width=dock.width(), width=win.width())

    monkeypatch.setattr(selftest, "show_models", watch)
    png = tmp_path / "library.png"
    assert selftest.take_screenshot(str(png), theme="light", show="library") == 0
    assert seen["visible"] and seen["tab"]
    assert seen["names"] == [bundled_path] and seen["rows"] == 1
    assert seen["fit"] in (lib.FIT_GPU, lib.FIT_OFFLOAD, lib.FIT_CPU)   # planned, not "…"
    assert seen["dock_width"] > seen["width"] // 2                     # the dock is the picture's subject
    img = QImage(str(png))
    assert (img.width(), img.height()) == (1600, 900)
    colours = {img.pixel(x, y) for x in range(0, img.width(), 7) for y in range(0, img.height(), 7)}
    assert len(colours) > 20                                           # not a blank or one-colour frame
