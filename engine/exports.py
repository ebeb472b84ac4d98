"""A public package's lazy exports (PEP 562): each name is imported from its module when it is asked.

The app uses the engine through its face: ``engine`` and a few public packages (docs/layout.md, "The
engine's face"). A package's ``__init__`` that imported every module it exports would make a use of one
module load all the others (a dictation import pulling in the whole server), and could turn the
package ladder into a circle; so a public package lists where each name lives, and
``__getattr__ = lazy_exports(__name__, WHERE)`` fetches it on use. The name is not kept in the
package, so it always reads its module's own attribute (what a test that patches the module sees).
"""
from __future__ import annotations

from importlib import import_module
from typing import Any, Callable, Mapping


def lazy_exports(package: str, where: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``where`` maps each public name to ``".module"`` (the
    same name there) or ``".module:name"`` (another name there), relative to ``package``."""
    def __getattr__(name: str) -> Any:
        try:
            module, _, attr = where[name].partition(":")
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        return getattr(import_module(module, package), attr or name)

    return __getattr__
