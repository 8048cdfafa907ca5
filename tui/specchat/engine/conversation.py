"""The conversation as text and as the tokens the target reads; the KV cache mirrors a prefix of those tokens.

Generated tokens are kept as generated: a new turn tokenizes only the text after what the tokens already encode,
because re-tokenizing a reply from its text need not give the same ids. When the context is full the oldest turns
are dropped (the system prompt stays).
"""

from __future__ import annotations

import hashlib
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


@dataclass(frozen=True)
class ChatKey:
    """Which stored chat a reply is in (``id`` None: none — a script's, a benchmark's) and whether the chat is private:
    a private chat's replies are never kept for drafting in another chat, and a chat's kept replies go when it is
    forgotten (``Forgotten``)."""

    id: int | None = None
    private: bool = False


UNSTORED = ChatKey()  # a reply in no stored chat (``ask``, ``bench``): kept for drafting, forgotten with nothing
NOT_KEPT = ChatKey(private=True)  # a reply kept for no other chat (A/B's plain arm: the same prompt once more)


@dataclass(frozen=True)
class Forgotten:
    """What left the stored chats — a chat deleted or made private (``messages`` None), or messages of one deleted — and
    is never drafted from again: not from the index over them, not from what this process kept of their replies."""

    chat: int
    messages: frozenset[int] | None = None


def as_dicts(messages: list[Message]) -> list[dict[str, str]]:
    """Messages as a chat template or a chat-completions request takes them."""
    return [{"role": m.role, "content": m.content} for m in messages]


@dataclass(frozen=True)
class WindowState:
    """Everything a ``TokenWindow`` holds, to put back after a detour (an A/B rerun) without re-tokenizing."""

    messages: tuple[Message, ...]
    tokens: tuple[int, ...]
    rendered: str
    head_len: int
    head: hashlib.blake2b


