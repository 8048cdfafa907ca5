"""Render a conversation for the model: its own Jinja chat template, a Jinja file, or one of llama.cpp's built-in
formats by name.

A template is code from a downloaded file. Jinja runs sandboxed, as llama-cpp-python runs it (no attribute of Python's
internals, no changing what it is given), and here also bounded: what ``*``, ``**``, ``%`` and the padding filters may
build, how many items all the loops of one rendering may take from ``range``, how deep it may recurse. Whatever goes
wrong inside a template is one line naming the template.
"""

from __future__ import annotations

import ctypes
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import llama_cpp as lc
from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment, safe_range

from ..errors import ConfigError, ModelError, one_line

if TYPE_CHECKING:
    from .llama import Model

# What a GGUF without a template gets unless its profile names one; ChatML is what most small instruct models know.
FALLBACK = "chatml"


def builtin_names() -> list[str]:
    """The chat formats llama.cpp knows by name (``llama_chat_builtin_templates``)."""
    count = lc.llama_chat_builtin_templates(None, 0)
    names = (ctypes.c_char_p * count)()
    lc.llama_chat_builtin_templates(names, count)
    return [name.decode() for name in names]


MAX_BUILT = 1_000_000  # characters or items one expression may build; a chat's prompt is far smaller
MAX_EXPONENT = 256
MAX_LOOP_ITEMS = 1_000_000  # items all range() calls of one rendering may produce together


def _raise(message: str) -> None:
    raise TemplateError(message)


def _too_large(what: str) -> TemplateError:
    return TemplateError(f"{what} would be larger than a template may build ({MAX_BUILT:,})")


def _widths(args: object) -> None:
    """printf-style formatting pads to any width it is given: refuse widths no chat needs."""
    for arg in args if isinstance(args, tuple) else (args,):
        if isinstance(arg, int) and abs(arg) > MAX_BUILT:
            raise _too_large(f"formatting with {arg:,}")


