"""The conversation as text and as the tokens the target reads; the KV cache mirrors a prefix of those tokens.

Generated tokens are kept as generated: a new turn tokenizes only the text after what the tokens already encode,
because re-tokenizing a reply from its text need not give the same ids. When the context is full the oldest turns
are dropped (the system prompt stays).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ContextError
from .chat_template import ChatTemplate
from .events import ContextTrimmed
from .llama import Model

# Once the context is full, the oldest turns go until this share of it is free beyond the reply's reserve: dropping
# only what the next reply needs would make every later turn trim again and decode its whole prompt anew (llama.cpp's
# context shift frees half for the same reason; here a quarter, to keep more of the chat).
FREED_ON_TRIM = 0.25


@dataclass
class Message:
    role: str
    content: str
    # The tokens the engine generated for an assistant message, so a restored chat sees exactly what was produced.
    tokens: list[int] | None = None
    finish_reason: str | None = None


class Conversation:
    def __init__(self, model: Model, template: ChatTemplate) -> None:
        self.model, self.template = model, template
        self.messages: list[Message] = []
        self.tokens: list[int] = []
        self.rendered = ""  # the text that ``tokens`` encode

    def restore(self, messages: list[Message]) -> bool:
        """Make ``messages`` the conversation (re-tokenized); False when it already was, or when the conversation is
        what trimming left of it (its latest turns, after the same system prompt): the window is kept, so the next
        turn extends the cache instead of trimming the whole chat again."""
        if messages == self.messages or self._trimmed_from(messages):
            return False
        self.messages = list(messages)
        self.tokens, self.rendered = self.rebuild(self.messages)
        return True

    def _trimmed_from(self, messages: list[Message]) -> bool:
        system = [m for m in messages[:1] if m.role == "system"]
        kept = self.messages[len(system):]
        return (bool(kept) and self.messages[:len(system)] == system and kept[0].role == "user"
                and len(kept) < len(messages) - len(system) and messages[len(messages) - len(kept):] == kept)

    def begin_turn(self, kept: list[Message], user: Message, tokens: list[int], rendered: str) -> None:
        """The user's message joins the conversation (after ``kept``, what trimming left), whatever its reply becomes."""
        self.messages = [*kept, user]
        self.tokens, self.rendered = tokens, rendered

    def end_turn(self, text: str, tokens: list[int], finish: str | None) -> None:
        self.messages.append(Message("assistant", text, tokens, finish))
        self.rendered += text

    def _tokenize_full(self, text: str) -> list[int]:
        bos_text = self.template.bos_token
        add_bos = self.model.add_bos and not (bos_text and text.startswith(bos_text))
        return self.model.tokenize(text, add_special=add_bos)

    def extend(self, tokens: list[int], rendered: str, messages: list[Message]) -> tuple[list[int], str]:
        """Tokens and text of ``messages`` (ending with a user turn) plus the assistant prompt, reusing a prefix."""
        full = self.template.render([{"role": m.role, "content": m.content} for m in messages],
                                    add_generation_prompt=True)
        if tokens and full.startswith(rendered):
            return tokens + self.model.tokenize(full[len(rendered):], add_special=False), full
        # Templates that rewrite earlier turns (e.g. Qwen3 dropping old <think> blocks) need a fresh tokenization.
        return self._tokenize_full(full), full

    def rebuild(self, messages: list[Message]) -> tuple[list[int], str]:
        """Tokens and text of a finished conversation, built the same way a live chat builds them."""
        tokens: list[int] = []
        rendered = ""
        for i, message in enumerate(messages):
            if message.role != "assistant":
                continue
            tokens, rendered = self.extend(tokens, rendered, messages[:i])
            generated = message.tokens
            if generated is None or not all(0 <= t < self.model.n_vocab for t in generated):
                # Never generated here, or stored ids this model does not have (a damaged record): its text it is.
                generated = self.model.tokenize(message.content, add_special=False)
            tokens = tokens + generated
            rendered += message.content
        return tokens, rendered

    def prompt(self, user: Message, reserve: int, n_ctx: int) -> tuple[list[int], str, list[Message], ContextTrimmed | None]:
        """The tokens to answer ``user`` with; when ``reserve`` tokens of reply do not fit, the oldest turns go (see
        ``FREED_ON_TRIM``).

        Returns the tokens, their text, the history kept (without ``user``) and what was dropped, if anything.
        """
        history = self.messages + [user]
        tokens, rendered = self.extend(self.tokens, self.rendered, history)
        before = len(tokens)
        dropped = 0
        limit = n_ctx if len(tokens) + reserve <= n_ctx else int(n_ctx * (1 - FREED_ON_TRIM))
        while len(tokens) + reserve > limit:
            keep_from = next((i for i, m in enumerate(history) if m.role != "system"), 0)
            turn_end = next((i for i in range(keep_from + 1, len(history)) if history[i].role == "user"), None)
            if turn_end is None:
                break  # only the system prompt and this message are left
            dropped += turn_end - keep_from
            history = history[:keep_from] + history[turn_end:]
            base_tokens, base_text = self.rebuild(history[:-1])
            tokens, rendered = self.extend(base_tokens, base_text, history)
        if len(tokens) >= n_ctx:
            raise ContextError(
                f"the prompt needs {len(tokens)} tokens but the context holds {n_ctx} — raise n_ctx in the profile"
                " or shorten the message"
            )
        trimmed = ContextTrimmed(dropped, before, len(tokens), n_ctx) if dropped else None
        return tokens, rendered, history[:-1], trimmed
