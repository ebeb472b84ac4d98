"""Defects found using Hearth as a new user (issue #41): the run command names Qt's missing X11
libraries before Qt fails, the attach button draws without an emoji font, the status bar cuts its
line between parts instead of mid-word, and attaching a pipe or a device never hangs."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from app.core import qt_platform
from app.ui.part_label import MORE, SEP, fit_parts
from engine.inputs.documents import MAX_FILE_BYTES, DocumentError, read_file

ROOT = Path(__file__).resolve().parent.parent

# What ldd printed for Qt's xcb plugin on a Debian 12 machine without two of the libraries.
LDD = """\tlinux-vdso.so.1 (0x00007ffc8e5f7000)
\tlibQt6XcbQpa.so.6 => /x/PySide6/Qt/lib/libQt6XcbQpa.so.6 (0x00007f0a1b000000)
\tlibxcb-icccm.so.4 => not found
\tlibxcb-keysyms.so.1 => not found
\tlibxkbcommon-x11.so.0 => /lib/x86_64-linux-gnu/libxkbcommon-x11.so.0 (0x00007f0a1aff0000)
\tlibxcb-icccm.so.4 => not found
"""


# -- the run command names the packages before Qt fails ------------------------------------

def test_missing_libraries_are_read_from_the_linkers_answer():
    assert qt_platform.not_found(LDD) == ["libxcb-icccm.so.4", "libxcb-keysyms.so.1"]
    line = qt_platform.advice(["libxcb-icccm.so.4", "libxcb-keysyms.so.1", "libfoo.so.2"])
    assert "\n" not in line and "libxcb-icccm.so.4, libxcb-keysyms.so.1, libfoo.so.2" in line
    assert "apt-get install libxcb-icccm4 libxcb-keysyms1" in line


def test_the_check_runs_only_where_qt_will_use_x11():
    assert qt_platform.uses_xcb({"QT_QPA_PLATFORM": "xcb"}, "linux")
    assert qt_platform.uses_xcb({}, "linux")
    assert not qt_platform.uses_xcb({"QT_QPA_PLATFORM": "offscreen"}, "linux")
    assert not qt_platform.uses_xcb({"WAYLAND_DISPLAY": "wayland-0"}, "linux")  # Qt tries Wayland first
    assert not qt_platform.uses_xcb({}, "darwin") and not qt_platform.uses_xcb({}, "win32")


def _plugin_missing_a_library(folder: Path) -> Path:
    """A real shared library named like Qt's xcb plugin, linked against a library that is then taken away."""
    lib, plugin = folder / "libhearthgone.so.1", folder / "platforms" / "libqxcb.so"
    plugin.parent.mkdir()
    (folder / "gone.c").write_text("int hearth_gone(void) { return 1; }\n")
    (folder / "plugin.c").write_text("int hearth_gone(void);\nint plugin(void) { return hearth_gone(); }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), "-Wl,-soname,libhearthgone.so.1",
                    str(folder / "gone.c")], check=True)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(plugin), str(folder / "plugin.c"), str(lib)], check=True)
    lib.unlink()
    return plugin


