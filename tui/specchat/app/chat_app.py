"""The specchat Textual app.

Models load and replies generate on the engine thread; its events collect in an inbox that the UI drains once per
frame into an ``EventsArrived`` message, and flow one way: engine → events → ``LiveTelemetry`` → widgets.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import re
import sqlite3
import threading
from collections import deque
from collections.abc import Iterable
from pathlib import Path

from textual import on
from textual.app import App, ComposeResult, SystemCommand
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Static

from ..engine import Engine, EngineConfig, ModelSpec, ReplyFinished
from ..engine.core import Message as ChatMessage
from ..errors import SpecchatError
from ..profiles import Profile, engine_config, load_profile
from ..store import Store, StoredMessage, StoreError
from ..telemetry.live import LiveTelemetry
from ..telemetry.memory import peak_rss_bytes, reset_peak_rss
from .chat_screen import ChatScreen
from .engine_thread import EngineThread, lower_ui_priority
from .keymap import APP_BINDINGS, load_keymap
from .screens import ABResult, ABScreen, ConversationsScreen, HelpScreen, ProfileScreen, SystemPromptScreen
from .settings import Settings
from .widgets.prompt import PromptInput
from .widgets.reply import ReplyView, UserMessage, legend
from .widgets.sidebar import MemorySnapshot, ProfileInfo, Sidebar

# On a CPU the UI competes with llama.cpp's threads for the same cores: every redraw costs decode speed, about one
# for one. Tokens and the sidebar are therefore refreshed together, five times a second (the sidebar must lag by
# less than 250 ms), on the UI's own clock.
FRAME_S = 0.2


class SpecchatApp(App):
    CSS_PATH = "specchat.tcss"
    BINDINGS = APP_BINDINGS
    TITLE = "specchat"

    class EventsArrived(Message):
        """Engine events of one frame, drained from the engine thread's inbox."""

        def __init__(self, events: list[object]) -> None:
            super().__init__()
            self.events = events

    class ProfileLoaded(Message):
        def __init__(self, profile: Profile, config: EngineConfig, action: str, plain_step: float | None) -> None:
            super().__init__()
            self.profile, self.config, self.action, self.plain_step = profile, config, action, plain_step

    class LoadFailed(Message):
        def __init__(self, error: str) -> None:
            super().__init__()
            self.error = error

    class ReplyFailed(Message):
        """The engine refused the message (e.g. larger than the context); nothing was generated."""

        def __init__(self, error: str) -> None:
            super().__init__()
            self.error = error

    class ABFinished(Message):
        def __init__(self, result: ABResult | None, error: str | None = None) -> None:
            super().__init__()
            self.result, self.error = result, error

    def __init__(self, settings: Settings | None = None) -> None:
        super().__init__()
        self.settings = settings or Settings()
        self.telemetry = LiveTelemetry()
        self.engine: Engine | None = None
        self.profile: Profile | None = None
        self.store: Store | None = None
        self.conversation_id: int | None = None
        self.system_prompt: str | None = None
        self.show_ghosts = False
        self.markdown = False
        self.status = ""
        self.busy: str | None = None  # "loading", "generating" or "comparing"
        self._cancel = threading.Event()
        self._engine_lock = threading.Lock()
        self._last_reply: ReplyView | None = None
        self.memory_snapshot: MemorySnapshot | None = None
        self.engine_thread = EngineThread()
        self._inbox: deque[object] = deque()  # filled by the engine thread, drained by the UI each frame

    # -- layout ------------------------------------------------------------------------------------------------------

    def get_default_screen(self) -> Screen:
        return ChatScreen(id="_default")

    def compose(self) -> ComposeResult:
        with Horizontal(id="main"):
            with Vertical(id="chat-column"):
                yield VerticalScroll(id="chat")
                yield Static(legend(), id="legend")
                yield PromptInput(max_paste=self.settings.max_paste_chars)
            yield Sidebar()
        yield Footer()

    @property
    def chat(self) -> VerticalScroll:
        return self.query_one("#chat", VerticalScroll)

    def _follow(self) -> None:
        """Anchor the chat once it overflows: it then follows the stream in the same layout pass that grows it.

        Scrolling up releases the anchor (reading is never interrupted), scrolling back to the bottom restores it.
        Anchoring a chat that does not fill the view yet would push it to the bottom of the screen.
        """
        if not self.chat.is_anchored and self.chat.max_scroll_y > 0:
            self.chat.anchor()

    def _clear_chat(self) -> None:
        self.chat.remove_children()
        self.chat.anchor(False)
        self._last_reply = None

    @property
    def sidebar(self) -> Sidebar:
        return self.query_one(Sidebar)

    def on_mount(self) -> None:
        self.engine_thread.start()
        lower_ui_priority()
        self._frame_timer = self.set_interval(FRAME_S, self._drain_inbox, pause=True)
        try:
            self.set_keymap(load_keymap(self.settings.keymap))
        except SpecchatError as exc:
            self.notify(str(exc), severity="error", timeout=10)
        self._open_store()
        try:
            self.profile = load_profile(self.settings.profile)
            self.system_prompt = self.profile.values["chat"]["system_prompt"] or None
        except SpecchatError as exc:
            self.notify(str(exc), severity="error", timeout=15)
        if self.settings.resume and self.store is not None:
            chats = self.store.conversations()
            if chats:
                self.open_conversation(chats[0].id)
        if self.settings.autoload and self.profile is not None:
            self.start_load(str(self.profile.path))
        self.query_one(PromptInput).focus()
        self._apply_width(self.size.width)
        self.refresh_sidebar()

    def on_resize(self, event) -> None:
        self._apply_width(event.size.width)

    def _apply_width(self, width: int) -> None:
        # A narrow terminal keeps the chat usable: the sidebar collapses instead of squeezing it.
        self.sidebar.display = width >= self.settings.sidebar_min_width

    def refresh_sidebar(self) -> None:
        profile = ProfileInfo(
            self.profile.name if self.profile else "(no profile)",
            self.engine.config.spec.method if self.engine else (self.profile.values["draft"]["method"] if self.profile else "–"),
            self.status,
        )
        self.sidebar.show(self.telemetry, profile, self.memory_snapshot)

    def _sample_memory(self) -> None:
        sizes = {}
        if self.engine is not None:
            sizes["target"] = self.engine.target.path.stat().st_size
            if self.engine.draft_model is not None:
                sizes["draft"] = self.engine.draft_model.path.stat().st_size
        self.memory_snapshot = MemorySnapshot(*self.settings.memory(), sizes)

    # -- storage -----------------------------------------------------------------------------------------------------

    def _open_store(self) -> None:
        if self.settings.db_path is None:
            return
        try:
            self.store = Store(self.settings.db_path)
        except StoreError as exc:
            self.store = None
            self.notify(str(exc), severity="error", timeout=20)

    def _store_call(self, method: str, *args) -> object:
        """Run one store operation; a failing database switches the app to in-memory chatting, and says so."""
        if self.store is None:
            return None
        try:
            return getattr(self.store, method)(*args)
        except (sqlite3.Error, StoreError) as exc:
            self.store = None
            self.notify(
                f"cannot save to {self.settings.db_path} ({exc}) — chatting continues in memory, nothing more is saved",
                severity="error", timeout=20,
            )
            return None

    def open_conversation(self, conversation_id: int) -> None:
        assert self.store is not None
        conversation = self.store.get(conversation_id)
        stored = self.store.messages(conversation_id)
        self.conversation_id = conversation_id
        self.system_prompt = conversation.system_prompt
        self._clear_chat()
        for message in stored:
            if message.role == "user":
                self.chat.mount(UserMessage(message.content))
            elif message.role == "assistant":
                view = ReplyView(show_ghosts=self.show_ghosts)
                self.chat.mount(view)
                view.load(message.segments or [(message.content, "target")], message.ghosts, message.finish_reason)
                self._last_reply = view
        self.chat.scroll_end(animate=False)
        self.call_after_refresh(self._follow)
        if self.engine is not None:
            self._restore_engine(stored, conversation.profile)

    def _restore_engine(self, stored: list[StoredMessage], profile_name: str) -> None:
        assert self.engine is not None
        same_target = self.profile is not None and profile_name == self.profile.name
        messages = ([ChatMessage("system", self.system_prompt)] if self.system_prompt else []) + [
            ChatMessage(m.role, m.content, m.tokens if same_target else None, m.finish_reason) for m in stored
        ]
        self.engine.restore(messages)

    # -- loading -------------------------------------------------------------------------------------------------------

    def load_profile_worker(self, name: str, draft: Path | None = None) -> None:
        try:
            profile = load_profile(name)
            config = engine_config(profile)
            if draft is not None:
                config = dataclasses.replace(
                    config, draft=ModelSpec(draft, threads=config.target.threads),
                    spec=dataclasses.replace(config.spec, method="draft"),
                )
            config = dataclasses.replace(config, system_prompt=self.system_prompt)
            with self._engine_lock:
                if self.engine is None:
                    engine = Engine(config)
                    action = "loaded"
                else:
                    engine = self.engine
                    action = engine.apply(config)
                plain_step = engine.measure_plain_step()
            self.engine = engine
            self.post_message(self.ProfileLoaded(profile, config, action, plain_step))
        except SpecchatError as exc:
            self.post_message(self.LoadFailed(str(exc)))

    def start_load(self, name: str, draft: Path | None = None) -> None:
        if self.busy in ("generating", "comparing"):
            self.notify("wait for the reply to finish (or press Esc) before switching profiles", severity="warning")
            return
        self.busy = "loading"
        self.status = f"loading {Path(name).stem}…"
        self.refresh_sidebar()
        self.engine_thread.submit(lambda: self.load_profile_worker(name, draft))

    def on_specchat_app_profile_loaded(self, message: ProfileLoaded) -> None:
        self.busy = None
        self.status = ""
        self.profile = message.profile
        if message.plain_step:
            self.telemetry.set_plain_reference(1 / message.plain_step, "single-token step, measured")
        self.telemetry.speculation = self.engine.speculation_state() if self.engine else None
        self.telemetry.n_max = self.engine.n_max if self.engine and self.engine.config.spec.method != "none" else 0
        self._sample_memory()
        settle_garbage()
        if self.conversation_id is not None and self.store is not None and message.action in ("loaded", "full reload"):
            self._restore_engine(self.store.messages(self.conversation_id), self.store.get(self.conversation_id).profile)
        if message.action != "loaded":  # the first load needs no announcement; switches do
            self.notify(f"profile {message.profile.name}: {message.action}")
        self.refresh_sidebar()

    def on_specchat_app_load_failed(self, message: LoadFailed) -> None:
        self.busy = None
        self.status = "load failed — previous profile kept" if self.engine else "no model loaded"
        self.notify(message.error, severity="error", timeout=20)
        self.refresh_sidebar()

    # -- generation ----------------------------------------------------------------------------------------------------

    @on(PromptInput.Submitted)
    def send(self, message: PromptInput.Submitted) -> None:
        self.submit(message.text)

    @on(PromptInput.PasteRefused)
    def paste_refused(self, message: PromptInput.PasteRefused) -> None:
        self.notify(f"paste of {message.size:,} characters refused (limit {message.limit:,}) — attach less text",
                    severity="warning")

    def submit(self, text: str) -> None:
        if not text.strip():
            return
        if self.engine is None or self.busy == "loading":
            self.notify("the model is still loading — try again in a moment" if self.busy == "loading"
                        else "no model is loaded — pick a profile with F2", severity="warning")
            self.query_one(PromptInput).load_text(text)
            return
        if self.busy:
            self.notify("still answering — press Esc to cancel first", severity="warning")
            self.query_one(PromptInput).load_text(text)
            return
        if self.conversation_id is None:
            title = " ".join(text.split())[:48]
            self.conversation_id = self._store_call("create", title, self.profile.name if self.profile else "", self.system_prompt)
        if self.conversation_id is not None:
            self._store_call("append", self.conversation_id, StoredMessage("user", text))
        self.chat.mount(UserMessage(text))
        self._start_reply(text)

    def _start_reply(self, text: str) -> None:
        view = ReplyView(show_ghosts=self.show_ghosts)
        self.chat.mount(view)
        self._last_reply = view
        self.chat.scroll_end(animate=False)
        self.busy = "generating"
        self._cancel.clear()
        self._streaming(True)
        self.engine_thread.submit(lambda: self.generate(text))

    def generate(self, text: str) -> None:
        with self._engine_lock:
            assert self.engine is not None
            reset_peak_rss()
            try:
                for event in self.engine.reply(text, max_tokens=self.settings.max_tokens,
                                               should_stop=self._cancel.is_set):
                    self._inbox.append(event)  # all the engine thread does per event: it never waits on the UI
            except SpecchatError as exc:
                self.post_message(self.ReplyFailed(str(exc)))

    def _streaming(self, on: bool) -> None:
        """Frames run while a reply streams; the prompt's cursor stops blinking then, since each blink is a frame."""
        if on:
            self._frame_timer.resume()
        else:
            self._frame_timer.pause()
        self.query_one(PromptInput).cursor_blink = not on

    def _drain_inbox(self) -> None:
        events = []
        while self._inbox:
            events.append(self._inbox.popleft())
        if events:
            self.post_message(self.EventsArrived(events))

    def on_specchat_app_events_arrived(self, message: EventsArrived) -> None:
        view = self._last_reply
        self.telemetry.consume(message.events)
        if view is not None:
            view.add(message.events)
        finished = next((e for e in message.events if isinstance(e, ReplyFinished)), None)
        if finished is not None:
            self._streaming(False)
            self.busy = None
            if view is not None:
                view.finish(finished.finish_reason)
                view.set_markdown(self.markdown)
                self._save_reply(view, finished)
            self._sample_memory()
            settle_garbage()
        self.refresh_sidebar()
        self._follow()

    def on_specchat_app_reply_failed(self, message: ReplyFailed) -> None:
        self._drain_inbox()  # what the engine said before failing (e.g. a trimmed context) still reaches the telemetry
        self._streaming(False)
        self.busy = None
        if self._last_reply is not None and not self._last_reply.segments:
            self._last_reply.remove()
            self._last_reply = None
        self.notify(message.error, severity="error", timeout=15)
        self.refresh_sidebar()

    def _save_reply(self, view: ReplyView, finished: ReplyFinished) -> None:
        if self.conversation_id is None:
            return
        summary = finished.stats.summary() | {"peak_rss": peak_rss_bytes()}
        stored = StoredMessage("assistant", finished.text, list(view.tokens), list(view.segments),
                               sorted(view.ghosts.items()), finished.finish_reason, summary)
        self._store_call("append", self.conversation_id, stored)

    def action_cancel(self) -> None:
        if self.busy == "generating":
            self._cancel.set()

    # -- actions -------------------------------------------------------------------------------------------------------

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Profiles", "Switch profile or draft model (F2)", self.action_profiles)
        yield SystemCommand("A/B compare", "Rerun the last prompt without speculation", self.action_ab_compare)
        yield SystemCommand("Toggle ghosts", "Show rejected draft tokens", self.action_toggle_ghosts)
        yield SystemCommand("Export chat", "Export this chat to Markdown and JSON", self.action_export)

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.settings.keymap))

    def action_profiles(self) -> None:
        current = self.engine.config.target.path if self.engine else None
        self.push_screen(ProfileScreen(current, self.profile.name if self.profile else None), self._profile_chosen)

    def _profile_chosen(self, choice: tuple[str, object] | None) -> None:
        if choice is None:
            return
        kind, value = choice
        if kind == "profile":
            self.start_load(str(value))
        elif kind == "draft" and self.profile is not None:
            self.start_load(str(self.profile.path), Path(str(value)))

    def action_toggle_ghosts(self) -> None:
        self.show_ghosts = not self.show_ghosts
        for view in self.query(ReplyView):
            view.set_ghosts(self.show_ghosts)

    def action_toggle_markdown(self) -> None:
        self.markdown = not self.markdown
        for view in self.query(ReplyView):
            view.set_markdown(self.markdown)

    def action_copy_reply(self) -> None:
        if self._last_reply is not None and self._last_reply.text:
            self.copy_to_clipboard(self._last_reply.text)
            self.notify("reply copied to the clipboard")

    def action_copy_code(self) -> None:
        blocks = self._last_reply.code_blocks() if self._last_reply else []
        if blocks:
            self.copy_to_clipboard(blocks[-1])
            self.notify("code block copied to the clipboard")
        else:
            self.notify("the last reply has no code block", severity="warning")

    def _last_prompt(self) -> str | None:
        if self.engine is None:
            return None
        users = [m for m in self.engine.messages if m.role == "user"]
        return users[-1].content if users else None

    def action_regenerate(self) -> None:
        prompt = self._last_prompt()
        if prompt is None or self.busy or self.engine is None:
            return
        messages = self.engine.messages
        if messages and messages[-1].role == "assistant":
            with self._engine_lock:
                self.engine.restore(messages[:-2])
            if self._last_reply is not None:
                self._last_reply.remove()
            if self.conversation_id is not None and self.store is not None:
                self._store_call("truncate", self.conversation_id, len(self.store.messages(self.conversation_id)) - 1)
        self._start_reply(prompt)

    def action_ab_compare(self) -> None:
        if self.engine is None or self.busy or self._last_reply is None or self._last_reply.finish_reason is None:
            self.notify("A/B needs a finished reply to compare", severity="warning")
            return
        self.busy = "comparing"
        self.status = "A/B: rerunning without speculation…"
        self.refresh_sidebar()
        stored = self.store.messages(self.conversation_id) if self.store and self.conversation_id else []
        spec_stats = stored[-1].telemetry if stored and stored[-1].role == "assistant" else None
        self.engine_thread.submit(lambda: self.ab_worker(spec_stats))

    def ab_worker(self, spec_stats: dict | None) -> None:
        with self._engine_lock:
            engine = self.engine
            assert engine is not None
            messages = list(engine.messages)
            original = engine.config
            spec_reply = messages[-1]
            try:
                engine.restore(messages[:-2])
                engine.apply(dataclasses.replace(original, spec=dataclasses.replace(original.spec, method="none")))
                reset_peak_rss()
                finished = None
                for event in engine.reply(messages[-2].content, max_tokens=self.settings.max_tokens):
                    if isinstance(event, ReplyFinished):
                        finished = event
                plain_peak = peak_rss_bytes()
                assert finished is not None
                result = ABResult.build(spec_stats, spec_reply.tokens, finished.stats.summary(),
                                        engine.messages[-1].tokens, plain_peak)
            except SpecchatError as exc:
                self.post_message(self.ABFinished(None, str(exc)))
                return
            finally:
                engine.apply(original)
                engine.restore(messages)
            self.post_message(self.ABFinished(result))

    def on_specchat_app_abfinished(self, message: ABFinished) -> None:
        self.busy = None
        self.status = ""
        if message.result is None:
            self.notify(f"A/B failed: {message.error}", severity="error")
        else:
            plain_tps = message.result.plain.get("decode_tps")
            if plain_tps:
                self.telemetry.set_plain_reference(plain_tps, "A/B plain run")
            self.push_screen(ABScreen(message.result))
        self.refresh_sidebar()

    def action_new_chat(self) -> None:
        if self.busy:
            return
        self.conversation_id = None
        self.system_prompt = self.profile.values["chat"]["system_prompt"] or None if self.profile else None
        self._clear_chat()
        if self.engine is not None:
            with self._engine_lock:
                self.engine.restore([ChatMessage("system", self.system_prompt)] if self.system_prompt else [])

    def action_conversations(self) -> None:
        if self.store is None:
            self.notify("chats are not being saved (no database) — nothing to list", severity="warning")
            return
        self.push_screen(ConversationsScreen(self.store), self._conversation_chosen)

    def _conversation_chosen(self, choice: tuple[str, int] | None) -> None:
        if choice is None or self.busy:
            return
        action, conversation_id = choice
        if action == "open":
            self.open_conversation(conversation_id)
        elif action == "export":
            self.export(conversation_id)

    def action_export(self) -> None:
        if self.conversation_id is None or self.store is None:
            self.notify("nothing saved to export yet", severity="warning")
            return
        self.export(self.conversation_id)

    def export(self, conversation_id: int) -> list[Path]:
        assert self.store is not None
        conversation = self.store.get(conversation_id)
        messages = self.store.messages(conversation_id)
        slug = re.sub(r"[^a-z0-9]+", "-", conversation.title.lower()).strip("-")[:40] or "chat"
        directory = self.settings.exports
        directory.mkdir(parents=True, exist_ok=True)
        base = directory / f"chat-{conversation_id}-{slug}"
        md = [f"# {conversation.title}", "", f"*profile {conversation.profile}*", ""]
        if conversation.system_prompt:
            md += [f"> system: {conversation.system_prompt}", ""]
        for m in messages:
            md += [f"## {m.role}", "", m.content, ""]
        md_path, json_path = base.with_suffix(".md"), base.with_suffix(".json")
        md_path.write_text("\n".join(md))
        json_path.write_text(json.dumps({
            "title": conversation.title, "profile": conversation.profile, "system_prompt": conversation.system_prompt,
            "messages": [dataclasses.asdict(m) for m in messages],
        }, indent=1))
        self.notify(f"exported to {md_path} and {json_path.name}")
        return [md_path, json_path]

    def action_system_prompt(self) -> None:
        self.push_screen(SystemPromptScreen(self.system_prompt or ""), self._system_prompt_set)

    def _system_prompt_set(self, text: str | None) -> None:
        if text is None or self.busy:
            return
        self.system_prompt = text.strip() or None
        if self.conversation_id is not None:
            self._store_call("set_system_prompt", self.conversation_id, self.system_prompt)
        if self.engine is not None:
            with self._engine_lock:
                rest = [m for m in self.engine.messages if m.role != "system"]
                system = [ChatMessage("system", self.system_prompt)] if self.system_prompt else []
                self.engine.restore(system + rest)
        self.notify("system prompt set for this chat")

    def on_unmount(self) -> None:
        self.engine_thread.stop()


def settle_garbage() -> None:
    """Collect everything now, between replies, and leave what survives out of later collections.

    A full collection walks every object of the app — Textual's DOM, llama-cpp-python's — and takes 40–130 ms on this
    CPU; one that falls during a reply stalls decoding (in the engine thread) or a frame. Frozen objects are skipped by
    the automatic collections, so during a reply they only look at what was allocated since.
    """
    gc.unfreeze()
    gc.collect()
    gc.freeze()


def make_app(settings: Settings | None = None) -> SpecchatApp:
    """The app factory used by ``specchat`` and by the tests."""
    return SpecchatApp(settings)

