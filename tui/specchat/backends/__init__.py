"""Where replies come from: one protocol for every way of running a model, the in-process engine first.

A backend turns a conversation and a configuration into the engine's event stream (see ``engine.events``). The chat
app, ``specchat ask``, ``specchat repl`` and ``specchat bench`` depend on this protocol only, never on what is behind it.
Each kind of backend is a module of this package that defines ``KIND`` (``kinds.BackendKind``): how it opens and what
it can do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

from ..engine.conversation import UNSTORED, ChatKey, Forgotten, Message
from ..engine.drafters.stored_chats import StoredChats
from ..engine.events import Event, SpeculationState
from ..engine.reference import PlainReference
from ..errors import SpecchatError, SwitchFailed
from .run_config import RunConfig


class Backend(Protocol):
    config: RunConfig

    @property
    def target_id(self) -> str:
        """Identity of the target model: whose token ids a reply's are (they are fed back to that model only)."""

    @property
    def notes(self) -> list[str]:
        """What the configuration does differently from what it says, one line each."""

    @property
    def cpu_only(self) -> str:
        """GPU layers asked for that this backend's llama.cpp build runs on the CPU: the line that says so and names
        the fix (``offload.cpu_only_warning``); "" otherwise. One of ``notes`` too."""

    @property
    def draft_length(self) -> int:
        """The draft length in use (0 without speculation): the cap when it is fixed, "auto"'s latest choice (the cap
        itself is the configuration's ``spec.n_max``)."""

    @property
    def where(self) -> str:
        """Where the model runs, for the sidebar: in this process, or a server's pid and URL."""

    @property
    def pid(self) -> int | None:
        """The process that holds the model, when it is not this one (its memory is the model's)."""

    rejected_tails: bool  # whether DraftRejected events carry the rejected tokens (a server only counts them)
    no_reference: str  # why the last plain_reference() gave None, and what would measure one ("" when it measured)

    def answer(self, earlier: list[Message], text: str, *, max_tokens: int,
               should_stop: Callable[[], bool] = lambda: False, top: int = 0,
               chat: ChatKey = UNSTORED) -> Iterator[Event]:
        """Reply to ``text`` after ``earlier`` (the conversation before it, system prompt first), as events. With
        ``top``, each token carries a ``Judgement``: the target's ``top`` best candidates at its position (for the
        token inspector), and what this backend cannot tell about it. ``chat``: the stored chat the reply is in —
        nothing of a private chat is drafted in another."""

    def apply(self, config: RunConfig) -> str:
        """Switch configuration with the least work; returns what was done ("parameters", "draft reloaded",
        "full reload"). A failed switch keeps the previous configuration."""

    def speculation_state(self) -> SpeculationState: ...

    def plain_reference(self) -> PlainReference | None:
        """Plain decoding of this target, measured the way a reply's decode rate is (see ``engine.reference``);
        None where it cannot be measured now."""

    def rerun_plain(self, earlier: list[Message], text: str, reused_tokens: int, max_tokens: int,
                    should_stop: Callable[[], bool] = lambda: False) -> tuple[dict[str, Any], list[int]]:
        """A/B: ``text`` again without speculation, from the cache state (``reused_tokens`` of the prompt cached) the
        speculative reply started from; its telemetry summary (with ``finish_reason`` and ``peak_rss``) and tokens.
        The backend is left as it was, the conversation's trimmed window included."""

    def render(self, messages: list[Message]) -> str:
        """The text the target reads for ``messages`` followed by the assistant's turn (its chat template)."""

    def clear_cache(self, *, replies: bool = False) -> None:
        """Forget cached prompts, so the next reply decodes its whole prompt (benchmarks time cold prompts); with
        ``replies``, also the earlier replies a backend may draft from."""

    def model_files(self) -> dict[str, Path]:
        """Role ("target", "draft") → the model file in use."""

    def learn_stored_chats(self, read: StoredChats, *, wait: bool = False) -> None:
        """The user's earlier chats, for a method that drafts from them ("suffix"): ``read`` yields the stored replies
        and is called off the engine thread, whose replies never wait for it — unless ``wait``, which returns once
        they are indexed (a script's one reply). A backend whose drafting runs elsewhere ignores them."""

    def forget(self, what: Forgotten) -> None:
        """A stored chat was deleted or made private, or messages of one deleted: draft nothing more from them. Any
        thread may call this."""

    def close(self) -> None: ...


def open_backend(config: RunConfig, stored: StoredChats | None = None) -> Backend:
    """The backend a configuration asks for (``[backend] kind``: one of ``run_config.backend_kinds()``); ``stored``: the
    stored chats it drafts from too, where its method does (``Backend.learn_stored_chats``), given before it times
    anything."""
    return config.backend_kind.open(config, stored)


def switch_backend(current: Backend | None, config: RunConfig,
                   stored: StoredChats | None = None) -> tuple[Backend, str]:
    """The backend for ``config`` and what it took. A kind opened the way the current one was switches in place with
    the least work (keeping the stored chats it was given); another kind replaces it — the old one closed first, so
    two copies of a model never share the memory — and when the new one cannot open, the old one opens again and the
    error says so."""
    if current is None:
        return open_backend(config, stored), "loaded"
    if current.config.backend_kind.open is config.backend_kind.open:
        return current, current.apply(config)
    previous = current.config
    current.close()
    try:
        return open_backend(config, stored), "backend switched"
    except SpecchatError as exc:
        try:
            restored = open_backend(previous, stored)
        except SpecchatError as again:
            raise SwitchFailed(f"{exc} — and the previous profile could not be opened again: {again}", None) from None
        raise SwitchFailed(f"{exc} — the previous profile was opened again", restored) from None
