"""What the app's mixins — streaming, switching, chat_actions, editing, inspecting — use of the app they are mixed
into, declared once: so a reader, and a type checker, can follow ``self.controller`` from any of them. Each mixin
derives from ``MixinBase``: this protocol for a type checker, ``object`` at run time. tests/app/test_app_host.py checks
that every ``self.`` name a mixin uses is its own or declared here."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from textual.containers import VerticalScroll
    from textual.css.query import DOMQuery
    from textual.message import Message
    from textual.screen import Screen
    from textual.timer import Timer
    from textual.widget import Widget

    from ..backends import Backend
    from ..chats.controller import ChatController
    from ..chats.exchange import Exchange
    from ..chats.records import ReplyRecord, UserTurn
    from ..chats.session import ChatSession
    from ..profiles import Profile
    from .chat_app import SpecchatApp
    from ..chats.replies import Activity, Replies
    from .settings import Settings
    from .widgets.reply import ReplyView, UserMessage


class AppHost(Protocol):
    # -- the app's state (chat_app.SpecchatApp) --------------------------------------------------------------------
    settings: Settings
    controller: ChatController
    replies: Replies  # the backend's worker thread and the reply's frames
    busy: Activity | None  # what the worker is doing for the UI
    status: str  # the line the sidebar shows under the profile
    markdown: bool
    views: dict[int, ReplyView | UserMessage]  # id(turn) → its widget
    frame_timer: Timer

    FrameArrived: type[SpecchatApp.FrameArrived]
    ProfileLoaded: type[SpecchatApp.ProfileLoaded]
    LoadPhaseBegun: type[SpecchatApp.LoadPhaseBegun]
    LoadFailed: type[SpecchatApp.LoadFailed]

    @property
    def session(self) -> ChatSession: ...
    @property
    def backend(self) -> Backend | None: ...
    @property
    def profile(self) -> Profile | None: ...
    @property
    def chat(self) -> VerticalScroll: ...
    @property
    def last_reply(self) -> ReplyView | None: ...

    def show_turns(self) -> None: ...
    def mount_turn(self, turn: UserTurn | ReplyRecord) -> None: ...
    def view_of(self, turn: UserTurn | ReplyRecord) -> ReplyView | UserMessage | None: ...
    def follow_chat(self) -> None: ...
    def forget_views(self) -> None: ...
    def refresh_sidebar(self) -> None: ...
    def sample_memory(self) -> None: ...
    def run_job(self, activity: Activity, status: str, job: Callable[[], None]) -> None: ...
    def job_done(self) -> None: ...
    def set_job(self, activity: Activity | None, status: str) -> None: ...
    def binding_key(self, binding_id: str) -> str: ...

    # -- what one mixin offers the others -------------------------------------------------------------------------
    selected: int | None  # editing: the selected turn
    editing: int | None  # editing: the user turn the prompt holds
    edit_sent: int | None  # editing: the turn the exchange in progress edits

    def show_selection(self) -> None: ...
    def forget_selection(self) -> None: ...
    def send_edit(self, text: str) -> bool: ...
    def cancel_edit(self) -> bool: ...
    def why_busy(self) -> str | None: ...  # streaming
    def send_waiting(self) -> None: ...  # streaming
    def start_exchange(self, exchange: Exchange) -> None: ...  # streaming

    # -- Textual's App, as the mixins call it ---------------------------------------------------------------------
    def notify(self, message: str, *, title: str = "", severity: str = "information",
               timeout: float | None = None, markup: bool = True) -> None: ...
    def push_screen(self, screen: Screen[Any], callback: Callable[[Any], Any] | None = None) -> Any: ...
    def query_one(self, selector: Any, expect_type: Any = None) -> Any: ...
    def query(self, selector: Any = None) -> DOMQuery[Widget]: ...
    def post_message(self, message: Message) -> bool: ...
    def copy_to_clipboard(self, text: str) -> None: ...


if TYPE_CHECKING:
    MixinBase = AppHost
else:
    MixinBase = object
