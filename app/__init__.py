"""Hearth's desktop window (PySide6). Qt-free parts: store.py, settings.py, paths.py."""
