"""Via: how MainWindow keeps the names its callers use for what its controllers now own."""
from __future__ import annotations


class Via:
    """A window attribute that now belongs to one of its controllers, kept under its old name
    because the window's callers (the library dock, the drivers, tests) use it. Read-only:
    the controller owns it."""

    def __init__(self, controller: str, attr: str = "") -> None:
        self.controller = controller
        self.attr = attr  # the controller's name for it, where that differs from the window's
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.attr = self.attr or name

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return getattr(getattr(obj, self.controller), self.attr)

    def __set__(self, obj, value) -> None:
        raise AttributeError(f"{self.name} belongs to the window's {self.controller}; set it there")
