"""Where draft tokens come from. Each module of this package that defines ``METHOD`` (a ``base.Method``) is one
speculation method: ``model`` (a smaller model), ``ngram`` (earlier text), ``combined`` (both), ``mtp`` (the target's
own heads, on a llama.cpp server). They are found here, so a new method is one new module (README: "Adding a
drafter")."""

from __future__ import annotations

import importlib
import pkgutil

from .base import NO_DRAFT, Draft, Drafter, Method, Parts

__all__ = ["METHODS", "NO_DRAFT", "Draft", "Drafter", "Method", "Parts"]

PLAIN = Method("none", "plain decoding: the target alone", "none")


def _found() -> dict[str, Method]:
    methods = [PLAIN]
    for module in pkgutil.iter_modules(__path__):
        found = getattr(importlib.import_module(f"{__name__}.{module.name}"), "METHOD", None)
        if isinstance(found, Method):
            methods.append(found)
    names = [m.name for m in methods]
    if len(set(names)) != len(names):
        raise ImportError(f"two drafter modules name the same method: {sorted(names)}")
    # The order of every list and error that names them: "none", those specchat runs by name, then the server's.
    return {m.name: m for m in [PLAIN, *sorted(methods[1:], key=lambda m: (bool(m.server_only), m.name))]}


METHODS: dict[str, Method] = _found()

