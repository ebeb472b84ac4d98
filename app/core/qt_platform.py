"""Before Qt starts on Linux: the system libraries its X11 plugin needs, and the packages that bring them.

Without one of them, Qt stops with "could not load the Qt platform plugin "xcb"" and a list of
plugins, and never says which library is missing. Hearth asks first, with the dynamic linker's
own answer (``ldd`` on the plugin Qt would load), and names the packages in one line. Qt-free:
this runs before PySide6's widgets are imported.
"""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

# A library the xcb plugin links, and the Debian/Ubuntu package that ships it.
PACKAGES = {
    "libxcb-cursor.so.0": "libxcb-cursor0", "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-keysyms.so.1": "libxcb-keysyms1", "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
    "libxkbcommon.so.0": "libxkbcommon0", "libxcb-image.so.0": "libxcb-image0",
    "libxcb-render-util.so.0": "libxcb-render-util0", "libxcb-shape.so.0": "libxcb-shape0",
    "libxcb-randr.so.0": "libxcb-randr0", "libxcb-xkb.so.1": "libxcb-xkb1", "libxcb-sync.so.1": "libxcb-sync1",
    "libxcb-xfixes.so.0": "libxcb-xfixes0", "libxcb-shm.so.0": "libxcb-shm0", "libxcb-util.so.1": "libxcb-util1",
    "libX11-xcb.so.1": "libx11-xcb1", "libxcb.so.1": "libxcb1", "libEGL.so.1": "libegl1",
    "libGL.so.1": "libgl1", "libOpenGL.so.0": "libopengl0", "libfontconfig.so.1": "libfontconfig1",
    "libdbus-1.so.3": "libdbus-1-3", "libglib-2.0.so.0": "libglib2.0-0",
}


def uses_xcb(env: Mapping[str, str] = os.environ, platform: str = sys.platform) -> bool:
    """Whether Qt will start its X11 (xcb) plugin: on Linux, asked for by name, or by default
    where no Wayland session is there for Qt to try first."""
    if not platform.startswith("linux"):
        return False
    chosen = env.get("QT_QPA_PLATFORM", "").split(";")[0].split(":")[0]
    if chosen:
        return chosen == "xcb"
    return not env.get("WAYLAND_DISPLAY")


def xcb_plugin(env: Mapping[str, str] = os.environ) -> Path | None:
    """The xcb plugin Qt would load: from QT_QPA_PLATFORM_PLUGIN_PATH when set, else PySide6's own."""
    folders = [Path(p) for p in env.get("QT_QPA_PLATFORM_PLUGIN_PATH", "").split(os.pathsep) if p]
    if not folders:
        import importlib.util

        spec = importlib.util.find_spec("PySide6")
        if spec is None or not spec.submodule_search_locations:
            return None
        folders = [Path(loc) / "Qt" / "plugins" / "platforms" for loc in spec.submodule_search_locations]
    for folder in folders:
        if (folder / "libqxcb.so").is_file():
            return folder / "libqxcb.so"
    return None


def not_found(ldd_output: str) -> list[str]:
    """The libraries ldd could not find, each once, in the order it named them."""
    out: list[str] = []
    for line in ldd_output.splitlines():
        name, sep, where = line.strip().partition(" => ")
        if sep and where.strip() == "not found" and name not in out:
            out.append(name)
    return out


def missing(env: Mapping[str, str] = os.environ) -> list[str]:
    """The libraries Qt's xcb plugin needs and this system lacks (empty: none, or nothing to ask)."""
    plugin = xcb_plugin(env)
    if plugin is None:
        return []
    try:
        out = subprocess.run(["ldd", str(plugin)], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return []  # no ldd to ask: Qt's own message is all there is
    return not_found(out)


def advice(libraries: list[str]) -> str:
    """One line: what is missing, and the command that installs it on Debian or Ubuntu."""
    packages = [PACKAGES[lib] for lib in libraries if lib in PACKAGES]
    line = f"Hearth's window needs Qt's X11 libraries; missing: {', '.join(libraries)}."
    if packages:
        line += f" On Debian or Ubuntu: sudo apt-get install {' '.join(packages)}"
    return line
