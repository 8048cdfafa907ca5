"""Where draft tokens come from. Each module of this package that defines ``METHOD`` (a ``base.Method``) is one
speculation method: ``model`` (a smaller model), ``ngram`` (earlier text), ``combined`` (both), ``suffix`` (earlier
text and the stored chats), ``suffix_draft`` (those and a smaller model), ``mtp`` (the target's own heads, on a
llama.cpp server). They are found here (``discovery``), so a new method is one new module (docs/extending.md:
"Adding a drafter")."""

from __future__ import annotations

from ...discovery import declared_in
from .base import NO_DRAFT, Draft, Drafter, Method, Parts

__all__ = ["METHODS", "NO_DRAFT", "Draft", "Drafter", "Method", "Parts"]

PLAIN = Method("none", "plain decoding: the target alone", "none")


def _found() -> dict[str, Method]:
    methods = [PLAIN, *declared_in(__name__, "METHOD", Method, lambda m: m.name, "drafter")]
    if len({m.name for m in methods}) != len(methods):
        raise ImportError(f"a drafter module names the built-in method {PLAIN.name!r}")
    # The order of every list and error that names them: "none", those specchat runs by name, then the server's.
    return {m.name: m for m in [PLAIN, *sorted(methods[1:], key=lambda m: (bool(m.server_only), m.name))]}


METHODS: dict[str, Method] = _found()

