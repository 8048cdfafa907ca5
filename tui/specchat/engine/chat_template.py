"""Render a conversation for the model: its own Jinja chat template, a Jinja file, or one of llama.cpp's built-in
formats by name. Jinja runs sandboxed, as llama-cpp-python runs it."""

from __future__ import annotations

import ctypes
from datetime import datetime
from pathlib import Path

import llama_cpp as lc
from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ..errors import ConfigError, ModelError

# What a GGUF without a template gets unless its profile names one; ChatML is what most small instruct models know.
FALLBACK = "chatml"


def builtin_names() -> list[str]:
    """The chat formats llama.cpp knows by name (``llama_chat_builtin_templates``)."""
    count = lc.llama_chat_builtin_templates(None, 0)
    names = (ctypes.c_char_p * count)()
    lc.llama_chat_builtin_templates(names, count)
    return [name.decode() for name in names]


def _raise(message: str) -> None:
    raise TemplateError(message)


class ChatTemplate:
    """One way of turning messages into the text the model reads; ``note`` says when it is not the model's own."""

    def __init__(self, jinja: str | None = None, builtin: str | None = None, *, bos_token: str = "",
                 eos_token: str = "", source: str = "", note: str = "") -> None:
        self.builtin, self.bos_token, self.eos_token, self.source, self.note = builtin, bos_token, eos_token, source, note
        self._template = None
        if jinja is not None:
            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
            env.globals.update(raise_exception=_raise, strftime_now=lambda fmt: datetime.now().strftime(fmt))
            try:
                self._template = env.from_string(jinja)
            except TemplateError as exc:
                raise ModelError(f"the chat template of {source} does not parse ({exc}) — name another in the"
                                 " profile's [chat] template") from None

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
        try:
            return self._template.render(
                messages=messages,
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
            )
        except TemplateError as exc:
            raise ModelError(f"the chat template ({self.source}) rejected this conversation: {exc}") from None


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
