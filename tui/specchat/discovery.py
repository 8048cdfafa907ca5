"""Finding what a package's modules declare: each module of a package that defines ``attribute`` as an instance of a
class adds one (a drafter's ``METHOD``, a backend's ``KIND``), so a new one is one new module."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import TypeVar

Declared = TypeVar("Declared")


def declared_in(package: str, attribute: str, kind: type[Declared], name: Callable[[Declared], str],
                what: str) -> list[Declared]:
    """What the modules of ``package`` declare as ``attribute``, in module order; two with one ``name`` are an error
    (``what`` names them in it)."""
    found = []
    for module in pkgutil.iter_modules(importlib.import_module(package).__path__):
        value = getattr(importlib.import_module(f"{package}.{module.name}"), attribute, None)
        if isinstance(value, kind):
            found.append(value)
    names = [name(value) for value in found]
    if len(set(names)) != len(names):
        raise ImportError(f"two {what} modules name the same one: {sorted(names)}")
    return found