class _BoundedSandbox(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**", "%"})

    def __init__(self) -> None:
        super().__init__(trim_blocks=True, lstrip_blocks=True)
        self.loop_items_left = MAX_LOOP_ITEMS
        del self.globals["lipsum"]  # lipsum(n) writes n paragraphs; no chat template uses it
        self.globals.update(range=self._range, raise_exception=_raise,
                            strftime_now=lambda fmt: datetime.now().strftime(fmt))
        for name in ("center", "indent"):
            self.filters[name] = self._width_checked(self.filters[name])
        self.filters["format"] = self._format

    def _range(self, *args: int) -> range:
        items = safe_range(*args)  # each range() at most jinja's MAX_RANGE long
        self.loop_items_left -= len(items)
        if self.loop_items_left < 0:
            raise TemplateError(f"the template loops over more than {MAX_LOOP_ITEMS:,} items")
        return items

    @staticmethod
    def _width_checked(pad):
        def checked(value, width=80, *args, **kwargs):
            if isinstance(width, int) and width > MAX_BUILT:
                raise _too_large(f"padding to {width:,}")
            return pad(value, width, *args, **kwargs)
        return checked

    def _format(self, value, *args, **kwargs):
        _widths(args)
        return self.call_binop(None, "%", value, args or kwargs)

    def call_binop(self, context, operator: str, left, right):
        if operator == "*":
            for seq, times in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(times, int) and len(seq) * times > MAX_BUILT:
                    raise _too_large(f"repeating {len(seq):,} items {times:,} times")
        elif operator == "**":
            if isinstance(right, (int, float)) and abs(right) > MAX_EXPONENT and not -1 <= left <= 1:
                raise _too_large(f"a power of {right:,}")
        elif operator == "%" and isinstance(left, str):
            _widths(right)
        return super().call_binop(context, operator, left, right)


class ChatTemplate:
    """One way of turning messages into the text the model reads; ``note`` says when it is not the model's own."""

    def __init__(self, jinja: str | None = None, builtin: str | None = None, *, bos_token: str = "",
                 eos_token: str = "", source: str = "", note: str = "") -> None:
        self.builtin, self.bos_token, self.eos_token, self.source, self.note = builtin, bos_token, eos_token, source, note
        self._template = None
        if jinja is not None:
            self._env = _BoundedSandbox()
            try:
                self._template = self._env.from_string(jinja)
            except (TemplateError, RecursionError, MemoryError) as exc:
                raise ModelError(f"the chat template of {source} does not parse ({one_line(exc)}) — name another in"
                                 " the profile's [chat] template") from None

    @classmethod
    def of_model(cls, model: Model, choice: str | None) -> ChatTemplate:
        """``choose`` for a loaded GGUF: its own template and its BOS and EOS as text."""
        def text(token: int) -> str:
            return model.raw_piece(token, special=True).decode("utf-8", "replace")

        return cls.choose(model.chat_template(), choice, model.path.name, bos_token=text(model.bos),
                          eos_token=text(model.eos))

    @classmethod
    def choose(cls, embedded: str | None, choice: str | None, model_name: str, *, bos_token: str,
               eos_token: str) -> ChatTemplate:
        """The profile's ``choice`` (a Jinja file or a llama.cpp name) if any, else the GGUF's own template; a GGUF
        without one gets ChatML, and ``note`` says so."""
        tokens = {"bos_token": bos_token, "eos_token": eos_token}
        if choice is None:
            if embedded:
                return cls(embedded, **tokens, source=f"{model_name}'s own template")
            return cls(builtin=FALLBACK, **tokens, source=FALLBACK, note=(
                f"{model_name} carries no chat template; using {FALLBACK} — if replies look wrong, set [chat] template"
                " in the profile to a Jinja file or one of llama.cpp's names (see: specchat profiles templates)"))
        if choice in builtin_names():
            return cls(builtin=choice, **tokens, source=f"llama.cpp's {choice}")
        path = Path(choice).expanduser()
        if path.suffix in (".jinja", ".j2", ".txt") or path.exists():
            try:
                return cls(path.read_text(encoding="utf-8"), **tokens, source=str(path))
            except (OSError, UnicodeDecodeError) as exc:
                raise ConfigError(f"cannot read the chat template {path}: {exc} — check [chat] template") from None
        raise ConfigError(f"unknown chat template {choice!r} — give a Jinja file or one of llama.cpp's names:"
                          f" {', '.join(builtin_names())}")

    def render(self, messages: list[dict[str, str]], *, add_generation_prompt: bool) -> str:
        if self._template is None:
            return _apply_builtin(self.builtin or FALLBACK, messages, add_generation_prompt)
        self._env.loop_items_left = MAX_LOOP_ITEMS
        try:
            return self._template.render(
                messages=messages,
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
            )
        except Exception as exc:  # noqa: BLE001 — anything a template's code does wrong is the template's problem
            raise ModelError(f"the chat template ({self.source}) rejected this conversation: {one_line(exc)}") from None


def _apply_builtin(name: str, messages: list[dict[str, str]], add_generation_prompt: bool) -> str:
    encoded = [(m["role"].encode(), m["content"].encode()) for m in messages]
    chat = (lc.llama_chat_message * max(len(encoded), 1))()
    for i, (role, content) in enumerate(encoded):
        chat[i].role, chat[i].content = role, content
    size = 256 + sum(len(r) + len(c) for r, c in encoded) * 2
    for _ in range(2):
        buf = ctypes.create_string_buffer(size)
        n = lc.llama_chat_apply_template(name.encode(), chat, len(encoded), add_generation_prompt, buf, size)
        if n < 0:
            raise ModelError(f"llama.cpp's {name} chat format cannot render this conversation")
        if n <= size:
            return buf.raw[:n].decode("utf-8", "replace")
        size = n
    raise ModelError(f"llama.cpp's {name} chat format gave no stable length")
