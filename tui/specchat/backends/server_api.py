"""The two ways a server is spoken to, as objects: llama.cpp's own API (``/completion`` with token ids, ``/props``,
``/slots``) and an OpenAI-compatible server's chat completions (vLLM, or llama-server's ``/v1``). A server backend holds
one and asks it what differs — how a reply streams, which template renders the prompt, what a cache erase is, what
the sidebar should be told — instead of branching on the API's name."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from ..engine.chat_template import ChatTemplate
from ..engine.conversation import Message, TokenWindow, as_dicts
from ..engine.events import Event, SpeculationState
from ..errors import BackendError
from .completion import CompletionStream, Request
from .run_config import RunConfig
from .http import get_json, post_json
from .openai_chat import chat_completion


@dataclass(frozen=True)
class Link:
    """Where a server is and how to authenticate to it."""

    url: str
    headers: dict[str, str]
    key_env: str | None  # the variable that holds the key, named in errors (never the key)


@dataclass(frozen=True)
class Turn:
    """What one reply asks of a server beyond the conversation."""

    config: RunConfig
    state: SpeculationState
    draft_length: int  # in use (the server's: the cap it was started with)
    max_tokens: int
    should_stop: Callable[[], bool]
    top: int = 0


class ServerApi(Protocol):
    """What differs between the APIs; constructed once the server and the conversation's tokenizer are known."""

    name: str  # as [backend] api names it

    def __init__(self, link: Link, stream: CompletionStream, chat: TokenWindow | None,
                 template: ChatTemplate | None) -> None: ...

    @staticmethod
    def server_template(link: Link, props: dict[str, Any]) -> ChatTemplate | None:
        """The template that renders prompts here when the target's GGUF is not on this machine (None: the server
        renders its own)."""

    @property
    def note(self) -> str:
        """What this API cannot show, for the sidebar's notes ("" when it shows everything)."""

    @property
    def times_plain_runs(self) -> bool:
        """Whether a plain run can be timed as a reply is (token ids both ways, the model tokenized here)."""

    def answer(self, earlier: list[Message], text: str, turn: Turn) -> Iterator[Event]: ...

    def erase_cache(self) -> None:
        """Forget the server's cached prompt, where the API has a way to."""


def detect(link: Link) -> tuple[str, dict[str, Any]]:
    """The API a server speaks and its /props: a llama-server answers /props with its chat template; anything else is
    taken for OpenAI-compatible."""
    try:
        props = get_json(f"{link.url}/props", link.headers, key_env=link.key_env)
    except BackendError as exc:
        if "HTTP 404" not in str(exc):
            raise
        props = {}
    return ("llama.cpp" if "chat_template" in props else "openai"), props


class CompletionApi:
    """llama.cpp's ``/completion``: token ids when the tokenizer is here (the conversation trimmed as the engine trims
    it), else the text the template renders."""

    name = "llama.cpp"
    note = ""

    def __init__(self, link: Link, stream: CompletionStream, chat: TokenWindow | None,
                 template: ChatTemplate | None) -> None:
        self.link, self.stream, self.chat, self.template = link, stream, chat, template

    @staticmethod
    def server_template(link: Link, props: dict[str, Any]) -> ChatTemplate:
        """The server's own template (from /props), rendered here so the conversation's text is the server's."""
        return ChatTemplate(props.get("chat_template") or None, builtin="chatml", bos_token=props.get("bos_token", ""),
                            eos_token=props.get("eos_token", ""), source=f"{link.url}'s template")

    @property
    def times_plain_runs(self) -> bool:
        return self.chat is not None

    def answer(self, earlier: list[Message], text: str, turn: Turn) -> Iterator[Event]:
        user = Message("user", text)
        config = turn.config
        if self.chat is None:
            assert self.template is not None
            prompt: list[int] | str = self.template.render(as_dicts([*earlier, user]), add_generation_prompt=True)
        else:
            self.chat.restore(earlier)
            prompt, rendered, kept, trimmed = self.chat.prompt(user, min(turn.max_tokens, config.n_ctx // 4),
                                                               config.n_ctx)
            self.chat.begin_turn(kept, user, prompt, rendered)
            if trimmed:
                yield trimmed
        sampling = config.sampling
        body = {"temperature": sampling.temperature, "top_k": sampling.top_k, "top_p": sampling.top_p,
                "min_p": sampling.min_p, "seed": sampling.seed}
        request = Request(self.link.url, self.link.headers, self.link.key_env, prompt, body, turn.max_tokens,
                          config.n_ctx, turn.state, turn.draft_length, turn.top, config.loop)
        yield from self.stream.events(request, turn.should_stop)

    def erase_cache(self) -> None:
        try:
            post_json(f"{self.link.url}/slots/0?action=erase", {}, self.link.headers, key_env=self.link.key_env)
        except BackendError:
            pass  # a server with slot actions switched off keeps its cache; the next prompt reuses what matches


class ChatCompletionsApi:
    """An OpenAI-compatible server's chat completions: it renders its own prompts and streams text without ids."""

    name = "openai"
    times_plain_runs = False

    def __init__(self, link: Link, stream: CompletionStream, chat: TokenWindow | None,
                 template: ChatTemplate | None) -> None:
        self.link = link  # the prompt is rendered and tokenized by the server: nothing else of ours is used

    @staticmethod
    def server_template(link: Link, props: dict[str, Any]) -> None:
        return None

    @property
    def note(self) -> str:
        return (f"{self.link.url} streams text without token ids: tokens are not coloured, their counts are tiktoken's"
                " estimates (≈), and the reply's draft counts come from its /metrics")

    def answer(self, earlier: list[Message], text: str, turn: Turn) -> Iterator[Event]:
        return chat_completion(self.link.url, self.link.headers, self.link.key_env, turn.config, earlier, text,
                               turn.max_tokens, turn.should_stop, turn.top)

    def erase_cache(self) -> None:
        """Nothing: chat completions have no cache to erase."""


BY_NAME: dict[str, type[ServerApi]] = {api.name: api for api in (CompletionApi, ChatCompletionsApi)}