class TokenWindow:
    """The chat as the target reads it: the messages in its context window, their tokens and their text (the chat
    itself, as saved and shown, is ``chats.session.ChatSession``)."""

    def __init__(self, model: Model, template: ChatTemplate) -> None:
        self.model, self.template = model, template
        self.messages: list[Message] = []
        self.tokens: list[int] = []
        self.rendered = ""  # the text that ``tokens`` encode
        # The chat's messages before this window (its system prompt, then what trimming dropped): how many, and a
        # fingerprint — enough to recognise the chat when a front end passes it whole, without keeping it.
        self._head_len = 0
        self._head = _fingerprint([])

    def restore(self, messages: list[Message]) -> bool:
        """Make ``messages`` the conversation (re-tokenized); False when it already was.

        Once trimming has dropped turns, front ends still pass the whole chat: what is kept then is this
        conversation's window onto it — the system prompt and the turns after those dropped — so the next turn
        extends the cache instead of trimming the whole chat again, and the chat passed up to an earlier question
        (regenerating, an A/B rerun) gets the window that question was answered in, hence the same prompt.
        """
        window = self._window_onto(messages)
        if (window or messages) == self.messages:
            return False
        if window is None:
            self.messages, self._head_len, self._head = list(messages), 0, _fingerprint([])
        else:
            self.messages = window
        self.tokens, self.rendered = self.rebuild(self.messages)
        return True

    def _window_onto(self, messages: list[Message]) -> list[Message] | None:
        if not self._head_len or len(messages) <= self._head_len:
            return None
        if _fingerprint(messages[:self._head_len]).digest() != self._head.digest():
            return None
        return [*self._system(), *messages[self._head_len:]]

    def _system(self) -> list[Message]:
        return [m for m in self.messages[:1] if m.role == "system"]

    def begin_turn(self, kept: list[Message], user: Message, tokens: list[int], rendered: str) -> None:
        """The user's message joins the conversation (after ``kept``, what trimming left), whatever its reply becomes."""
        dropped = len(self.messages) - len(kept)  # kept: the system prompt and the latest turns
        if dropped:
            system = self._system()
            if not self._head_len:
                self._head, self._head_len = _fingerprint(system), len(system)
            for message in self.messages[len(system):len(system) + dropped]:
                _add(self._head, message)
            self._head_len += dropped
        self.messages = [*kept, user]
        self.tokens, self.rendered = tokens, rendered

    def generated(self, token: int) -> None:
        """A token of the reply in progress joins the conversation (every backend calls this as it emits)."""
        self.tokens.append(token)

    def end_turn(self, text: str, tokens: list[int], finish: str | None) -> None:
        self.messages.append(Message("assistant", text, tokens, finish))
        self.rendered += text

    def snapshot(self) -> WindowState:
        return WindowState(tuple(self.messages), tuple(self.tokens), self.rendered, self._head_len, self._head.copy())

    def resume(self, state: WindowState) -> None:
        """Back to ``snapshot``'s state, trimmed window included (the KV cache catches up at the next prefill)."""
        self.messages, self.tokens, self.rendered = list(state.messages), list(state.tokens), state.rendered
        self._head_len, self._head = state.head_len, state.head.copy()

    def _tokenize_full(self, text: str) -> list[int]:
        bos_text = self.template.bos_token
        add_bos = self.model.add_bos and not (bos_text and text.startswith(bos_text))
        return self.model.tokenize(text, add_special=add_bos)

    def extend(self, tokens: list[int], rendered: str, messages: list[Message]) -> tuple[list[int], str]:
        """Tokens and text of ``messages`` (ending with a user turn) plus the assistant prompt, reusing a prefix."""
        full = self.template.render(as_dicts(messages), add_generation_prompt=True)
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
            if generated is None or not all(0 <= t < self.model.n_vocab for t in generated) \
                    or (not generated and message.content):
                # Never generated here, or stored ids this model does not have (a damaged record): its text it is.
                generated = self.model.tokenize(message.content, add_special=False)
            tokens = tokens + generated
            rendered += message.content
        return tokens, rendered

    def prompt(self, user: Message, reserve: int, n_ctx: int) -> tuple[list[int], str, list[Message], ContextTrimmed | None]:
        """The tokens to answer ``user`` with; when ``reserve`` tokens of reply do not fit, the oldest turns go (see
        ``FREED_ON_TRIM``).

        Returns the tokens, their text, the messages kept (without ``user``) and what was dropped, if anything.
        """
        messages = self.messages + [user]
        tokens, rendered = self.extend(self.tokens, self.rendered, messages)
        before = len(tokens)
        dropped = 0
        limit = n_ctx if len(tokens) + reserve <= n_ctx else int(n_ctx * (1 - FREED_ON_TRIM))
        while len(tokens) + reserve > limit:
            keep_from = next((i for i, m in enumerate(messages) if m.role != "system"), 0)
            turn_end = next((i for i in range(keep_from + 1, len(messages)) if messages[i].role == "user"), None)
            if turn_end is None:
                break  # only the system prompt and this message are left
            dropped += turn_end - keep_from
            messages = messages[:keep_from] + messages[turn_end:]
            base_tokens, base_text = self.rebuild(messages[:-1])
            tokens, rendered = self.extend(base_tokens, base_text, messages)
        if len(tokens) >= n_ctx:
            raise ContextError(
                f"the prompt needs {len(tokens)} tokens but the context holds {n_ctx} — raise n_ctx in the profile"
                " or shorten the message"
            )
        trimmed = ContextTrimmed(dropped, before, len(tokens), n_ctx) if dropped else None
        return tokens, rendered, messages[:-1], trimmed


def _add(fingerprint: hashlib.blake2b, message: Message) -> None:
    fingerprint.update(repr((message.role, message.content, message.tokens)).encode())


def _fingerprint(messages: list[Message]) -> hashlib.blake2b:
    fingerprint = hashlib.blake2b(digest_size=16)
    for message in messages:
        _add(fingerprint, message)
    return fingerprint
