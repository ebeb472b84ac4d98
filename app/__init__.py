"""Hearth's desktop window (PySide6), grouped by job: core/ (Qt-free), bridge/ (threads),
ui/ (shared widgets), window/, chat/, library/, settings_ui/, performance/."""