def test_the_app_names_the_missing_library_before_qt_starts(tmp_path):
    _plugin_missing_a_library(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY")}
    env.update(QT_QPA_PLATFORM="xcb", QT_QPA_PLATFORM_PLUGIN_PATH=str(tmp_path / "platforms"), DISPLAY=":99",
               HEARTH_DATA_DIR=str(tmp_path / "data"))
    r = subprocess.run([sys.executable, "-m", "app"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert "libhearthgone.so.1" in r.stderr and "could not load the Qt platform plugin" not in r.stderr
    assert len([ln for ln in r.stderr.splitlines() if ln.strip()]) == 1, r.stderr  # one line, no traceback


def test_the_real_plugin_is_checked_the_way_the_linker_sees_it():
    plugin = qt_platform.xcb_plugin({})
    assert plugin is not None and plugin.name == "libqxcb.so"
    ldd = subprocess.run(["ldd", str(plugin)], capture_output=True, text=True).stdout
    assert qt_platform.missing({}) == qt_platform.not_found(ldd)  # whatever this machine lacks, it is named


# -- the attach button ---------------------------------------------------------------------

def test_the_attach_button_is_an_icon_that_ships_with_the_app(qtbot):
    from app.chat.attach_tray import AttachTray

    tray = AttachTray()
    qtbot.addWidget(tray)
    icon = tray.button.icon()
    assert tray.button.text() == "" and not icon.isNull()
    image = icon.pixmap(24, 24).toImage()
    drawn = sum(1 for x in range(24) for y in range(24) if image.pixelColor(x, y).alpha() > 0)
    assert drawn > 20  # the paperclip is there, without any font


# -- the status bar ------------------------------------------------------------------------

def test_a_line_is_cut_between_its_parts():
    width = len  # one pixel per character
    text = SEP.join(["12.3 tok/s", "TTFT 40 ms", "cached 10/20 prompt tokens", "draft acceptance (71%)"])
    assert fit_parts(text, 1000, width) == text
    cut = fit_parts(text, 40, width)
    assert cut == SEP.join(["12.3 tok/s", "TTFT 40 ms"]) + MORE and len(cut) <= 40
    assert fit_parts(text, 3, width) == "12.3 tok/s" + MORE  # the first part always stays


def test_the_status_bar_never_cuts_mid_word(qtbot, make_window):
    """At 1400 pixels the whole line shows; narrower, whole parts and "…" (the rest in the tooltip)."""
    from PySide6.QtWidgets import QApplication

    w = make_window()
    line = SEP.join(["87.5 tok/s", "TTFT 123 ms", "cached 1234/5678 prompt tokens", "draft acceptance 71%"])
    w.stats_label.setText(line)
    w.replies.context_label.setText("context 5,678 of 8,192 tokens (69%)")
    for width, whole in ((1400, True), (900, False)):
        w.resize(width, 800)
        w.statusBar().layout().activate()  # lay the bar out now: the labels' widths are final after this
        QApplication.processEvents()
        assert w.statusBar().width() == width
        for label in (w.stats_label, w.model_label):
            shown = label.shown_text()
            room = label.contentsRect().width()
            assert label.fontMetrics().horizontalAdvance(shown) <= room, (width, shown, room)
            full = label.text()
            assert shown == full or (shown.endswith(MORE) and full.startswith(shown[:-len(MORE)] + SEP))
            if shown != full:
                assert full in label.toolTip()  # the whole line is one hover away
        assert (w.stats_label.shown_text() == line) is whole


# -- attaching what is not a regular file ----------------------------------------------------

def _returns_promptly(fn, seconds: float = 10.0):
    out: list = []
    t = threading.Thread(target=lambda: out.append(_outcome(fn)), daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "read_file did not return"
    return out[0]


def _outcome(fn):
    try:
        return fn()
    except Exception as e:  # the test looks at what it was
        return e


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "link_to_fifo", "link_to_dev_zero"])
def test_read_file_refuses_anything_but_a_regular_file(tmp_path, kind):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    target = {"fifo": fifo, "dev_zero": Path("/dev/zero")}[kind.replace("link_to_", "")]
    path = target
    if kind.startswith("link_to_"):
        path = tmp_path / "link.txt"
        path.symlink_to(target)
    got = _returns_promptly(lambda: read_file(path))
    assert isinstance(got, DocumentError) and "not a regular file" in str(got)


def test_read_file_reads_no_more_than_the_cap(tmp_path):
    big = tmp_path / "big.txt"
    with open(big, "wb") as f:
        f.truncate(MAX_FILE_BYTES + 1)  # sparse: nothing written
    got = _returns_promptly(lambda: read_file(big))
    assert isinstance(got, DocumentError) and "Hearth attaches files up to 64 MB" in str(got)
    ok = tmp_path / "ok.md"
    ok.write_text("# Fine\n\nA regular file is read as before.\n")
    assert "A regular file is read as before." in read_file(ok).text
