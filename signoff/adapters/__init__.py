"""One sub-package per approval surface."""

from __future__ import annotations

import importlib
from collections.abc import Callable

__all__ = ["lazy_surface"]


def lazy_surface(package: str, name: str) -> Callable[[str], object]:
    """The module ``__getattr__`` of a surface's package: ``from <package> import <name>``
    keeps working, yet ``<package>.surface`` (and the SDK it brings) is imported only
    then, so loading the plug-in with the config file imports none of it."""
    def __getattr__(attr: str) -> object:
        if attr == name:
            return getattr(importlib.import_module(f"{package}.surface"), name)
        raise AttributeError(f"module {package!r} has no attribute {attr!r}")

    return __getattr__
