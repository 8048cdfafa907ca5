"""The specchat Textual app.

Data flows one way: backend → events → records and telemetry → widgets. The chat is owned by one ``ChatSession``:
views draw its records, the store saves them, and each question goes to the backend with the session's history. Every
call into the backend runs on the engine thread (``EngineThread``); its events collect in an inbox that the UI drains
once per frame into an ``EventsArrived`` message.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import deque
from collections.abc import Callable, Iterable
from enum import Enum
from pathlib import Path

from textual import on
from textual.app import App, ComposeResult, SystemCommand
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Static

from ..backends import Backend, open_backend
from ..chats.ab import ABResult, compare
from ..chats.export import export
from ..chats.records import ReplyRecord, UserTurn
from ..chats.session import ChatSession
from ..chats.store import Store, StoreError, open_store
from ..engine import EngineConfig, ModelSpec, ReplyFinished, ReplyStarted
from ..engine.core import PLAIN_RATE_TOKENS
from ..errors import SpecchatError, one_line
from ..profiles import Profile, engine_config, load_profile
from ..telemetry.live import LiveTelemetry
from ..telemetry.memory import peak_rss_bytes
from .engine_thread import EngineThread, lower_ui_priority, settle_garbage
from .keymap import APP_BINDINGS, load_keymap
from .terminal_input import tolerate_invalid_utf8
from .screens import ABScreen, ConversationsScreen, HelpScreen, ProfileScreen, SystemPromptScreen
from .settings import Settings
from .widgets.footer import Footer
from .widgets.prompt import PromptInput
from .widgets.reply import ReplyView, UserMessage, legend
from .widgets.sidebar import MemorySnapshot, ProfileInfo, Sidebar

# On a CPU the UI competes with llama.cpp's threads for the same cores: every redraw costs decode speed, about one
# for one. Tokens and the sidebar are therefore refreshed together, five times a second (the sidebar must lag by
# less than 250 ms), on the UI's own clock.
FRAME_S = 0.2


class Activity(Enum):
    LOADING = "loading"
    GENERATING = "generating"
    COMPARING = "comparing"


EXIT_WAIT_S = 30.0


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
        def __init__(self, profile: Profile, config: EngineConfig, action: str, plain_tps: float | None) -> None:
            super().__init__()
            self.profile, self.config, self.action, self.plain_tps = profile, config, action, plain_tps

    class LoadFailed(Message):
        def __init__(self, error: str) -> None:
            super().__init__()
            self.error = error

    class ReplyFailed(Message):
        """The engine stopped a reply with an error; ``started`` says whether it had accepted the message."""

        def __init__(self, error: str, started: bool) -> None:
            super().__init__()
            self.error, self.started = error, started

    class EngineFailed(Message):
        """An engine job raised; the engine thread goes on with the next one."""

        def __init__(self, error: str) -> None:
            super().__init__()
            self.error = error

    class ABFinished(Message):
        def __init__(self, result: ABResult) -> None:
            super().__init__()
            self.result = result

    def __init__(self, settings: Settings | None = None) -> None:
        super().__init__()
        self.settings = settings or Settings()
        self.telemetry = LiveTelemetry()
        self.backend: Backend | None = None
        self.profile: Profile | None = None
        self.conversation = ChatSession(None, self.settings.profile, None, self._store_problem)
        self.show_ghosts = False
        self.markdown = False
        self.status = ""
        self.busy: Activity | None = None
        self._cancel = threading.Event()
        self._views: dict[int, ReplyView | UserMessage] = {}  # id(turn) → its widget
        self._shown_notes: set[str] = set()
        self.memory_snapshot: MemorySnapshot | None = None
        self.engine_thread = EngineThread(lambda error: self.post_message(self.EngineFailed(error)))
        self._inbox: deque[object] = deque()  # filled by the engine thread, drained by the UI each frame

    # -- layout ------------------------------------------------------------------------------------------------------

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

    @property
    def sidebar(self) -> Sidebar:
        return self.query_one(Sidebar)

    @property
    def _last_reply(self) -> ReplyView | None:
        record = self.conversation.last_reply
        view = self._views.get(id(record)) if record is not None else None
        return view if isinstance(view, ReplyView) else None

    def _follow(self) -> None:
        """Anchor the chat once it overflows: it then follows the stream in the same layout pass that grows it.

        Scrolling up releases the anchor (reading is never interrupted), scrolling back to the bottom restores it.
        Anchoring a chat that does not fill the view yet would push it to the bottom of the screen.
        """
        if not self.chat.is_anchored and self.chat.max_scroll_y > 0:
            self.chat.anchor()

    def _show_turns(self) -> None:
        """Draw the whole chat again from the session (a chat opened, a new chat, a regenerated exchange)."""
        self.chat.remove_children()
        self.chat.anchor(False)
        self._views.clear()
        for turn in self.conversation.turns:
            self._mount_turn(turn)
        self.chat.scroll_end(animate=False)
        self.call_after_refresh(self._follow)

    def _mount_turn(self, turn: UserTurn | ReplyRecord) -> None:
        view = UserMessage(turn.text) if isinstance(turn, UserTurn) else ReplyView(turn, show_ghosts=self.show_ghosts,
                                                                                   markdown=self.markdown)
        self._views[id(turn)] = view
        self.chat.mount(view)

    def _drop_turns(self, index: int) -> None:
        """Remove the chat's turns from ``index`` on: from the session (and so the store) and from the screen."""
        for turn in self.conversation.turns[index:]:
            view = self._views.pop(id(turn), None)
            if view is not None:
                view.remove()
        self.conversation.drop_from(index)

    def on_mount(self) -> None:
        self.engine_thread.start()
        lower_ui_priority()
        self._frame_timer = self.set_interval(FRAME_S, self._drain_inbox, pause=True)
        try:
            self.set_keymap(load_keymap(self.settings.keymap))
        except SpecchatError as exc:
            self.notify(str(exc), severity="error", timeout=10)
        store = self._open_store()
        try:
            self.profile = load_profile(self.settings.profile)
        except SpecchatError as exc:
            self.notify(str(exc), severity="error", timeout=15)
        self.conversation = ChatSession(store, self.profile.name if self.profile else self.settings.profile,
                                        self._profile_system_prompt(), self._store_problem)
        if self.settings.resume and store is not None:
            try:
                chats = store.conversations()
                if chats:
                    self.conversation.open(chats[0].id)
                    self._show_turns()
            except StoreError as exc:  # the last chat cannot be read: start a new one, say why
                self.notify(str(exc), severity="error", timeout=20)
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

    @property
    def target_id(self) -> str:
        return self.backend.target_id if self.backend else ""

    def refresh_sidebar(self) -> None:
        method = self.backend.config.spec.method if self.backend else (self.profile.values["draft"]["method"]
                                                                        if self.profile else "–")
        profile = ProfileInfo(self.profile.name if self.profile else "(no profile)", method, self.status,
                              self.backend.where if self.backend else "")
        self.sidebar.show(self.telemetry, profile, self.memory_snapshot)

    def _sample_memory(self) -> None:
        files = self.backend.model_files() if self.backend else {}
        pid = self.backend.pid if self.backend else None
        self.memory_snapshot = MemorySnapshot(*self.settings.memory(pid), {role: path.stat().st_size
                                                                            for role, path in files.items()},
                                              "this process" if pid is None else f"server pid {pid}")

    def _profile_system_prompt(self) -> str | None:
        return (self.profile.values["chat"]["system_prompt"] or None) if self.profile else None

    # -- storage -----------------------------------------------------------------------------------------------------

    def _open_store(self) -> Store | None:
        if self.settings.db_path is None:
            return None
        store, problem = open_store(self.settings.db_path)
        if problem:
            self.notify(problem, severity="error", timeout=20)
        return store

    def _store_problem(self, line: str, error: bool) -> None:
        self.notify(line, severity="error" if error else "information", timeout=20 if error else 8)

    # -- the engine thread -------------------------------------------------------------------------------------------

    def _run(self, activity: Activity, status: str, job: Callable[[], None]) -> None:
        """Run ``job`` on the engine thread; it posts its own result, or EngineFailed if it raises."""
        self.busy = activity
        self.status = status
        self.refresh_sidebar()
        self.engine_thread.submit(job)

    def on_specchat_app_engine_failed(self, message: EngineFailed) -> None:
        self.busy = None
        self.status = ""
        self.notify(f"the engine stopped: {message.error}", severity="error", timeout=20)
        self.refresh_sidebar()

    # -- loading -------------------------------------------------------------------------------------------------------

    def start_load(self, name: str, draft: Path | None = None) -> None:
        if self.busy in (Activity.GENERATING, Activity.COMPARING):
            self.notify("wait for the reply to finish (or press Esc) before switching profiles", severity="warning")
            return
        system_prompt = self.conversation.system_prompt

        def job() -> None:
            try:
                profile = load_profile(name)
                config = engine_config(profile)
                if draft is not None:
                    config = dataclasses.replace(
                        config, draft=ModelSpec(draft, threads=config.target.threads),
                        spec=dataclasses.replace(config.spec, method="draft"),
                    )
                config = dataclasses.replace(config, system_prompt=system_prompt)
                if self.backend is None:
                    self.backend, action = open_backend(config), "loaded"
                else:
                    action = self.backend.apply(config)
            except SpecchatError as exc:
                self.post_message(self.LoadFailed(str(exc)))
                return
            plain = self.backend.measure_plain_rate() if action in ("loaded", "full reload") else None
            self.post_message(self.ProfileLoaded(profile, config, action, plain))

        self._run(Activity.LOADING, f"loading {Path(name).stem}…", job)

    def on_specchat_app_profile_loaded(self, message: ProfileLoaded) -> None:
        self.busy = None
        self.status = ""
        self.profile = message.profile
        self.conversation.set_profile(message.profile.name)
        if message.action in ("loaded", "full reload"):  # a reference measured on another target means nothing here
            self.telemetry.set_plain_reference(message.plain_tps, f"plain run of {PLAIN_RATE_TOKENS} tokens after"
                                               " loading, same loop")
        self.telemetry.reset_chat()
        self.telemetry.speculation = self.backend.speculation_state() if self.backend else None
        self.telemetry.n_max = self.backend.n_max if self.backend else 0
        self._sample_memory()
        settle_garbage()
        if message.action != "loaded":  # the first load needs no announcement; switches do
            self.notify(f"profile {message.profile.name}: {message.action}")
        for note in self.backend.notes if self.backend else []:
            if note not in self._shown_notes:
                self._shown_notes.add(note)
                self.notify(note, severity="warning", timeout=15)
        self.refresh_sidebar()

    def on_specchat_app_load_failed(self, message: LoadFailed) -> None:
        self.busy = None
        self.status = "load failed — previous profile kept" if self.backend else "no model loaded"
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
        if self.backend is None or self.busy is not None:
            if self.busy is Activity.LOADING:
                why = "the model is still loading — try again in a moment"
            elif self.backend is None:
                why = "no model is loaded — pick a profile with F2"
            else:
                why = "still answering — press Esc to cancel first"
            self.notify(why, severity="warning")
            self.query_one(PromptInput).load_text(text)
            return
        self._start_reply(text)

    def _start_reply(self, text: str) -> None:
        """Add the exchange to the session and its views, then answer on the engine thread."""
        history = self.conversation.engine_messages(self.target_id)
        user = self.conversation.add_user(text)
        text = user.text
        record = self.conversation.add_reply(self.target_id)
        self._mount_turn(user)
        self._mount_turn(record)
        self.chat.scroll_end(animate=False)
        self._cancel.clear()
        self._streaming(True)
        backend, max_tokens = self.backend, self.settings.max_tokens

        def job() -> None:
            started = False
            try:
                for event in backend.answer(history, text, max_tokens=max_tokens, should_stop=self._cancel.is_set):
                    started = started or isinstance(event, ReplyStarted)
                    self._inbox.append(event)  # all the engine thread does per event: it never waits on the UI
            except Exception as exc:
                self.post_message(self.ReplyFailed(one_line(exc), started))

        self._run(Activity.GENERATING, "", job)

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
        self._apply_events(message.events)
        self._follow()

    def _apply_events(self, events: list[object]) -> None:
        record = self.conversation.last_reply
        self.telemetry.consume(events)
        if record is None:
            return
        record.add(events)
        view = self._last_reply
        finished = next((e for e in events if isinstance(e, ReplyFinished)), None)
        if finished is not None and record.stats is not None:
            record.stats["peak_rss"] = peak_rss_bytes()  # since the reply began: the backend reset it then
        self.conversation.reply_changed(record)
        if view is not None:
            view.refresh_view()
            if finished is not None:
                view.set_markdown(self.markdown)
        if finished is not None:
            self._reply_over()
            self._sample_memory()
            settle_garbage()
        self.refresh_sidebar()

    def _reply_over(self) -> None:
        self._streaming(False)
        self.busy = None
        self.status = ""

    def on_specchat_app_reply_failed(self, message: ReplyFailed) -> None:
        events = list(self._inbox)
        self._inbox.clear()
        if events:  # what the engine said before failing (e.g. a trimmed context) still counts
            self._apply_events(events)
        self._reply_over()
        record = self.conversation.last_reply
        exchange = self.conversation.last_exchange()
        if not message.started and record is not None and exchange is not None:
            # Refused before it began (e.g. larger than the context): the exchange leaves no trace, the text goes
            # back to the prompt to be edited.
            index, text = exchange
            self._drop_turns(index)
            self.query_one(PromptInput).load_text(text)
        elif record is not None and record.streaming:
            record.finish_reason = "error"
            self.conversation.save()
            if self._last_reply is not None:
                self._last_reply.refresh_view()
        self.notify(message.error, severity="error", timeout=15)
        self.refresh_sidebar()

    def action_cancel(self) -> None:
        if self.busy is Activity.GENERATING:
            self._cancel.set()

    async def action_quit(self) -> None:
        self._save_on_exit()
        self.exit()

    def _save_on_exit(self) -> None:
        """Quitting mid-reply keeps what arrived, marked interrupted: never lose a chat."""
        if self.busy is Activity.GENERATING:
            self._cancel.set()
            events = list(self._inbox)
            self._inbox.clear()
            record = self.conversation.last_reply
            if record is not None:
                record.add(events)
        self.conversation.interrupt()

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
        current = self.backend.config.target.path if self.backend else None
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
        if self.show_ghosts and self.backend is not None and not self.backend.rejected_tails:
            self.notify(f"{self.backend.where} reports how many draft tokens it rejected, never which: no ghosts to"
                        " show for its replies", severity="warning")
        for view in self.query(ReplyView):
            view.set_ghosts(self.show_ghosts)

    def action_toggle_markdown(self) -> None:
        self.markdown = not self.markdown
        for view in self.query(ReplyView):
            view.set_markdown(self.markdown)

    def action_copy_reply(self) -> None:
        record = self.conversation.last_reply
        if record is not None and record.text:
            self.copy_to_clipboard(record.text)
            self.notify("reply copied to the clipboard")

    def action_copy_code(self) -> None:
        blocks = self._last_reply.code_blocks() if self._last_reply else []
        if blocks:
            self.copy_to_clipboard(blocks[-1])
            self.notify("code block copied to the clipboard")
        else:
            self.notify("the last reply has no code block", severity="warning")

    def action_regenerate(self) -> None:
        exchange = self.conversation.last_exchange()
        if exchange is None or self.busy is not None or self.backend is None:
            return
        index, text = exchange
        self._drop_turns(index)
        self._start_reply(text)

    def action_ab_compare(self) -> None:
        record = self.conversation.last_reply
        exchange = self.conversation.last_exchange()
        if self.backend is None or self.busy is not None or record is None or record.streaming or exchange is None \
                or record.stats is None:
            self.notify("A/B needs a finished reply to compare", severity="warning")
            return
        index, text = exchange
        backend, max_tokens = self.backend, self.settings.max_tokens
        history = self.conversation.engine_messages(self.target_id, upto=index)
        spec, spec_tokens = dict(record.stats), list(record.tokens)
        sampled = not backend.config.sampling.greedy

        def job() -> None:
            plain, plain_tokens = backend.rerun_plain(history, text, record.reused_tokens or 0, max_tokens)
            self.post_message(self.ABFinished(compare(spec, spec_tokens, plain, plain_tokens, sampled)))

        self._run(Activity.COMPARING, "A/B: rerunning without speculation…", job)

    def on_specchat_app_abfinished(self, message: ABFinished) -> None:
        self.busy = None
        self.status = ""
        plain_tps = message.result.plain.get("decode_tps")
        if plain_tps:  # a reply too short to measure keeps the reference there was
            self.telemetry.set_plain_reference(plain_tps, "A/B plain run of the last prompt, same loop")
        self.push_screen(ABScreen(message.result))
        self.refresh_sidebar()

    def action_new_chat(self) -> None:
        if self.busy is not None:
            return
        self.conversation.new(self._profile_system_prompt())
        self.telemetry.reset_chat()
        self._show_turns()
        self.refresh_sidebar()

    def action_conversations(self) -> None:
        if self.conversation.store is None:
            self.notify("chats are not being saved (no database) — nothing to list", severity="warning")
            return
        self.push_screen(ConversationsScreen(self.conversation.store), self._conversation_chosen)

    def _conversation_chosen(self, choice: tuple[str, int] | None) -> None:
        if choice is None or self.busy is not None:
            return
        action, conversation_id = choice
        if action == "open":
            self.open_conversation(conversation_id)
        elif action == "export":
            current = self.conversation
            other = ChatSession(current.store, current.profile, None, self._store_problem)
            try:
                other.open(conversation_id)
            except StoreError as exc:
                self.notify(str(exc), severity="error")
                return
            self._export(other)

    def open_conversation(self, conversation_id: int) -> None:
        try:
            self.conversation.open(conversation_id)
        except (StoreError, OSError) as exc:
            self.notify(one_line(exc), severity="error")
            return
        self.telemetry.reset_chat()
        self._show_turns()
        self.refresh_sidebar()

    def action_export(self) -> None:
        if not self.conversation.turns:
            self.notify("nothing to export yet", severity="warning")
            return
        self._export(self.conversation)

    def _export(self, session: ChatSession) -> None:
        try:
            md_path, json_path = export(session, self.settings.exports)
        except OSError as exc:
            self.notify(f"cannot export to {self.settings.exports}: {exc.strerror or exc}", severity="error")
            return
        self.notify(f"exported to {md_path} and {json_path.name}")

    def action_system_prompt(self) -> None:
        self.push_screen(SystemPromptScreen(self.conversation.system_prompt or ""), self._system_prompt_set)

    def _system_prompt_set(self, text: str | None) -> None:
        if text is None or self.busy is not None:
            return
        self.conversation.set_system_prompt(text.strip() or None)
        self.notify("system prompt set for this chat")

    def on_unmount(self) -> None:
        self._save_on_exit()
        if self.backend is not None:  # after the job in progress, which stops at its next step (cancelled above)
            self.engine_thread.submit(self.backend.close)
        self.engine_thread.stop()
        # Wait for that step and the close: the interpreter's shutdown must not free a model under a step still
        # decoding (a segfault). A step takes milliseconds; a server backend's close waits at most its stop timeout.
        self.engine_thread.join(EXIT_WAIT_S)


def make_app(settings: Settings | None = None) -> SpecchatApp:
    """The app factory used by ``specchat`` and by the tests."""
    tolerate_invalid_utf8()
    return SpecchatApp(settings)
