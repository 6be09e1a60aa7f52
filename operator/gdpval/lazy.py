"""Package names that load on first use (PEP 562), so importing a package for one command stays cheap."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def loader(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` that imports each name of `homes` (name -> module) when first asked for."""

    def get(name: str) -> Any:
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(import_module(homes[name]), name)

    return get
