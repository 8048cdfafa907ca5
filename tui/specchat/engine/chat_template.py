"""Render a conversation with the model's own Jinja chat template, sandboxed as llama-cpp-python does."""

from __future__ import annotations

from datetime import datetime

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ..errors import ModelError

# Used only when a GGUF carries no template; ChatML is what most small instruct models were tuned on.
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def _raise(message: str) -> None:
    raise TemplateError(message)


class ChatTemplate:
    def __init__(self, source: str | None, *, bos_token: str, eos_token: str) -> None:
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals.update(raise_exception=_raise, strftime_now=lambda fmt: datetime.now().strftime(fmt))
        try:
            self._template = env.from_string(source or CHATML)
        except TemplateError as exc:
            raise ModelError(f"the model's chat template does not parse ({exc}) — use another GGUF") from None
        self.bos_token = bos_token
        self.eos_token = eos_token

    def render(self, messages: list[dict[str, str]], *, add_generation_prompt: bool) -> str:
        try:
            return self._template.render(
                messages=messages,
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
            )
        except TemplateError as exc:
            raise ModelError(f"the model's chat template rejected this conversation: {exc}") from None
